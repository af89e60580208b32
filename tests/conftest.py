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
