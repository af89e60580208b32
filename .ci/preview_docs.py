#!/usr/bin/env python
"""Offline preview of the docs site for machines without Quarto, and a headless-browser check of it.

`nbdev_docs` renders the site with Quarto. Where Quarto is missing, this script converts the processed notebooks
in `_proc/` with nbconvert instead, honouring what Quarto would: cell options (`echo`, `output`, `include`,
`code-fold`, `warning`, nbdev's `hide`) and their `#|` lines, the front matter (title and description),
Pandoc attributes such as show_doc's `{target="_blank" ...}`, and math, typeset by a local copy of MathJax
(from `jupyter-server-mathjax`), so the folder works offline and can be opened from anywhere.

    python .ci/preview_docs.py --process            # nbdev's processing, then the pages, into _preview/
    python .ci/preview_docs.py --check              # ... and check every page in headless Chromium
    python .ci/preview_docs.py --check-only         # only check an existing preview

`--process` runs nbdev's `proc_nbs` (what `nbdev_proc_nbs` does, minus its attempt to install Quarto).
"""
from __future__ import annotations

import argparse
import html
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import jinja2
import yaml
from bs4 import BeautifulSoup
from nbconvert import HTMLExporter
from nbconvert.preprocessors import Preprocessor
from nbformat import NotebookNode, read
from nbformat.v4 import new_markdown_cell, new_output

MATHJAX_DIR = "mathjax"  # next to the pages; the pages load it by a relative path
MATHJAX_URL = f"{MATHJAX_DIR}/MathJax.js?config=TeX-AMS-MML_HTMLorMML-full,Safe"
OPTION_LINE = re.compile(r"^\s*#\s*\|\s?(.*)$")
FENCED_CODE = re.compile(r"(^```.*?^```[ \t]*$)", re.M | re.S)
ATTR_LINK = re.compile(r"(!?)\[([^\]]*)\]\(([^)\s]+)\)\{([^}]*)\}")  # [text](url){k="v" ...}
ATTR_SPAN = re.compile(r"\[([^\]]*)\]\{((?:[.#]|[\w-]+=)[^}]*)\}")  # [text]{.class}, not \sqrt[3]{x}
ATTR_HEADING = re.compile(r"^(#{1,6} .*?)\s*\{[#.][^}]*\}[ \t]*$", re.M)  # ## Title {#id .class}
KEY_VALUE = re.compile(r'([\w-]+)="([^"]*)"')
MD_LINK_URL = re.compile(r"(\]\()([^)\s]+)(\))")
HEADING = re.compile(r"^(#{1,6}[ \t]+)(.+?)[ \t]*$", re.M)
DIV_OPEN = re.compile(r"^:{3,}[ \t]*(\{[^}\n]*\}|[\w-]+)[ \t]*$", re.M)  # ::: {.callout-note}
DIV_CLOSE = re.compile(r"^:{3,}[ \t]*$", re.M)
CLASS = re.compile(r"(?:^|\s|\{)\.?([\w-]+)(?=[\s}]|$)")
TABLE_ROW = re.compile(r"^[ \t]*\|.*$", re.M)
INLINE_MATH = re.compile(r"\$[^$\n]+\$")

# ----------------------------------------------------------------------------------------------------- cell options


def split_options(source: str) -> tuple[dict, str]:
    "Quarto/nbdev options from the leading `#|` lines of `source`, and the source without them."
    lines, opts = source.splitlines(), {}
    n = 0
    while n < len(lines) and (m := OPTION_LINE.match(lines[n])):
        key, sep, value = m.group(1).partition(":")
        if key.strip():
            opts[key.strip()] = yaml.safe_load(value) if sep and value.strip() else True
        n += 1
    return opts, "\n".join(lines[n:])


class QuartoCellOptions(Preprocessor):
    "Apply Quarto's cell options as Quarto does, and drop the `#|` lines."

    def preprocess(self, nb: NotebookNode, resources: dict) -> tuple[NotebookNode, dict]:
        self.figures = 0                                   # Quarto numbers a page's labelled figures 1, 2, ...
        nb.cells = [c for c in (self.apply(c) for c in nb.cells) if c is not None]
        return nb, resources

    def figure(self, output: NotebookNode, label: str, caption: str, alt: str) -> NotebookNode:
        "An image output as Quarto shows a labelled figure: numbered, captioned, with its alt text."
        self.figures += 1
        png = output["data"]["image/png"]
        png = "".join(png) if isinstance(png, list) else png
        return new_output("display_data", data={"text/html": (
            f'<figure class="quarto-figure" id="{html.escape(label)}"><img src="data:image/png;base64,{png.strip()}" '
            f'alt="{html.escape(alt)}"><figcaption>Figure {self.figures}: {html.escape(caption)}</figcaption></figure>')})

    def apply(self, cell: NotebookNode) -> NotebookNode | None:
        if cell.cell_type != "code": return cell
        opts, cell.source = split_options(cell.source)
        if opts.get("include") is False or opts.get("hide"): return None
        if str(opts.get("label", "")).startswith("fig-"):
            if missing := [k for k in ("fig-cap", "fig-alt") if not str(opts.get(k) or "").strip()]:
                raise ValueError(f"figure {opts['label']} has no {' and no '.join(missing)}: a numbered figure needs a "
                                 "caption (#| fig-cap:) and alt text (#| fig-alt:)")
            cell.outputs = [self.figure(o, opts["label"], opts["fig-cap"], opts["fig-alt"])
                            if "image/png" in o.get("data", {}) else o for o in cell.outputs]
        if opts.get("echo") is False or opts.get("code-fold") is True or not cell.source.strip():
            cell.metadata.setdefault("transient", {})["remove_source"] = True  # nbconvert's own flag
        if opts.get("output") is False: cell.outputs = []
        if opts.get("warning") is False:
            cell.outputs = [o for o in cell.outputs if o.get("name") != "stderr"]
        return cell


# ------------------------------------------------------------------------------------------------------ front matter


def front_matter(cell: NotebookNode) -> dict | None:
    "The YAML front matter of a raw `---` cell, or None."
    if cell.cell_type != "raw" or not cell.source.lstrip().startswith("---"): return None
    body = cell.source.strip().strip("-")
    meta = yaml.safe_load(body) if body.strip() else {}
    return meta if isinstance(meta, dict) else None


def title_block(meta: dict) -> str:
    "Markdown for a Quarto-like title block."
    parts = [f'<h1 class="title">{html.escape(str(meta["title"]))}</h1>'] if meta.get("title") else []
    if meta.get("description"): parts.append(f'<div class="description">\n\n{meta["description"]}\n\n</div>')
    return "\n\n".join(parts)


class FrontMatter(Preprocessor):
    "Replace the raw front-matter cell by a title and subtitle; the title also becomes the page's <title>."

    def preprocess(self, nb: NotebookNode, resources: dict) -> tuple[NotebookNode, dict]:
        if nb.cells and (meta := front_matter(nb.cells[0])) is not None:
            nb.cells[0] = new_markdown_cell(title_block(meta))
            if meta.get("title"): nb.metadata["title"] = str(meta["title"])
        return nb, resources


# ------------------------------------------------------------------------------------------ Pandoc attributes, links


def attrs_html(attrs: str) -> str:
    "`k=\"v\"` pairs of a Pandoc attribute block as HTML attributes."
    return "".join(f' {k}="{html.escape(v)}"' for k, v in KEY_VALUE.findall(attrs))


def pandoc_id(heading: str) -> str:
    "The id Pandoc gives a heading (nbdev's links use it): `### ConceptSpace` -> `conceptspace`."
    words = re.sub(r"[^\w\s.-]", "", heading.replace("`", "")).lower().split()
    return re.sub(r"^[^a-z]+", "", "-".join(words))


def heading_anchor(m: re.Match) -> str:
    "An anchor with Pandoc's id in a heading whose id differs in nbconvert (`Concept-spaces` vs `concept-spaces`)."
    hashes, text = m.groups()
    pid = pandoc_id(text)
    return m[0] if pid in ("", text.replace(" ", "-")) else f'{hashes}<span id="{pid}">{text}</span>'


def fenced_div(m: re.Match) -> str:
    "A Pandoc fenced div (`::: {.callout-note}`) as an HTML <div>; markdown inside it stays markdown."
    classes = " ".join(c for c in CLASS.findall(m[1]) if "=" not in c)
    return f'<div class="{"callout " if "callout" in classes else ""}{classes}">\n'


def outside_code(text: str, fn) -> str:
    "Apply `fn` to the parts of markdown `text` that are not fenced code."
    return "".join(p if i % 2 else fn(p) for i, p in enumerate(FENCED_CODE.split(text)))


class QuartoMarkdown(Preprocessor):
    """Markdown cells and markdown outputs as Pandoc reads them: attributes become HTML (links, fenced divs such as
    callouts) or go (spans, headings), headings get Pandoc's ids, links to the published site or to notebooks
    point at the preview's pages."""

    def __init__(self, pages: dict[str, str] | None = None, site_url: str = "", **kw):
        super().__init__(**kw)
        self.pages, self.site_url = pages or {}, site_url.rstrip("/") + "/" if site_url else None

    def local_url(self, url: str) -> str:
        "`url` as a link to a preview page, if it points to one (on the site, or as a notebook), else `url`."
        path, sep, anchor = url.partition("#")
        if self.site_url and path.startswith(self.site_url): path = path[len(self.site_url):]
        return self.pages[path] + sep + anchor if path in self.pages else url

    @staticmethod
    def table_math(text: str) -> str:
        "Pandoc keeps `$|O|$` in one table cell; mistune splits it: write its pipes as `\\vert`."
        def row(m: re.Match) -> str: return INLINE_MATH.sub(lambda x: x[0].replace("|", r"\vert "), m[0])
        return TABLE_ROW.sub(row, text)

    def fix(self, text: str) -> str:
        "Markdown as Pandoc would read it: attributes applied or dropped, links to local pages, table math kept whole."
        def link(m: re.Match) -> str:
            bang, label, url, attrs = m.groups()
            if bang: return f'<img src="{html.escape(url)}" alt="{html.escape(label)}"{attrs_html(attrs)}>'
            return f'<a href="{html.escape(url)}"{attrs_html(attrs)}>{label}</a>'
        text = MD_LINK_URL.sub(lambda m: m[1] + self.local_url(m[2]) + m[3], text)
        text = ATTR_LINK.sub(link, text)
        text = ATTR_SPAN.sub(r"\1", text)
        text = self.table_math(text)
        text = DIV_CLOSE.sub("\n</div>", DIV_OPEN.sub(fenced_div, text))
        return HEADING.sub(heading_anchor, ATTR_HEADING.sub(r"\1", text))

    def preprocess_cell(self, cell: NotebookNode, resources: dict, index: int) -> tuple[NotebookNode, dict]:
        if cell.cell_type == "markdown": cell.source = outside_code(cell.source, self.fix)
        for out in cell.get("outputs", []):
            md = out.get("data", {}).get("text/markdown")
            if md is not None: out.data["text/markdown"] = outside_code("".join(md), self.fix)
        return cell, resources


# ------------------------------------------------------------------------------------------------------------ pages

TEMPLATE = r"""{%- extends 'lab/index.html.j2' -%}
{% block html_head_js_requirejs %}{% endblock %}
{% block extra_css %}<style>{{ resources.preview_css }}</style>{% endblock extra_css %}
{% block html_head_js_mathjax %}
<script type="text/x-mathjax-config">  // jupyter-server-mathjax ships the STIX-Web fonts only
MathJax.Hub.Config({"HTML-CSS": {availableFonts: [], preferredFont: null, webFont: "STIX-Web", imageFont: null}});
</script>
{{ super() }}
<script>if (window.MathJax) MathJax.Hub.Register.StartupHook("End", function () {
  MathJax.Hub.Queue(function () {
    var root = document.documentElement, fig = document.querySelector("main figure, main .jp-RenderedImage img");
    if (fig) root.dataset.firstFigureTop = Math.round(fig.getBoundingClientRect().top + window.scrollY);
    root.dataset.mathjax = "done"; }); });</script>
{% endblock html_head_js_mathjax %}
{% block body_header %}{{ super() }}
{% if resources.results_page %}<script>document.documentElement.dataset.resultsPage = "yes";</script>{% endif %}
<nav class="preview-sidebar"><p class="preview-site">{{ resources.site_title | e }}</p>
{% for s in resources.sections or [dict(title="", pages=resources.pages)] -%}
{% if s.title %}<p class="preview-section">{{ s.title | e }}</p>{% endif %}<ul>
{% for p in s.pages -%}
<li{% if p.current %} class="current"{% endif %}><a href="{{ p.href | e }}">{{ p.title | e }}</a></li>
{% endfor %}</ul>
{% endfor %}<p class="preview-note">Offline preview (nbconvert); the site is built by Quarto.</p></nav>
{% endblock body_header %}
"""

PREVIEW_CSS = """
body.jp-Notebook { font-family: system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
main { max-width: 60rem; margin: 0 auto; padding: 1.5rem 2rem 4rem 17rem; }
.preview-sidebar { position: fixed; top: 0; bottom: 0; left: 0; width: 14rem; overflow-y: auto; padding: 1.5rem 1rem;
  border-right: 1px solid #dee2e6; background: #f8f9fa; font-size: .9rem; }
.preview-sidebar ul { list-style: none; padding: 0; } .preview-sidebar li { margin: .35rem 0; }
.preview-sidebar a { color: #343a40; text-decoration: none; }
.preview-sidebar .current a { color: #2780e3; font-weight: 600; }
.preview-site { font-weight: 700; font-size: 1.1rem; }
.preview-section { font-weight: 600; color: #6c757d; text-transform: uppercase; font-size: .75rem; margin: 1rem 0 .25rem; } .preview-note { color: #6c757d; font-size: .75rem; }
h1.title { font-size: 2.2rem; margin-bottom: .5rem; }
.jp-RenderedHTMLCommon a { color: #2780e3; }
.callout { border-left: 4px solid #2780e3; background: #f8f9fa; padding: .25rem 1rem; margin: 1rem 0; }
.callout-warning, .callout-important { border-left-color: #ff7518; } .callout-tip { border-left-color: #3fb618; }
"""


def page_name(nb: NotebookNode, src: Path) -> str:
    "The page a notebook becomes: its front matter's `output-file`, as nbdev sets it, else its name."
    meta = front_matter(nb.cells[0]) if nb.cells else None
    return str((meta or {}).get("output-file") or src.with_suffix(".html").name)


def page_title(nb: NotebookNode, src: Path) -> str:
    "The page's title for the sidebar: the front matter's, else the notebook's name."
    meta = front_matter(nb.cells[0]) if nb.cells else None
    return str((meta or {}).get("title") or src.stem)


def notebooks(folder: Path) -> list[Path]:
    "Notebooks under `folder`, skipping `_`/`.` files and folders as nbdev does."
    return [p for p in folder.rglob("*.ipynb") if not any(s[0] in "._" for s in p.relative_to(folder).parts)]


def sidebar_sections(path: Path) -> list[tuple[str, list[str]]]:
    """The sidebar's sections as Quarto reads `path` (`website: sidebar: contents:`), in order, each with its notebooks'
    paths; a page listed outside any section is a section of its own, untitled."""
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    contents = ((data.get("website") or {}).get("sidebar") or {}).get("contents") or []
    out = []
    for item in contents:
        if isinstance(item, str): out.append(("", [item]))
        elif isinstance(item, dict) and isinstance(item.get("contents"), list) and all(isinstance(c, str) for c in item["contents"]):
            out.append((str(item.get("section", "")), list(item["contents"])))
        else: raise SystemExit(f"FAIL: {path}: a sidebar entry is neither a page nor a section listing pages: {item!r}")
    return out


def sources(proc: Path, nbs: Path | None, sidebar: list[tuple[str, list[str]]] | None = None) -> list[Path]:
    """Processed notebooks in the sidebar's order (without one: index first, then by name), without stale ones whose
    source is gone; every notebook must be in the sidebar once, and every page it lists must exist."""
    found = notebooks(proc)
    if nbs is not None:
        found = [p for p in found if (nbs / p.relative_to(proc)).exists()]
        if missing := sorted({p.relative_to(nbs) for p in notebooks(nbs)} - {p.relative_to(proc) for p in found}):
            raise SystemExit(f"FAIL: not processed into {proc}: {', '.join(map(str, missing))} (use --process)")
    if sidebar is None:
        return sorted(found, key=lambda p: (p.parent != proc, p.stem != "index", p.relative_to(proc).as_posix()))
    listed = [page for _, pages in sidebar for page in pages]
    have = {p.relative_to(proc).as_posix(): p for p in found}
    problems = ([f"{p} is in no sidebar section: add it to nbs/sidebar.yml" for p in sorted(set(have) - set(listed))]
                + [f"nbs/sidebar.yml lists {p}, which is not a notebook" for p in sorted(set(listed) - set(have))]
                + [f"nbs/sidebar.yml lists {p} {listed.count(p)} times" for p in sorted(set(listed)) if listed.count(p) > 1])
    if problems: raise SystemExit("FAIL: the sidebar and the notebooks disagree:\n  " + "\n  ".join(problems))
    return [have[p] for p in listed]


def make_exporter(pages: dict[str, str], site_url: str) -> HTMLExporter:
    exporter = HTMLExporter(
        extra_loaders=[jinja2.DictLoader({"preview.html.j2": TEMPLATE})], template_file="preview.html.j2",
        mathjax_url=MATHJAX_URL, exclude_input_prompt=True, exclude_output_prompt=True)
    for pp in (QuartoCellOptions(), FrontMatter(), QuartoMarkdown(pages=pages, site_url=site_url)):
        exporter.register_preprocessor(pp, enabled=True)
    return exporter


def copy_mathjax(out: Path) -> None:
    "MathJax from the `jupyter-server-mathjax` package, next to the pages."
    import jupyter_server_mathjax
    static = Path(jupyter_server_mathjax.__file__).parent / "static"
    shutil.copytree(static, out / MATHJAX_DIR, dirs_exist_ok=True)


def is_results_page(nb: NotebookNode) -> bool:
    "A page that opens with its verdict from the claims table (`page_verdict`): it must show its main figure early."
    shows = lambda c: "Markdown(page_verdict(" in c.source and split_options(c.source)[0].get("echo") is False
    return any(c.cell_type == "code" and shows(c) for c in nb.cells)


def build(proc: Path, out: Path, nbs: Path | None = None, site_url: str = "", site_title: str = "docs",
          css: Path | None = None, sidebar: Path | None = None) -> list[Path]:
    """Convert every processed notebook to a page in `out`, in the sections and order of `sidebar` (Quarto's
    sidebar.yml) where given; raise listing every notebook that fails."""
    sections = sidebar_sections(sidebar) if sidebar is not None and sidebar.exists() else None
    srcs = sources(proc, nbs, sections)
    if not srcs: raise SystemExit(f"FAIL: no processed notebooks in {proc} (run nbdev_proc_nbs first)")
    nbs_ = {src: read(src, as_version=4) for src in srcs}
    names = {src: page_name(nb, src) for src, nb in nbs_.items()}
    links = {src.relative_to(proc).as_posix(): name for src, name in names.items()} | {n: n for n in names.values()}
    exporter = make_exporter(links, site_url)
    style = PREVIEW_CSS + (css.read_text(encoding="utf-8") if css and css.exists() else "")
    out.mkdir(parents=True, exist_ok=True)
    for stale in out.glob("*.html"): stale.unlink()
    copy_mathjax(out)
    written, failed = [], []
    for src, nb in nbs_.items():
        pages = {s.relative_to(proc).as_posix(): dict(href=names[s], title=page_title(n, s), current=s == src)
                 for s, n in nbs_.items()}
        grouped = [dict(title=t, pages=[pages[p] for p in ps]) for t, ps in sections] if sections else None
        resources = dict(pages=list(pages.values()), sections=grouped, site_title=site_title, preview_css=style,
                         metadata=dict(name=src.stem), results_page=is_results_page(nb))
        try: body, _ = exporter.from_notebook_node(nb, resources=resources)
        except Exception as e: failed.append(f"{src}: {type(e).__name__}: {e}"); continue
        (page := out / names[src]).write_text(body, encoding="utf-8")
        written.append(page)
    if failed: raise SystemExit("FAIL: these notebooks did not convert:\n  " + "\n  ".join(failed))
    return written


# ------------------------------------------------------------------------------------------------------------ check

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
SCREEN = (1280, 1000)    # the reader's window: a results page's first figure starts within its first two screens
BROWSER_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 f"--window-size={SCREEN[0]},{SCREEN[1]}")
OUTPUT_NOISE = re.compile(r"\b\w+Warning: |/tmp/|ipykernel_\d+")   # a warning as Python shows it, a temporary path
ATTR_TEXT = re.compile(r"\{(?:target|style|class|width|height|fig-[\w-]*)=|\{[#.][\w-]+[^}]*\}")
RAW_MATH = re.compile(r"\$[^$\n]+\$|\\\(|\\\[")
OPTION_TEXT = re.compile(r"^\s*#\s*\|", re.M)
FRONT_MATTER_TEXT = re.compile(r"^\s*output-file:|^---\s*\n\s*(title|description):", re.M)


def find_browser() -> str | None:
    "The first Chromium-like browser on PATH."
    return next((b for b in map(shutil.which, BROWSERS) if b), None)


def rendered_dom(browser: str, page: Path, profile: Path, budget_ms: int = 10000) -> str:
    "The DOM of `page` after its scripts (MathJax) ran, from headless Chromium."
    cmd = [browser, *BROWSER_FLAGS, f"--user-data-dir={profile}", f"--virtual-time-budget={budget_ms}",
           "--dump-dom", page.resolve().as_uri()]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True).stdout


def visible_text(node, drop: str = "") -> str:
    "The text a reader sees in `node` (MathJax's TeX sources, the sidebar and `drop` left out); <pre> keeps its lines."
    for junk in node.select("script, style, .MathJax_Preview, .preview-sidebar" + drop): junk.decompose()
    return node.get_text()


def dom_problems(dom: str) -> list[str]:
    "What a reader of this page would see that the real docs do not show."
    soup = BeautifulSoup(dom, "html.parser")
    problems = []
    if soup.html is None or soup.html.get("data-mathjax") != "done":
        problems.append(f"MathJax did not finish (is {MATHJAX_DIR}/ next to the page?)")
    if errs := soup.select(".MathJax_Error, .merror"):
        problems.append(f"{len(errs)} MathJax error(s): {errs[0].get_text()[:80]!r}")
    if not soup.select("h1.title"): problems.append("no title block (front matter not turned into a title)")
    code = "\n".join(visible_text(n) for n in soup.select(".jp-CodeCell .jp-InputArea"))
    prose = "\n".join(visible_text(n, drop=", code, pre") for n in soup.select(".jp-RenderedMarkdown"))
    page = visible_text(soup.body) if soup.body else ""
    for rx, text, what in [(OPTION_TEXT, code, "Quarto option line `#|` visible"),
                           (ATTR_TEXT, prose, "Pandoc attribute text `{...}` visible"),
                           (RAW_MATH, prose, "untypeset math visible"),
                           (FRONT_MATTER_TEXT, page, "raw front matter visible")]:
        if m := rx.search(text): problems.append(f"{what}: {text[max(0, m.start() - 30):m.end() + 30]!r}")
    outputs = "\n".join(visible_text(n) for n in soup.select(".jp-OutputArea"))
    if m := OUTPUT_NOISE.search(outputs):
        problems.append(f"a warning or a temporary path in an output: {outputs[max(0, m.start() - 30):m.end() + 60]!r}")
    if soup.html is not None and soup.html.get("data-results-page"):
        top = soup.html.get("data-first-figure-top")
        if top is None: problems.append("a results page without a figure")
        elif int(top) > 2 * SCREEN[1]:
            problems.append(f"the first figure starts {int(top):,} px down, below the first two screens "
                            f"({2 * SCREEN[1]:,} px at {SCREEN[0]:,} px wide)")
    return problems


def check_page(page: Path, browser: str) -> tuple[list[str], int]:
    "One page's problems and its number of typeset formulas, in a browser profile of its own."
    with tempfile.TemporaryDirectory(prefix="preview-chromium-") as profile:
        try: dom = rendered_dom(browser, page, Path(profile))
        except (subprocess.SubprocessError, OSError) as e: return [f"browser failed: {e}"], 0
    return dom_problems(dom), dom.count('type="math/tex')  # MathJax keeps each typeset formula's TeX in such a <script>


def check(pages: list[Path], browser: str, workers: int = os.cpu_count() or 1) -> list[str]:
    "Problems of every page, as `page: problem` lines; `workers` browsers at once, the pages reported in order."
    report = []
    with ThreadPoolExecutor(max_workers=max(workers, 1)) as pool:
        for page, (problems, math) in zip(pages, pool.map(lambda p: check_page(p, browser), pages)):
            report += [f"{page.name}: {p}" for p in problems]
            print(f"  {page.name}: {f'{len(problems)} problem(s)' if problems else 'ok'}, {math} formulas typeset",
                  flush=True)
    return report


# -------------------------------------------------------------------------------------------------------------- cli


def nbdev_settings() -> dict:
    "Paths and site details from settings.ini, as nbdev reads them."
    from nbdev.config import get_config
    cfg = get_config()
    return dict(proc=cfg.config_path / "_proc", nbs=cfg.nbs_path, site_url=cfg.doc_host + cfg.doc_baseurl,
                site_title=cfg.get("title", cfg.lib_name), css=cfg.nbs_path / "styles.css",
                sidebar=cfg.nbs_path / "sidebar.yml")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("_preview"), help="folder for the pages (default: _preview)")
    ap.add_argument("--process", action="store_true", help="run nbdev's proc_nbs first (writes _proc/)")
    ap.add_argument("--check", action="store_true", help="then check every page in headless Chromium")
    ap.add_argument("--check-only", action="store_true", help="only check the pages already in --out")
    ap.add_argument("--n-workers", type=int, default=2, help="workers for --process")
    args = ap.parse_args(argv)
    s = nbdev_settings()
    if args.check_only:
        pages = sorted(p for p in args.out.glob("*.html"))
    else:
        if args.process:
            from nbdev.serve import proc_nbs
            try: proc_nbs(n_workers=args.n_workers)
            except Exception as e:  # nbdev_docs stops here too
                print(f"FAIL: nbdev could not process the notebooks for the docs:\n{e}"); return 1
        pages = build(s["proc"], args.out, s["nbs"], s["site_url"], s["site_title"], s["css"], s["sidebar"])
        print(f"docs preview: {len(pages)} pages in {args.out}/ (open {args.out / 'index.html'})")
    if not (args.check or args.check_only): return 0
    if not pages: print(f"FAIL: no pages in {args.out}"); return 1
    if (browser := find_browser()) is None:
        print(f"FAIL: no Chromium found (looked for {', '.join(BROWSERS)})"); return 2
    print(f"checking {len(pages)} pages in headless {Path(browser).name}")
    if report := check(pages, browser):
        print("FAIL: the docs preview shows what the real docs would not:\n  " + "\n  ".join(report)); return 1
    print("docs preview: every page has its title, typeset math, no `#|` lines, no attribute text, no warning or "
          "temporary path in its outputs, and every results page its first figure within two screens")
    return 0


if __name__ == "__main__":
    sys.exit(main())
