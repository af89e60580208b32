"""The golden run: tiny seeded CPU runs of every registered architecture and of the pixel inputs at level 1, whose loss at
every step, final metrics and final weights are committed in `golden_runs.json`. A change to the training path that is
meant to change nothing (a refactor) must reproduce them exactly; a change that moves a number is not a refactor.

Record the reference again (only for a change meant to move the numbers, and said so): `python tests/test_golden_run.py`.
"""
import hashlib, json, math, platform, sys
from pathlib import Path

import pytest
import torch

from binding_nb.checkpoints import read_checkpoint
from binding_nb.train import train_run
from binding_nb.config import ARCHITECTURE_NAMES, run_config, RunConfig, with_architecture

REFERENCE = Path(__file__).with_name("golden_runs.json")
# every step validated, so that the log holds the loss of every step; small enough for seconds a run
TINY = dict(C=2, V=6, coverage=0.6, seed=0, steps=30, batch_size=16, d_model=16, n_layers=1, n_heads=2, d_out=8,
            eval_every=1, ckpt_every=30, log_every=1, n_val_scenes=32, n_test_scenes=64, device="cpu")
PIXELS = dict(inputs="pixels", input_settings=dict(level=1, image_size=16, square=5, patch=4, conv_depth=1, conv_channels=8))
RUNS = {**{a: (a, {}) for a in ARCHITECTURE_NAMES}, "pixels L1, transformer": ("transformer", PIXELS)}
NOT_COMPARED = ("train_seconds",)   # how long it took: the machine's, not the code's


def golden_config(name: str) -> RunConfig:
    "The golden run `name`'s config: the tiny settings, its architecture and, for pixels, its inputs."
    architecture, more = RUNS[name]
    return with_architecture(run_config(**TINY, **more), architecture)


def digest_by_value(state: dict) -> str:
    """A digest of a model's weights that does not depend on their names or order: a refactor may rename or move a module,
    not change a number. Each tensor is hashed with its dtype and shape, and the sorted hashes are hashed."""
    one = lambda t: hashlib.sha256(f"{t.dtype}{tuple(t.shape)}".encode() + t.detach().cpu().contiguous().numpy().tobytes()).hexdigest()
    return hashlib.sha256("".join(sorted(one(t) for t in state.values())).encode()).hexdigest()[:16]


def platform_key() -> str:
    "What the float arithmetic depends on beyond the code: torch's version and the CPU kernels it picks."
    return f"torch {torch.__version__.split('+')[0]}, {torch.backends.cpu.get_cpu_capability()}, {platform.machine()}"


def golden_run(name: str, folder: Path) -> dict:
    "Train the golden run `name` on one thread, checkpointed in `folder`: its loss at every step, result row and weight digests."
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try: row = train_run(golden_config(name), folder / "run.pt", progress=False)
    finally: torch.set_num_threads(threads)
    ck = read_checkpoint(folder / "run.pt")
    return dict(losses=[h["loss"] for h in ck["history"]],
                row={k: v for k, v in row.items() if k not in NOT_COMPARED},
                last_weights=digest_by_value(ck["model"]), selected_weights=digest_by_value(ck["best_model"]))


def same(a, b) -> bool:
    "Equal, NaN equal to NaN."
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))


@pytest.mark.parametrize("name", list(RUNS))
def test_the_golden_run_is_reproduced(name, tmp_path):
    "Today's code trains each golden run to the committed losses, metrics and weights: exactly, where the platform is the one that recorded them."
    ref = json.loads(REFERENCE.read_text())
    want, got = ref["runs"][name], golden_run(name, tmp_path)
    assert len(got["losses"]) == TINY["steps"] == len(want["losses"])
    if platform_key() == ref["platform"]:
        assert got["losses"] == want["losses"], next(i for i, (a, b) in enumerate(zip(got["losses"], want["losses"])) if a != b)
        assert set(got["row"]) == set(want["row"]), set(got["row"]) ^ set(want["row"])
        differ = {k: (got["row"][k], v) for k, v in want["row"].items() if not same(got["row"][k], v)}
        assert not differ, differ
        assert (got["last_weights"], got["selected_weights"]) == (want["last_weights"], want["selected_weights"])
    else:   # another torch or CPU kernel set: the same run up to float rounding
        assert got["losses"] == pytest.approx(want["losses"], rel=1e-4, abs=1e-6)
        assert got["row"]["best_step"] == want["row"]["best_step"]


def record() -> None:
    "Write the reference from today's code (the platform it ran on with it)."
    import tempfile
    runs = {}
    for name in RUNS:
        with tempfile.TemporaryDirectory() as d: runs[name] = golden_run(name, Path(d))
        print(name, runs[name]["losses"][-1], runs[name]["row"]["object_acc"], runs[name]["selected_weights"])
    REFERENCE.write_text(json.dumps(dict(platform=platform_key(), settings=TINY, pixels=PIXELS, runs=runs), indent=1) + "\n")


if __name__ == "__main__":
    sys.exit(record())
