"""The offline docs preview (.ci/preview_docs.py): Quarto's cell options, front matter, attributes and math."""
import importlib.util
from pathlib import Path

import nbformat
import pytest
from bs4 import BeautifulSoup
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output, new_raw_cell

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("preview_docs", ROOT / ".ci" / "preview_docs.py")
pd = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(pd)

SOURCE_LINK = '[source](https://github.com/o/r/blob/main/m.py#L5){target="_blank" style="float:right"}'


def processed_notebook() -> nbformat.NotebookNode:
    "A notebook as nbdev_proc_nbs leaves it: front matter, show_doc output, cells with Quarto options."
    md_out = new_output("execute_result", data={"text/markdown": f"---\n\n{SOURCE_LINK}\n\n### f\n\n*Doc.*"})
    return new_notebook(cells=[
        new_raw_cell("---\ndescription: 'The `f` page'\noutput-file: thing.html\ntitle: A thing\n---\n\n"),
        new_markdown_cell("Math $a^2 + b^2$, a [link](https://site.io/base/other.html#x), a table:\n\n"
                          "| n | size |\n|---|---|\n| o | $|O|$ |"),
        new_markdown_cell("## Spaces and ids\n\n::: {.callout-note}\nA *note*.\n:::"),
        new_code_cell("#| echo: false\n#| output: asis\nshow_doc(f)", outputs=[md_out]),
        new_code_cell("#| include: false\nsecret = 1"),
        new_code_cell("# | hide\nhidden = 1"),
        new_code_cell("#| output: false\nprint('noise')", outputs=[new_output("stream", text="noise\n")]),
        new_code_cell("#| code-fold: true\nfolded = 1"),
        new_code_cell("visible = 1  #| not an option"),
    ])


def convert(nb) -> str:
    exporter = pd.make_exporter({"other.html": "other.html"}, "https://site.io/base")
    resources = dict(pages=[dict(href="thing.html", title="A thing", current=True)], site_title="site",
                     preview_css="", metadata=dict(name="thing"))
    return exporter.from_notebook_node(nb, resources=resources)[0]


def test_split_options():
    assert pd.split_options("#| echo: false\n#|output: asis\n# | hide\nx = 1\n#| late") == (
        {"echo": False, "output": "asis", "hide": True}, "x = 1\n#| late")
    assert pd.split_options("x = 1") == ({}, "x = 1")


def test_page_honours_quarto():
    page = convert(processed_notebook())
    text = pd.visible_text(BeautifulSoup(page, "html.parser").main)  # what a reader sees
    assert '<h1 class="title">A thing</h1>' in page and "<title>A thing</title>" in page
    assert "output-file" not in text and text.count("#|") == 1  # only the comment that is not an option
    for gone in ("show_doc", "secret", "hidden", "folded"): assert gone not in text, gone
    assert "print('noise')" in text and text.count("noise") == 1  # output: false keeps the source only
    assert "visible = 1" in text
    link = BeautifulSoup(page, "html.parser").find("a", string="source")  # show_doc's link, as Quarto makes it
    assert "{target=" not in text and link["target"] == "_blank" and link["style"] == "float:right"
    assert 'href="other.html#x"' in page  # links to the published site point at the preview's page
    assert '<span id="spaces-and-ids">' in page  # Pandoc's heading id, which nbdev's links use
    assert '<div class="callout callout-note">' in page and ":::" not in text
    assert "<table>" in page and r"$\vert O\vert $" in page
    scripts = [t["src"] for t in BeautifulSoup(page, "html.parser").find_all("script", src=True)]
    assert scripts == [pd.MATHJAX_URL]  # nothing from a CDN: MathJax is local, require.js is left out


def test_build_writes_pages_and_mathjax(tmp_path):
    proc, nbs, out = tmp_path / "_proc", tmp_path / "nbs", tmp_path / "out"
    for d in (proc, nbs): d.mkdir()
    nbformat.write(processed_notebook(), proc / "01_thing.ipynb")
    nbformat.write(new_notebook(), nbs / "01_thing.ipynb")
    nbformat.write(new_notebook(), proc / "02_stale.ipynb")  # processed once, source since renamed: no page
    (out / "old.html").parent.mkdir()
    (out / "old.html").write_text("stale")
    pages = pd.build(proc, out, nbs, site_url="https://site.io/base", site_title="site")
    assert [p.name for p in pages] == ["thing.html"] and not (out / "old.html").exists()
    assert (out / "mathjax" / "MathJax.js").exists()
    nbformat.write(new_notebook(), nbs / "03_new.ipynb")
    with pytest.raises(SystemExit, match="03_new.ipynb"): pd.build(proc, out, nbs)


def test_a_labelled_figure_is_numbered_captioned_and_described():
    "A cell with `#| label: fig-...` shows its image as Quarto does: 'Figure 1: caption', with its alt text; without them it fails."
    png = new_output("display_data", data={"image/png": "iVBORw0KGgo="})
    nb = new_notebook(cells=[new_markdown_cell("# T"), new_code_cell('#| label: fig-a\n#| fig-cap: "The $r$ of it"\n#| fig-alt: "dots"\nshow()',
                                                                     outputs=[png]),
                             new_code_cell('#| label: fig-b\n#| fig-cap: "Second"\n#| fig-alt: "more dots"\nshow()', outputs=[png])])
    soup = BeautifulSoup(convert(nb), "html.parser")
    figs = soup.select("figure.quarto-figure")
    assert [f["id"] for f in figs] == ["fig-a", "fig-b"] and [f.img["alt"] for f in figs] == ["dots", "more dots"]
    assert [f.figcaption.text for f in figs] == ["Figure 1: The $r$ of it", "Figure 2: Second"]
    nb.cells[2].source = '#| label: fig-b\n#| fig-cap: "Second"\nshow()'
    with pytest.raises(ValueError, match="fig-b has no fig-alt"): convert(nb)


def test_the_sidebar_orders_and_groups_the_pages_and_lists_each_once(tmp_path):
    "The preview follows nbs/sidebar.yml as Quarto does: its sections in order; a page missing, unknown or repeated fails."
    proc, nbs, out = tmp_path / "_proc", tmp_path / "nbs", tmp_path / "out"
    for d in (proc, nbs): d.mkdir()
    for name in ("index", "01_b", "02_a"):
        nb = processed_notebook()
        nb.cells[0].source = nb.cells[0].source.replace("thing.html", f"{name}.html").replace("A thing", f"Page {name}")
        nbformat.write(nb, proc / f"{name}.ipynb"); nbformat.write(new_notebook(), nbs / f"{name}.ipynb")
    side = tmp_path / "sidebar.yml"
    side.write_text("website:\n  sidebar:\n    contents:\n      - section: Start\n        contents: [index.ipynb, 02_a.ipynb]\n"
                    "      - section: Blocks\n        contents: [01_b.ipynb]\n")
    assert pd.sidebar_sections(side) == [("Start", ["index.ipynb", "02_a.ipynb"]), ("Blocks", ["01_b.ipynb"])]
    pages = pd.build(proc, out, nbs, sidebar=side)
    assert [p.name for p in pages] == ["index.html", "02_a.html", "01_b.html"]       # the sidebar's order, not the names'
    nav = BeautifulSoup(pages[1].read_text(), "html.parser").find("nav")
    assert [t.text for t in nav.select(".preview-section")] == ["Start", "Blocks"]
    assert [a.text for a in nav.select("a")] == ["Page index", "Page 02_a", "Page 01_b"] and nav.select_one(".current a").text == "Page 02_a"
    side.write_text("website:\n  sidebar:\n    contents:\n      - section: Start\n        contents: [index.ipynb, 02_a.ipynb, 09_gone.ipynb, index.ipynb]\n")
    with pytest.raises(SystemExit) as e: pd.build(proc, out, nbs, sidebar=side)
    assert all(m in str(e.value) for m in ("01_b.ipynb is in no sidebar section", "lists 09_gone.ipynb, which is not a notebook",
                                             "lists index.ipynb 2 times"))
    side.write_text("website:\n  sidebar:\n    contents:\n      - section: Start\n")
    with pytest.raises(SystemExit, match="neither a page nor a section listing pages"): pd.sidebar_sections(side)


def test_the_repositorys_sidebar_lists_every_notebook_once():
    sections = pd.sidebar_sections(ROOT / "nbs" / "sidebar.yml")
    listed = [p for _, pages in sections for p in pages]
    assert sorted(listed) == sorted(p.name for p in (ROOT / "nbs").glob("*.ipynb")) and len(set(listed)) == len(listed)
    assert sections[0][1][0] == "index.ipynb"


@pytest.mark.skipif(pd.find_browser() is None, reason="no Chromium to render the page")
def test_browser_check_tells_good_from_bad(tmp_path):
    proc, out = tmp_path / "_proc", tmp_path / "out"
    proc.mkdir()
    nbformat.write(processed_notebook(), proc / "01_thing.ipynb")
    good = pd.build(proc, out)
    bad = out / "plain.html"  # what plain `jupyter nbconvert --to html` makes of it
    bad.write_text(__import__("nbconvert").HTMLExporter().from_notebook_node(processed_notebook())[0])
    report = pd.check(good + [bad], pd.find_browser())
    assert all(line.startswith("plain.html") for line in report), report
    for what in ("MathJax did not finish", "no title block", "`#|` visible", "attribute text", "front matter"):
        assert any(what in line for line in report), (what, report)


def _png() -> str:
    import base64, io
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(3, 2)); ax.plot([0, 1]); buf = io.BytesIO(); fig.savefig(buf, format="png"); plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def results_page(filler: int, warning: bool = False) -> nbformat.NotebookNode:
    "A results page (it calls `page_verdict`) with `filler` paragraphs before its first figure, and maybe a warning shown."
    figure = new_output("display_data", data={"image/png": _png(), "text/plain": "<Figure>"})
    noise = [new_output("stream", name="stderr", text="/tmp/ipykernel_1/2.py:3: UserWarning: careful\n")] if warning else []
    return new_notebook(cells=[
        new_raw_cell("---\ntitle: A result\n---\n\n"),
        new_code_cell("#| echo: false\nMarkdown(page_verdict('04_complexity'))",
                      outputs=[new_output("execute_result", data={"text/markdown": "**differs**"})]),
        *[new_markdown_cell("Long method text. " * 60) for _ in range(filler)],
        new_code_cell("fit()", outputs=noise + [figure])])


@pytest.mark.skipif(pd.find_browser() is None, reason="no Chromium to render the page")
def test_browser_check_finds_a_late_figure_and_a_shown_warning(tmp_path):
    proc = tmp_path / "_proc"; proc.mkdir()
    for name, nb in [("01_early", results_page(2)), ("02_late", results_page(40)), ("03_noisy", results_page(1, warning=True))]:
        nbformat.write(nb, proc / f"{name}.ipynb")
    pages = pd.build(proc, tmp_path / "out")
    report = pd.check(pages, pd.find_browser())
    assert not [line for line in report if line.startswith("01_early")], report
    assert any(line.startswith("02_late") and "below the first two screens" in line for line in report), report
    assert any(line.startswith("03_noisy") and "a warning or a temporary path" in line for line in report), report
