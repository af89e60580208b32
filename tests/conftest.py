"""pytest configuration: `slow` and `gpu` tests run only when asked for (`pytest --runslow`, `pytest --rungpu`)."""
import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")


def pytest_addoption(parser):
    parser.addoption("--runslow", action="store_true", help="also run tests marked slow")
    parser.addoption("--rungpu", action="store_true", help="also run tests marked gpu (needs CUDA)")


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: takes minutes; run with --runslow")
    config.addinivalue_line("markers", "gpu: needs a CUDA device; run with --rungpu")


def pytest_collection_modifyitems(config, items):
    for item in items:
        for mark, opt in (("slow", "--runslow"), ("gpu", "--rungpu")):
            if mark in item.keywords and not config.getoption(opt):
                item.add_marker(pytest.mark.skip(reason=f"{mark} test: run with {opt}"))


def run_parameter_check(notebook, cwd=None, **params) -> dict:
    """Run `notebook` as papermill would with `params` (the values `-p` passes), but only through the cell after its parameters
    cell (the page's check of every parameter), in this process: the namespace it leaves. Bad values raise here, before any work."""
    import json
    from pathlib import Path

    notebook = Path(notebook)
    cells = [c for c in json.loads(notebook.read_text())["cells"] if c["cell_type"] == "code"]
    at = next(i for i, c in enumerate(cells) if "parameters" in c["metadata"].get("tags", []))
    namespace, here = {"__name__": "__main__"}, os.getcwd()
    os.chdir(notebook.parent if cwd is None else cwd)
    try:
        for c in cells[:at + 1]: exec(compile("".join(c["source"]), f"{notebook.name} cell {cells.index(c)}", "exec"), namespace)
        namespace.update(params)
        exec(compile("".join(cells[at + 1]["source"]), f"{notebook.name} parameter check", "exec"), namespace)
    finally:
        os.chdir(here)
    return namespace
