"""pytest configuration: `slow` and `gpu` tests run only when asked for (`pytest -m slow` or `--runslow`; `pytest -m gpu` or `--rungpu`)."""
import os

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")


def pytest_addoption(parser):
    parser.addoption("--runslow", action="store_true", help="also run tests marked slow")
    parser.addoption("--rungpu", action="store_true", help="also run tests marked gpu (needs CUDA)")


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: takes minutes; run with -m slow (only these) or --runslow (with the rest)")
    config.addinivalue_line("markers", "gpu: needs a CUDA device; run with -m gpu or --rungpu")


def asked_for(config, mark: str, opt: str) -> bool:
    "Whether the run asks for the tests marked `mark`: by their option, or by naming the mark in `-m` (`pytest -m slow`)."
    return config.getoption(opt) or mark in (config.getoption("markexpr") or "").replace("not " + mark, "")


def pytest_collection_modifyitems(config, items):
    for item in items:
        for mark, opt in (("slow", "--runslow"), ("gpu", "--rungpu")):
            if mark in item.keywords and not asked_for(config, mark, opt):
                item.add_marker(pytest.mark.skip(reason=f"{mark} test: run with -m {mark} or {opt}"))


def run_parameter_check(notebook, cwd=None, **params) -> dict:
    """Run `notebook` as papermill would with `params` (the values `-p` passes), but only through the cell after its parameters
    cell (the page's check of every parameter), in this process: the namespace it leaves. Bad values raise here, before any work."""
    import json
    from pathlib import Path

    notebook = Path(notebook)
    import torch

    cells = [c for c in json.loads(notebook.read_text())["cells"] if c["cell_type"] == "code"]
    at = next(i for i, c in enumerate(cells) if "parameters" in c["metadata"].get("tags", []))
    namespace, here, threads = {"__name__": "__main__"}, os.getcwd(), torch.get_num_threads()
    os.chdir(notebook.parent if cwd is None else cwd)
    try:
        for c in cells[:at + 1]: exec(compile("".join(c["source"]), f"{notebook.name} cell {cells.index(c)}", "exec"), namespace)
        namespace.update(params)
        exec(compile("".join(cells[at + 1]["source"]), f"{notebook.name} parameter check", "exec"), namespace)
    finally:
        os.chdir(here); torch.set_num_threads(threads)   # a page's `threads` setting stays in the page: later tests run as before
    return namespace


@pytest.fixture
def network_attempts(monkeypatch):
    "Every network connection this process tries from now on, refused and recorded (its address): a test asserts there were none."
    import socket
    tried = []
    def refuse(address):
        tried.append(address)
        raise OSError(f"the test refuses network connections (to {address})")
    monkeypatch.setattr(socket, "getaddrinfo", lambda host, port, *args, **kwargs: refuse((host, port)))   # a name looked up, first
    monkeypatch.setattr(socket.socket, "connect", lambda self, address: refuse(address))
    monkeypatch.setattr(socket.socket, "connect_ex", lambda self, address: refuse(address))
    return tried


# --- shared by the encoder and cache tests -------------------------------------------------------------------------

CAPTIONS = ["a red cube and a gray sphere", "a gray sphere and a red cube", "a blue cylinder", "a yellow cube and a cyan cube"]


def random_images(n: int, size=(64, 48), seed: int = 0) -> list:
    "`n` seeded random RGB images of `size` (width, height)."
    from PIL import Image
    rng = np.random.default_rng(seed)
    return [Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)) for _ in range(n)]


class Counting:
    "A callable encoder that counts the items it has embedded (to tell cache hits from recomputation)."
    __name__ = "counting"

    def __init__(self): self.calls = 0

    def __call__(self, items):
        self.calls += len(items)
        return np.stack([[len(s), s.count("a"), float(sum(map(ord, s)) % 97)] for s in items]).astype(np.float32)


@pytest.fixture(scope="session")
def clip_image():
    from binding_nb.encoders import load_encoder
    return load_encoder("openclip:ViT-B-32", pretrained=None, modality="image", device="cpu")


@pytest.fixture(scope="session")
def minilm():
    from binding_nb.encoders import load_encoder
    return load_encoder("st:all-MiniLM-L6-v2", device="cpu")


# --- shared by the training, resume and conversion tests -------------------------------------------------------------

TINY_RUN = dict(V=5, steps=40, batch_size=32, d_model=32, n_layers=2, eval_every=10, ckpt_every=10, n_val_scenes=32,
                n_test_scenes=128, coverage=0.8, device="cpu")   # a transformer run of seconds, checkpointed every 10 steps


@pytest.fixture(scope="session")
def uninterrupted(tmp_path_factory):
    """`uninterrupted(cfg)`: the result row of `cfg` trained without a stop, and its checkpoint (read it, never write it),
    trained once per session however many resume tests compare against it."""
    from binding_nb.train import train_run
    folder, done = tmp_path_factory.mktemp("uninterrupted"), {}
    def run(cfg) -> tuple[dict, "Path"]:
        key = repr(cfg.settings())
        if key not in done:
            path = folder / f"run{len(done)}.pt"
            done[key] = (train_run(cfg, path, progress=False), path)
        row, path = done[key]
        return dict(row), path
    return run
