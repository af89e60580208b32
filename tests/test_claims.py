"""The claims table (`binding_nb.claims`) against the data it is read from, and the README and index against it: a
number quoted at a glance cannot drift from its committed table."""
import json

import pandas as pd
import pytest

from binding_nb import claims
from binding_nb.utils import front_page_links, repo_path


def committed_claims() -> pd.DataFrame:
    return pd.read_csv(repo_path(claims.CLAIMS_FILE))


def test_the_committed_claims_are_the_datas():
    assert claims.stale_claims(committed_claims(), claims.claims_table()) == [], (
        "results/claims.csv is stale: run `python scripts/write_claims.py`, re-execute nbs/index.ipynb and copy its "
        "'Results at a glance' into the README")


@pytest.mark.parametrize("table, column, shift", [(claims.MAIN_JOB_SEEDS, "object_acc", 0.3),
                                                  (f"{claims.FIG9_STUDY}/fig9_correlation.csv", "r", -0.5),
                                                  (claims.GEOMETRY_SOURCE, "ours", None)])
def test_an_edited_committed_number_is_caught(monkeypatch, table, column, shift):
    real = claims.committed
    def edited(relative: str) -> pd.DataFrame:
        d = real(relative)
        if relative != table: return d
        return d.assign(**{column: d[column] + shift if shift is not None
                           else d[column].str.replace("0.70 / 0.94", "0.48 / 0.70")})
    monkeypatch.setattr(claims, "committed", edited)
    assert claims.stale_claims(committed_claims(), claims.claims_table()) != []


def glance_output() -> str:
    "What the index shows under 'Results at a glance', as committed."
    cells = json.loads(repo_path("nbs/index.ipynb").read_text())["cells"]
    cell = next(c for c in cells if c["cell_type"] == "code" and "claims_markdown" in "".join(c["source"]))
    return "".join(cell["outputs"][0]["data"]["text/markdown"])


def test_the_index_and_the_readme_show_the_committed_claims():
    table = claims.claims_markdown(committed_claims())
    assert glance_output().endswith(table), "the index shows other claims than results/claims.csv: re-execute it"
    readme = repo_path("README.md").read_text()
    assert front_page_links(glance_output()) in readme, "the README's 'Results at a glance' is not the index's: copy it over"
    assert readme.index("## Results at a glance") < readme.index(front_page_links(table)) < readme.index("Each section of the paper has")


def test_every_table_the_index_renders_is_in_the_readme():
    "The README is the index rendered (copied by hand where Quarto is missing): each computed output is in it."
    cells = json.loads(repo_path("nbs/index.ipynb").read_text())["cells"]
    shown = ["".join(o["data"]["text/markdown"]) for c in cells if c["cell_type"] == "code"
             for o in c.get("outputs", []) if "text/markdown" in o.get("data", {})]
    readme = repo_path("README.md").read_text()
    assert shown and [s[:80] for s in shown if front_page_links(s) not in readme] == []


def test_every_relative_link_of_the_readme_resolves_on_the_front_page():
    "A link such as [05](nbs/05_coverage.ipynb) names a file of the repository, as GitHub's front page resolves it."
    import re
    readme = repo_path("README.md").read_text()
    links = [l.split("#")[0] for l in re.findall(r"\]\(([^)\s]+)\)", readme) if not re.match(r"[a-z][\w+.-]*:|#", l)]
    assert links and [l for l in links if not repo_path(l).exists()] == []


def collect_script():
    "scripts/collect_fig9_study.py as a module."
    import importlib.util
    spec = importlib.util.spec_from_file_location("collect_fig9_study", repo_path("scripts/collect_fig9_study.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_study_readme_is_what_its_files_give():
    "results/learned/fig9_study/README.md is the collect script's, from the folder's files, and its regime column today's rule."
    collect, folder = collect_script(), repo_path(claims.FIG9_STUDY)
    assert (folder / "README.md").read_text() == collect.study_readme(folder), (
        "the study's README differs from its files: `python scripts/collect_fig9_study.py --readme-only`")
    fits = pd.read_csv(folder / "binding_study.csv").query("protocol == 'paper'")
    assert (fits.regime == collect.paper_regime(fits)).all()


def test_an_edited_study_number_changes_the_readme(tmp_path):
    import shutil
    collect, folder = collect_script(), repo_path(claims.FIG9_STUDY)
    shutil.copytree(folder, tmp_path / "study", ignore=shutil.ignore_patterns("logs"))
    points = pd.read_csv(tmp_path / "study" / "fig9_points.csv")
    points.loc[points.form == "global_product", "object_acc"] *= 0.5
    points.to_csv(tmp_path / "study" / "fig9_points.csv", index=False)
    assert collect.study_readme(tmp_path / "study") != (folder / "README.md").read_text()


def test_each_results_page_opens_with_its_committed_verdict():
    "Every page showing `page_verdict` shows what results/claims.csv says now (its committed output is not stale)."
    import re
    shown = 0
    for page in sorted(repo_path("nbs").glob("*.ipynb")):
        for cell in json.loads(page.read_text())["cells"]:
            src = "".join(cell["source"])
            if cell["cell_type"] != "code" or "Markdown(page_verdict(" not in src: continue
            pages = re.findall(r"'([\w]+)'|\"([\w]+)\"", src.split("page_verdict(")[-1].split(")")[0])
            out = "".join(next(o["data"]["text/markdown"] for o in cell["outputs"] if "text/markdown" in o.get("data", {})))
            assert out == claims.page_verdict(*[a or b for a, b in pages]), f"{page.name} shows a stale verdict: re-execute its first cells"
            shown += 1
    assert shown >= 7


def test_the_committed_default_run_is_the_one_06_shows():
    "results/learned/default_run holds the run whose tables 06's page shows (its beside-the-paper table, cell for cell)."
    shown = claims.shown_table("06_learned_binding", "side = learned_beside_paper(")
    committed = pd.read_csv(repo_path(f"{claims.DEFAULT_RUN}/beside_paper.csv"))
    for col in shown.columns:
        assert shown[col].astype(str).tolist() == committed[col].astype(str).str.replace(">", "&gt;").tolist(), col


def test_the_committed_pixel_run_is_the_one_07_shows():
    shown = claims.shown_table("07_pixels", 'results.to_csv(out_dir / "pixel_runs.csv"').set_index("encoder")
    committed = pd.read_csv(repo_path(f"{claims.PIXEL_RUN}/pixel_runs.csv")).set_index("encoder")
    assert list(shown.index) == list(committed.index)
    for col in ("concept_acc", "object_acc", "bag_of_concepts_acc"):
        assert (shown[col] - committed[col]).abs().max() < 5e-4, col       # the page shows three places


def test_the_committed_default_run_is_the_one_04_shows():
    "results/complexity/default_run holds the run whose headlines 04's page shows, value for value at two places."
    import re
    cells = json.loads(repo_path("nbs/04_complexity.ipynb").read_text())["cells"]
    cell = next(c for c in cells if c["cell_type"] == "code" and "headlines = summary.groupby" in "".join(c["source"]))
    html = next("".join(o["data"]["text/html"]) for o in cell["outputs"] if "text/html" in o.get("data", {}))
    rows = re.findall(r"<tr>(.*?)</tr>", html.split("</thead>")[1])
    shown = [[float(v) for v in re.findall(r"<td>(.*?)</td>", r)] for r in rows]
    committed = pd.read_csv(repo_path("results/complexity/default_run/complexity_headlines.csv"))
    assert len(shown) == len(committed) and (abs(pd.DataFrame(shown).values - committed.iloc[:, 2:].values) < 5.01e-3).all()


@pytest.mark.parametrize("doc", ["README.md", "nbs/index.ipynb"])
def test_the_page_table_names_each_page_by_its_title(doc):
    "The README's and the index's table of pages calls each page what its own title, and so the docs' sidebar, calls it."
    import re
    text = repo_path(doc).read_text()
    if doc.endswith(".ipynb"):
        text = "\n\n".join("".join(c["source"]) for c in json.loads(text)["cells"] if c["cell_type"] == "markdown")
    table = text.split("| page | paper | modules | what it holds |")[1].split("\n\n")[0]
    rows = re.findall(r"^\| \[([^\]]+)\]\((?:nbs/)?(\w+)\.ipynb\) \|", table, flags=re.M)
    assert len(rows) >= 40
    for shown, page in rows:
        first = json.loads(repo_path(f"nbs/{page}.ipynb").read_text())["cells"][0]["source"]
        assert shown == "".join(first).splitlines()[0].lstrip("# ").strip(), f"{doc} calls {page} {shown!r}"
