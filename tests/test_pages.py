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
