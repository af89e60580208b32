"""The golden run: tiny seeded CPU runs of every registered architecture and of the pixel inputs at level 1, whose loss at
every step, final metrics and final weights are committed in `golden_runs.json`. A change to the training path that is
meant to change nothing (a refactor) must reproduce them exactly; a change that moves a number is not a refactor.

The reference holds one record per platform (torch, kernel set and CPU) that made one: a run is compared exactly with its
own CPU's record, and to float rounding with every record. Add this machine's record: `python tests/test_golden_run.py`
(refused if its runs disagree with the others beyond rounding); for a change meant to move the numbers, and said so:
`python tests/test_golden_run.py --fresh`, which keeps this machine's record only.
"""
import hashlib, json, math, platform, sys
from pathlib import Path

import pytest
import torch

from binding_nb.checkpoints import read_checkpoint
from binding_nb.train import train_run
from binding_nb.config import ARCHITECTURES, run_config, RunConfig, with_architecture

REFERENCE = Path(__file__).with_name("golden_runs.json")
# every step validated, so that the log holds the loss of every step; small enough for seconds a run
TINY = dict(C=2, V=6, coverage=0.6, seed=0, steps=30, batch_size=16, d_model=16, n_layers=1, n_heads=2, d_out=8,
            eval_every=1, ckpt_every=30, log_every=1, n_val_scenes=32, n_test_scenes=64, device="cpu")
PIXELS = dict(inputs="pixels", input_settings=dict(level=1, image_size=16, square=5, patch=4, conv_depth=1, conv_channels=8))
RUNS = {**{a: (a, {}) for a in ARCHITECTURES}, "pixels L1, transformer": ("transformer", PIXELS)}
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


def cpu_identity(cpuinfo: str | None = None) -> str:
    """The CPU's vendor, family, model, stepping and name, read from `/proc/cpuinfo` (or `cpuinfo`, its text): two CPUs
    with the same kernel set (AVX-512 on an Intel and on an AMD machine) still round differently in their vector
    libraries' code paths. 'unknown' where it cannot be read (another OS): such a platform never takes the exact branch."""
    if cpuinfo is None:
        try: cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError: return "unknown"            # platform.processor() names an architecture, not a CPU
    first = {}
    for line in cpuinfo.splitlines():
        if not line.strip(): break          # the first processor's block
        k, _, v = line.partition(":")
        first[k.strip()] = v.strip()
    fields = [first.get(k, "") for k in ("vendor_id", "cpu family", "model", "stepping", "model name")]
    return " / ".join(fields) if any(fields) else "unknown"


def platform_key(cpuinfo: str | None = None) -> dict:
    "What the float arithmetic depends on beyond the code: torch's version, the CPU kernels it picks, and the CPU itself."
    return dict(torch=torch.__version__.split("+")[0], kernels=torch.backends.cpu.get_cpu_capability(),
                machine=platform.machine(), cpu=cpu_identity(cpuinfo))


def exact_record(ref: dict, key: dict) -> dict | None:
    "The reference's record made on this very platform, CPU included, if there is one; a CPU of unknown identity has none."
    if key["cpu"] == "unknown": return None
    return next((r for r in ref["records"] if r["platform"] == key), None)


def first_difference(got: list, want: list, rel: float = 0., abs_: float = 0.) -> str | None:
    "Where two loss curves first differ by more than `rel`/`abs_`: the step, both values and their relative gap; None if nowhere."
    for step, (a, b) in enumerate(zip(got, want), 1):
        if not (a == b or math.isclose(a, b, rel_tol=rel, abs_tol=abs_)):
            return f"step {step} of {len(want)}: loss {a!r} against {b!r} recorded ({abs(a - b) / max(abs(b), 1e-30):.1e} relative)"
    return None


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


TOLERANCE = dict(rel=1e-4, abs_=1e-6)   # another CPU or torch: the same run up to float rounding


@pytest.mark.parametrize("name", list(RUNS))
def test_the_golden_run_is_reproduced(name, tmp_path):
    """Today's code trains each golden run to the committed losses, metrics and weights: exactly on a CPU that recorded a
    reference, to float rounding (and the same selected step) on any other."""
    ref, key = json.loads(REFERENCE.read_text()), platform_key()
    got = golden_run(name, tmp_path)
    assert len(got["losses"]) == TINY["steps"], f"golden run {name!r}: {len(got['losses'])} steps logged, not {TINY['steps']}"
    mine = exact_record(ref, key)
    if mine is not None:
        want = mine["runs"][name]
        where = first_difference(got["losses"], want["losses"])
        assert where is None, f"golden run {name!r} on the CPU that recorded it differs at {where}"
        assert set(got["row"]) == set(want["row"]), f"golden run {name!r}: result columns differ: {set(got['row']) ^ set(want['row'])}"
        differ = {k: (got["row"][k], v) for k, v in want["row"].items() if not same(got["row"][k], v)}
        assert not differ, f"golden run {name!r}: metrics differ (today, recorded): {differ}"
        assert (got["last_weights"], got["selected_weights"]) == (want["last_weights"], want["selected_weights"]), \
            f"golden run {name!r}: the weights differ from the recorded ones though every loss agrees"
    for record in ref["records"]:    # every record, this CPU's too, to float rounding
        want = record["runs"][name]
        assert len(want["losses"]) == TINY["steps"], f"golden run {name!r}: the record of {record['platform']} has {len(want['losses'])} steps"
        where = first_difference(got["losses"], want["losses"], **TOLERANCE)
        assert where is None, f"golden run {name!r} differs beyond float rounding from the record of {record['platform']} at {where}"
        assert got["row"]["best_step"] == want["row"]["best_step"], \
            f"golden run {name!r}: selected step {got['row']['best_step']}, recorded {want['row']['best_step']} on {record['platform']}"


INTEL = "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 143\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\nstepping\t: 8\n\nprocessor\t: 1\n"
AMD = "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\nmodel name\t: AMD EPYC 9654 96-Core Processor\nstepping\t: 1\n"


def test_the_platform_key_tells_two_cpus_apart():
    "An Intel and an AMD CPU with the same torch and kernel set (AVX-512) have different keys, so only one takes the exact branch."
    intel, amd = platform_key(INTEL), platform_key(AMD)
    assert intel["kernels"] == amd["kernels"] and intel["torch"] == amd["torch"]
    assert intel != amd and intel["cpu"] == "GenuineIntel / 6 / 143 / 8 / Intel(R) Xeon(R) Platinum 8480+"
    ref = dict(records=[dict(platform=intel, runs={})])
    assert exact_record(ref, intel) is ref["records"][0] and exact_record(ref, amd) is None
    unknown = dict(platform_key(""), cpu="unknown")
    assert exact_record(dict(records=[dict(platform=unknown, runs={})]), unknown) is None


def test_a_difference_is_reported_with_its_step_and_size():
    "The failure names the first step that differs and by how much, relative."
    assert first_difference([1.0, 2.0, 3.0], [1.0, 2.0, 3.0]) is None
    assert first_difference([1.0, 2.0000004], [1.0, 2.0]).startswith("step 2 of 2: loss 2.0000004 against 2.0 recorded (2.0e-07")
    assert first_difference([1.0, 2.0000004], [1.0, 2.0], **TOLERANCE) is None


def record(fresh: bool = False) -> None:
    """Add this platform's record to the reference, or replace it. The new runs must agree with every other platform's
    record to float rounding, or the code has moved the numbers: then only `--fresh` (drop the other records) writes."""
    import tempfile
    runs = {}
    for name in RUNS:
        with tempfile.TemporaryDirectory() as d: runs[name] = golden_run(name, Path(d))
        print(name, runs[name]["losses"][-1], runs[name]["row"]["object_acc"], runs[name]["selected_weights"])
    key = platform_key()
    old = [] if fresh or not REFERENCE.exists() else json.loads(REFERENCE.read_text())["records"]
    others = [r for r in old if r["platform"] != key]
    for r in others:
        for name in RUNS:
            where = first_difference(runs[name]["losses"], r["runs"][name]["losses"], **TOLERANCE)
            if where is not None or runs[name]["row"]["best_step"] != r["runs"][name]["row"]["best_step"]:
                sys.exit(f"not written: {name!r} differs from the record of {r['platform']} ({where or 'selected step'}); "
                         "if the change is meant to move the numbers, record again with --fresh")
    records = others + [dict(platform=key, runs=runs)]
    REFERENCE.write_text(json.dumps(dict(settings=TINY, pixels=PIXELS, records=records), indent=1) + "\n")
    print(f"{REFERENCE.name}: {len(records)} record(s); this one made on {key}")


if __name__ == "__main__":
    record(fresh="--fresh" in sys.argv[1:])
