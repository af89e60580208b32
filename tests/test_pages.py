"""Tests that hold for every page: they find the repository's committed data wherever they are run from."""
import json, re, subprocess, sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RELATIVE = re.compile(r"""["']\.\./""")          # a string that starts one folder up: right from nbs/, wrong from the root


@pytest.mark.parametrize("page", sorted(p.name for p in (ROOT / "nbs").glob("*.ipynb")))
def test_no_page_reads_by_a_path_relative_to_nbs(page):
    "papermill runs a page in the folder it is called from (the README calls it from the root): committed data is read through `repo_path`."
    cells = json.loads((ROOT / "nbs" / page).read_text())["cells"]
    hits = [line.strip() for c in cells if c["cell_type"] == "code" for line in "".join(c["source"]).splitlines() if RELATIVE.search(line)]
    assert not hits, f"{page} reads by a path relative to nbs/: {hits}; use repo_path('results/...')"


@pytest.mark.parametrize("where", ["root", "elsewhere"])
def test_committed_data_is_found_from_anywhere(where, tmp_path):
    cwd = ROOT if where == "root" else tmp_path
    code = "from binding_nb.utils import repo_path; print(repo_path('results/plateau/cpu_search.csv'))"
    out = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()
    assert Path(out) == ROOT / "results" / "plateau" / "cpu_search.csv" and Path(out).is_file()


def _pages_with_parameters() -> list[str]:
    has = lambda p: any("parameters" in c["metadata"].get("tags", []) for c in json.loads(p.read_text())["cells"] if c["cell_type"] == "code")
    return sorted(p.name for p in (ROOT / "nbs").glob("*.ipynb") if has(p))


@pytest.mark.parametrize("page", _pages_with_parameters())
def test_every_page_checks_its_defaults_from_the_root(page, tmp_path):
    "Each page's parameter check passes on its defaults when run from the repository root (as the README runs pages), writing nothing there."
    from conftest import run_parameter_check
    source = "".join(next(c["source"] for c in json.loads((ROOT / "nbs" / page).read_text())["cells"]
                          if "parameters" in c["metadata"].get("tags", [])))
    folders = {name: str(tmp_path / name) for name in ("output_dir", "cache_dir") if re.search(rf"^{name}\b", source, re.M)}
    before = sorted(p.name for p in ROOT.iterdir())
    run_parameter_check(ROOT / "nbs" / page, cwd=ROOT, **folders)
    assert sorted(p.name for p in ROOT.iterdir()) == before


def test_a_page_runs_end_to_end_from_the_root(tmp_path):
    "05a, shortened, run by papermill from the repository root: it reads the committed tables it needs wherever it is run."
    out = tmp_path / "out.ipynb"
    run = subprocess.run([sys.executable, "-m", "papermill", str(ROOT / "nbs" / "05a_plateau.ipynb"), str(out), "-p", "steps", "50"],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "Traceback" not in out.read_text()


def _shown(page: str):
    "Each figure and each text output that the committed page `page` shows: ('image', cell, PNG bytes) or ('text', cell, text)."
    import base64
    for i, c in enumerate(json.loads((ROOT / "nbs" / page).read_text())["cells"]):
        for o in c.get("outputs", []):
            data = o.get("data", {})
            if "image/png" in data: yield "image", i, base64.b64decode("".join(data["image/png"]))
            for text in (o.get("text"), data.get("text/plain"), data.get("text/html"), data.get("text/markdown")):
                if text: yield "text", i, "".join(text)


@pytest.mark.parametrize("page", sorted(p.name for p in (ROOT / "nbs").glob("*.ipynb")))
def test_every_figure_a_page_shows_is_drawn_to_be_read(page):
    "Each figure on a committed page records at least FIGURE_DPI and is at most PAGE_WIDTH_PX wide, so that it is shown at full size."
    import io
    from PIL import Image
    from binding_nb.utils import FIGURE_DPI, PAGE_WIDTH_PX
    for _, cell, png in (s for s in _shown(page) if s[0] == "image"):
        im = Image.open(io.BytesIO(png))
        dpi = im.info.get("dpi", (0, 0))[0]
        assert dpi >= FIGURE_DPI - 0.5, f"{page}, cell {cell}: a figure at {dpi:.0f} dpi (it records none: drawn before show_figure recorded it)" if not dpi else f"{page}, cell {cell}: a figure at {dpi:.0f} dpi"
        assert im.width <= PAGE_WIDTH_PX, f"{page}, cell {cell}: a figure {im.width} px wide, shrunk on the page: draw it narrower"


def _preview_docs():
    "The docs' build and browser check (.ci/preview_docs.py), whose idea of output noise the committed pages share."
    import importlib.util
    spec = importlib.util.spec_from_file_location("preview_docs", ROOT / ".ci" / "preview_docs.py")
    module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)
    return module


NOISE = _preview_docs().OUTPUT_NOISE   # a warning as Python shows it, a temporary path


@pytest.mark.parametrize("page", sorted(p.name for p in (ROOT / "nbs").glob("*.ipynb")))
def test_no_page_shows_a_warning_or_a_temporary_path(page):
    "What a committed page shows holds no warning and no temporary path: a reader sees results, not the machine that made them."
    hits = [(cell, text[m.start() - 60:m.end() + 60]) for kind, cell, text in _shown(page) if kind == "text" for m in [NOISE.search(text)] if m]
    assert not hits, f"{page} shows {hits[:3]}"
