"""Tests of the training loop (App. B.4) beyond the notebook's own: resuming after a real kill, corrupt checkpoints."""
import contextlib, io, os, re, signal, subprocess, sys, textwrap, time, warnings
from pathlib import Path

import pytest
import torch

from binding_nb import evaluation, loop, models, train
from binding_nb.checkpoints import HOW_TO_RUN, load_checkpoint, load_model, read_checkpoint
from binding_nb.train import train_run
from binding_nb.config import _NOT_IN_KEY, run_config, RUN_SETTINGS, RunConfig
from binding_nb.utils import write_verified

torch.set_num_threads(1)   # two threads stall on a busy 2-core machine

from conftest import TINY_RUN as CFG


def test_resume_after_kill(tmp_path, uninterrupted):
    "A run killed with SIGKILL mid-way resumes from its last checkpoint and ends exactly where an uninterrupted run ends."
    cfg = run_config(**CFG)
    whole, _ = uninterrupted(cfg)
    ck = tmp_path / "killed.pt"
    script = textwrap.dedent(f"""
        import time, torch
        from binding_nb import config, train
        torch.set_num_threads(1)
        cfg = config.run_config(**{CFG!r})
        save = train.save_checkpoint
        def save_and_hold(*args, **kw):    # hold the run at its first checkpoint past step 20: the kill lands mid-way
            save(*args, **kw)              # however fast the machine trains
            if args[6].step >= 20: time.sleep(600)
        train.save_checkpoint = save_and_hold
        train.train_run(cfg, {str(ck)!r}, progress=False)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], start_new_session=True)
    try:
        deadline = time.time() + 120
        while time.time() < deadline:
            if ck.exists() and read_checkpoint(ck)["step"] >= 20: break
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    step = read_checkpoint(ck)["step"]
    assert 20 <= step < cfg.steps, step
    resumed = train_run(cfg, ck, progress=False)
    drop = lambda r: {k: v for k, v in r.items() if k != "train_seconds"}
    assert drop(resumed) == drop(whole)


def _count_steps(monkeypatch) -> list:
    "Record every optimiser step `train_run` takes from now on."
    steps, step = [], loop.train_step
    monkeypatch.setattr(loop, "train_step", lambda *a, **k: (steps.append(1), step(*a, **k))[1])
    return steps


def test_resume_under_new_how_to_run_settings(tmp_path, monkeypatch, uninterrupted):
    """Changing log_every, amp or ckpt_every (how a run runs, not what it trains) used to set the checkpoint aside and restart
    from step 0: now the run resumes from the saved step, runs on with the new values, and ends exactly where an uninterrupted
    run of the new settings ends (on the CPU, amp 'auto' and 'fp32' are the same arithmetic)."""
    assert {"log_every", "amp", "ckpt_every", "device"} <= set(HOW_TO_RUN) and not {"lr", "seed", "eval_every", "steps"} & set(HOW_TO_RUN)
    cfg = run_config(**CFG)
    new = cfg.replace(log_every=3, amp="fp32", ckpt_every=20)
    whole, whole_path = uninterrupted(new)
    ck = tmp_path / "run.pt"
    assert train_run(cfg, ck, stop_after=20, progress=False) is None and read_checkpoint(ck)["step"] == 20
    steps = _count_steps(monkeypatch)
    with warnings.catch_warnings():
        warnings.simplefilter("error")                                     # nothing set aside
        resumed = train_run(new, ck, progress=False)
    assert len(steps) == cfg.steps - 20                                    # from step 20, not step 0
    drop = lambda r: {k: v for k, v in r.items() if k != "train_seconds"}
    assert drop(resumed) == drop(whole)
    a, b = read_checkpoint(ck), read_checkpoint(whole_path)
    for part in ("model", "best_model"):
        assert a[part].keys() == b[part].keys() and all(torch.equal(a[part][k], b[part][k]) for k in a[part]), part
    assert a["config"] == new.settings()                          # the new values hold from then on
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.pt"]


def test_resume_under_bf16_continues_from_the_saved_step(tmp_path, monkeypatch):
    "amp changes the float arithmetic (bf16 autocast), not what is trained: a run resumes under it from where it stopped."
    cfg = run_config(**CFG)
    ck = tmp_path / "run.pt"
    train_run(cfg, ck, stop_after=30, progress=False)
    steps = _count_steps(monkeypatch)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        row = train_run(cfg.replace(amp="bf16", log_every=1), ck, progress=False)
    assert row is not None and len(steps) == cfg.steps - 30 and read_checkpoint(ck)["config"]["amp"] == "bf16"


@pytest.mark.parametrize("change", [dict(seed=1), dict(lr=1e-3), dict(eval_every=20)])
def test_resume_under_new_training_settings_is_refused(tmp_path, monkeypatch, change):
    "A setting that changes what is trained (or, eval_every, which weights are kept) still sets the checkpoint aside: the run starts afresh."
    cfg = run_config(**CFG)
    ck = tmp_path / "run.pt"
    train_run(cfg, ck, stop_after=20, progress=False)
    steps = _count_steps(monkeypatch)
    with pytest.warns(UserWarning, match=f"different configuration \\({next(iter(change))} "):
        train_run(cfg.replace(log_every=3, **change), ck, progress=False)
    assert len(steps) == cfg.steps                                         # from step 0
    assert len(list(tmp_path.glob("run.pt.bad-*"))) == 1


def _rewrite(path: Path, edit) -> None:
    "Rewrite the checkpoint at `path` after `edit(checkpoint)`, with a valid digest (as a script that edits checkpoints would)."
    ck = read_checkpoint(path); edit(ck)
    buf = io.BytesIO(); torch.save(ck, buf); write_verified(path, buf.getvalue(), "checkpoint")


def _edited_checkpoint(path: Path, cfg: RunConfig, edit) -> bytes:
    "A checkpoint of `cfg` after 10 steps at `path`, rewritten after `edit(checkpoint)`; its bytes."
    train_run(cfg, path, stop_after=10, progress=False)
    _rewrite(path, edit)
    return path.read_bytes()


def test_unknown_config_key_is_named_not_a_traceback(tmp_path):
    "A checkpoint whose config holds a setting RunConfig lacks: a sentence naming the file and the setting (was a raw TypeError in load_model)."
    cfg = run_config(**CFG)
    ck = tmp_path / "odd_settings.pt"
    raw = _edited_checkpoint(ck, cfg, lambda c: c["config"].update(dropout=0.1))
    for load in (lambda: load_model(ck, "cpu"), lambda: load_checkpoint(ck, cfg), lambda: train_run(cfg, ck, progress=False)):
        with pytest.raises(ValueError) as e:
            load()
        assert "odd_settings.pt" in str(e.value) and "(dropout)" in str(e.value) and "pass another checkpoint path" in str(e.value)
        assert e.value.__cause__ is None and not isinstance(e.value, TypeError)
    assert ck.read_bytes() == raw and sorted(p.name for p in tmp_path.iterdir()) == ["odd_settings.pt"]   # left untouched


def test_weights_that_do_not_fit_their_config_are_named(tmp_path):
    "Weights saved at one width under a config edited to another: a sentence naming the file (was a raw size-mismatch RuntimeError)."
    cfg = run_config(**CFG)
    ck = tmp_path / "edited.pt"
    raw = _edited_checkpoint(ck, cfg, lambda c: c["config"].update(d_model=16))
    edited = cfg.replace(d_model=16)
    for load in (lambda: load_model(ck, "cpu"), lambda: train_run(edited, ck, progress=False)):
        with pytest.raises(ValueError) as e:
            load()
        msg = str(e.value)
        assert "edited.pt" in msg and "do not fit the model its own config describes" in msg and "size mismatch" in msg, msg
        assert "pass another checkpoint path" in msg and "Error(s) in loading" not in msg
    assert ck.read_bytes() == raw and sorted(p.name for p in tmp_path.iterdir()) == ["edited.pt"]


def test_foreign_file_is_left_untouched(tmp_path):
    "A file that binding_nb did not write is never renamed: a clear error instead."
    ck = tmp_path / "run.pt"; ck.write_bytes(b"\x00garbage")
    with pytest.raises(ValueError, match="is not a checkpoint written by binding_nb"):
        load_checkpoint(ck, run_config(**CFG))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.pt"] and ck.read_bytes() == b"\x00garbage"


def test_folder_as_checkpoint_is_refused_untouched(tmp_path):
    "`train_run(checkpoint=<a folder>)` used to rename the folder (and everything in it) to *.bad-...: now a clear error."
    folder = tmp_path / "results"; (folder / "checkpoints").mkdir(parents=True); (folder / "checkpoints" / "a.pt").write_text("x")
    with pytest.raises(ValueError, match="is a folder: pass a file path"):
        train_run(run_config(**CFG), folder, progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results"] and (folder / "checkpoints" / "a.pt").read_text() == "x"


def test_checkpoint_under_a_file_fails_before_training(tmp_path, monkeypatch):
    (tmp_path / "a_file").write_text("x")
    steps = _count_steps(monkeypatch)
    with pytest.raises(NotADirectoryError, match="is a file, not a folder"):
        train_run(run_config(**{**CFG, "steps": 10_000}), tmp_path / "a_file" / "run.pt", progress=False)
    assert steps == []                                                     # refused up front, not at the first save


def test_flipped_bytes_never_load_silently(tmp_path):
    """Four-byte flips anywhere in a checkpoint: each one is caught (set aside with a warning, or refused when it hits the
    header), never resumed from. Before digests, 10 of 11 such flips loaded silently and 3 changed the result."""
    cfg = run_config(**CFG)
    train_run(cfg, tmp_path / "ck.pt", stop_after=20, progress=False)
    raw = (tmp_path / "ck.pt").read_bytes()
    for i, offset in enumerate(range(0, len(raw) - 4, len(raw) // 11)):
        bad = bytearray(raw); bad[offset:offset + 4] = bytes(b ^ 0xA5 for b in bad[offset:offset + 4])
        path = tmp_path / f"flip{i}.pt"; path.write_bytes(bytes(bad))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try: result, error = load_checkpoint(path, cfg), None
            except ValueError as e: result, error = None, e
        assert result is None, offset                                      # never resumed from
        if error is None:                                                  # caught by the digest: set aside, with a warning
            assert any("could not be read" in str(w.message) for w in caught), offset
            assert not path.exists() and len(list(tmp_path.glob(f"flip{i}.pt.bad-*"))) == 1
        else:                                                              # the flip hit the header: not ours, untouched
            assert "is not a checkpoint written by binding_nb" in str(error) and offset < 80 and path.exists(), (offset, error)


def test_padded_layout_trains_like_packed():
    "The GPU's sync-free padded layout, forced on the CPU, trains to the same result as the packed one (up to float rounding)."
    cfg = run_config(**{**CFG, "steps": 30})
    packed, padded = (train_run(cfg.replace(layout=lay), progress=False) for lay in ("packed", "padded"))
    for k in ("concept_acc", "object_acc", "bag_of_concepts_acc"):
        assert abs(packed[k] - padded[k]) <= 2 / cfg.n_test_scenes, (k, packed[k], padded[k])


class TickingClock:
    "A clock that moves `tick` seconds at each reading, whatever the machine's speed: a budgeted script's plan is then fixed."
    def __init__(self, tick: float): self.now, self.tick = 0.0, tick
    def __call__(self) -> float:
        self.now += self.tick
        return self.now


def test_device_script_rehearsal(tmp_path):
    "The prepared GPU script, shrunk (--tiny) and run on the CPU: every run of (a), (b), (d), (e) and (c) ends in the CSV, with its timing."
    import importlib.util, json, pandas as pd
    spec = importlib.util.spec_from_file_location("gpu_coverage_run", Path(__file__).parents[1] / "scripts" / "gpu_coverage_run.py")
    script = importlib.util.module_from_spec(spec); spec.loader.exec_module(script)
    threads = torch.get_num_threads()
    try:   # each measurement reads the clock 3 times for 10 steps: 13 steps/s, so every run gets 60-160 steps of the 60 s
        script.main(["--out", str(tmp_path), "--budget", "60", "--device", "cpu", "--tiny", "--coverages", "0.9", "0.5",
                     "--measure-seconds", "0.5"], clock=TickingClock(0.25))
    finally: torch.set_num_threads(threads)
    rows = pd.read_csv(tmp_path / "gpu_runs.csv")
    assert rows.run.tolist() == ["a", "b", "d", "e", "c", "c"] and rows.recipe.tolist()[:3] == ["authors", "ours", "ours"]
    assert rows.shared_embedding.tolist() == [False, False, True, False, False, False]
    assert rows.inputs.tolist() == ["tokens"] * 3 + ["pixels"] + ["tokens"] * 2 and rows.level.iloc[3] == 3
    assert rows[["object_acc", "bag_of_concepts_acc", "object_acc_seen_swap", "seen_swap_frac"]].notna().all().all()
    timing = json.loads((tmp_path / "gpu_timing.json").read_text())
    assert timing["total_s"] <= 60 and all("steps_run" in r for r in timing["runs"])
    assert all(50 <= r["steps_run"] <= 400 for r in timing["runs"])                    # each run cut to its share of the budget
    assert (tmp_path / "fig6_gpu.png").stat().st_size > 0


@pytest.mark.slow
def test_compiled_bodies_train_like_eager():
    "`compile=True` (torch.compile of the transformer bodies, for GPUs) gives the eager result; about 2 minutes of compiling on a CPU."
    cfg = run_config(**{**CFG, "steps": 30})
    eager, compiled = train_run(cfg, progress=False), train_run(cfg.replace(compile=True), progress=False)
    for k in ("concept_acc", "object_acc", "bag_of_concepts_acc"):
        assert abs(eager[k] - compiled[k]) <= 2 / cfg.n_test_scenes, (k, eager[k], compiled[k])


def test_bench_train_prints_both_architectures():
    "The training benchmark measures a transformer step and a product-encoder step, and the product step is the cheaper."
    out = subprocess.run([sys.executable, str(Path(__file__).parents[1] / "benchmarks" / "bench_train.py"), "--seconds", "0.5"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    import json
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert [r["architecture"] for r in rows] == ["transformer", "product-shared"]
    assert rows[1]["model_ms"] < rows[0]["model_ms"] and rows[1]["fraction_of_peak"] is None


def test_bench_train_times_the_authors_trainer_beside_ours(tmp_path, monkeypatch, capsys):
    """`--authors PATH` runs the authors' `amortizer` from a checkout, timed by the range its loop walks, in turn with
    ours, and prints each round's rates and the ratio; a folder that is not a checkout is named with what to pass, and
    `--amp` beside it or `--rounds` without it is refused before anything is timed."""
    bench = [str(Path(__file__).parents[1] / "benchmarks" / "bench_train.py"), "--seconds", "0.3", "--architectures",
             "transformer", "--rounds", "1"]
    folder = tmp_path / "src" / "mob" / "clip_embeddings" / "amortization"
    folder.mkdir(parents=True)
    (folder / "train_clean.py").write_text(textwrap.dedent("""
        import time
        from tqdm import tqdm
        import wandb
        def amortizer(params):                     # a stand-in: a loop of 1 ms steps, logging as theirs does
            wandb.init(mode="disabled")
            for i in tqdm(range(params["epochs"])): time.sleep(0.001); wandb.log({"step": i})
    """))
    out = subprocess.run([sys.executable, *bench, "--authors", str(tmp_path)], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    import json
    ours, theirs = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert theirs["bench"] == "authors_train_step" and len(theirs["rounds"]) == 1
    assert all(0 < r["theirs_steps_per_s"] < 1000 and r["ours_steps_per_s"] > 0 for r in theirs["rounds"])
    assert theirs["ours_over_theirs"] > 0 and "ours_compiled_over_theirs" not in theirs
    main = _bench_module().main                      # the refusals, here: each ends before anything is timed
    for extra, says in [(["--authors", str(tmp_path / "nowhere")], "binding-concepts-complexity"),
                        (["--authors", str(tmp_path), "--amp"], "drop --amp"), ([], "pass --authors")]:
        monkeypatch.setattr(sys, "argv", [*bench, *extra])
        with pytest.raises(SystemExit) as e: main()
        assert e.value.code != 0 and says in f"{e.value.code} {capsys.readouterr().err}", extra


def _bench_module():
    import importlib.util
    path = Path(__file__).parents[1] / "benchmarks" / "bench_train.py"
    spec = importlib.util.spec_from_file_location("bench_train", path)
    module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)
    return module


def test_against_the_authors_takes_turns_and_the_median_ratio():
    """Ours and theirs are timed in turn, ours first in odd rounds and theirs first in even ones; the ratio is the
    median over rounds of each round's ratio; ours is timed eager, and compiled as well where the config asks."""
    order, rates = [], iter([1.0, 2.0, 2.0, 2.0, 10.0, 1.0])                 # the rates, in the order they are taken
    def measure(cfg, seconds, amp):
        order.append(("ours", cfg.compile)); return {"steps_per_s": next(rates)}
    def theirs(checkout, cfg, seconds):
        order.append(("theirs", cfg.compile)); return {"steps_per_s": next(rates)}
    got = _bench_module().against_the_authors(Path("x"), run_config(**CFG), 1.0, 3, measure, theirs)
    assert order == [("ours", False), ("theirs", False), ("theirs", False), ("ours", False), ("ours", False),
                     ("theirs", False)]
    assert [r["ours_steps_per_s"] / r["theirs_steps_per_s"] for r in got["rounds"]] == [0.5, 1.0, 10.0]
    assert got["ours_over_theirs"] == 1.0 and "ours_compiled_over_theirs" not in got     # the median, not the mean
    order.clear(); rates = iter([4.0, 8.0, 2.0])
    got = _bench_module().against_the_authors(Path("x"), run_config(**CFG, compile=True), 1.0, 1, measure, theirs)
    assert order == [("ours", False), ("ours", True), ("theirs", True)]
    assert got["ours_over_theirs"] == 2.0 and got["ours_compiled_over_theirs"] == 4.0


@pytest.mark.slow
def test_bench_train_times_ours_eager_and_compiled_against_the_authors(tmp_path):
    "With `--compile` beside `--authors`, ours is timed eager and compiled in the same sitting, each against theirs."
    folder = tmp_path / "src" / "mob" / "clip_embeddings" / "amortization"
    folder.mkdir(parents=True)
    (folder / "train_clean.py").write_text("import time\nfrom tqdm import tqdm\n"
                                           "def amortizer(params):\n    for i in tqdm(range(10**6)): time.sleep(0.001)\n")
    out = subprocess.run([sys.executable, str(Path(__file__).parents[1] / "benchmarks" / "bench_train.py"), "--seconds",
                          "0.3", "--architectures", "transformer", "--compile", "--authors", str(tmp_path),
                          "--rounds", "1"],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    import json
    compiled, theirs = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert compiled["compile"]
    (r,) = theirs["rounds"]
    for k in ("ours", "ours_compiled"):
        assert theirs[f"{k}_over_theirs"] == round(r[f"{k}_steps_per_s"] / r["theirs_steps_per_s"], 2)


# A host synchronisation reads a tensor's value back to Python; on the CPU these are the ways it happens.
HOST_READS = ("__bool__", "__int__", "__float__", "__index__", "item", "tolist", "nonzero")
# ... and these ops make a tensor whose shape the data decides, which a GPU must read back to allocate it
SHAPE_READS = {torch: ("unique", "nonzero", "masked_select", "unique_consecutive"), torch.Tensor: ("unique", "masked_select")}

@contextlib.contextmanager
def no_host_reads(shapes: bool = True):
    """Within the block, reading a tensor's value on the host (`bool(t)`, `int(t)`, `t.item()`, ...) raises, and so
    (`shapes`) does an op whose output shape depends on the data (`unique`, indexing by a boolean mask, ...)."""
    saved = [(torch.Tensor, name, getattr(torch.Tensor, name)) for name in HOST_READS]
    if shapes: saved += [(owner, name, getattr(owner, name)) for owner, names in SHAPE_READS.items() for name in names]
    getitem = torch.Tensor.__getitem__
    def refuse(name):
        def read(*args, **kwargs): raise AssertionError(f"{name} called: a host synchronisation")
        return read
    def index(t, i):
        if isinstance(i, torch.Tensor) and i.dtype == torch.bool:
            raise AssertionError("indexing by a boolean mask: a host synchronisation")
        return getitem(t, i)
    try:
        for owner, name, _ in saved: setattr(owner, name, refuse(name))
        if shapes: torch.Tensor.__getitem__ = index
        yield
    finally:
        for owner, name, f in saved: setattr(owner, name, f)
        torch.Tensor.__getitem__ = getitem


SYNC_FREE = {"tokens": dict(),
             "authors": dict(concept_queries="present", max_object_positives=64, swaps_per_scene=1, negatives_from="all"),
             "product": dict(architecture="product", code="shared", lr=1e-2),
             "pixels": dict(C=2, inputs="pixels", input_settings=dict(level=2, image_size=16, square=5))}

@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU"))])
@pytest.mark.parametrize("kind", SYNC_FREE)
def test_a_training_step_never_waits_for_the_device(kind, device):
    """Twenty training steps of every input kind, drawing each batch included (sampling, negatives, queries, forward,
    backward, optimiser and schedule), read nothing back from the device (padded layout, as on a GPU)."""
    cfg = run_config(**{**CFG, **SYNC_FREE[kind], "device": device, "layout": "padded", "max_objects": 2})
    run = train.setup_run(cfg, torch.device(device))
    model, opt, sched, next_batch = run.model, run.opt, run.sched, run.next_batch
    loop.train_step(model, opt, sched, next_batch(), models.batch_loss)             # a first step outside: lazy setup
    if device == "cpu":
        with no_host_reads():
            for _ in range(20): loss, parts = loop.train_step(model, opt, sched, next_batch(), models.batch_loss)
    else:
        torch.cuda.synchronize(); torch.cuda.set_sync_debug_mode("error")
        try:
            for _ in range(20): loss, parts = loop.train_step(model, opt, sched, next_batch(), models.batch_loss, amp=True)
        finally: torch.cuda.set_sync_debug_mode("default")
    assert torch.isfinite(loss) and set(parts) == {"concept_loss", "object_loss"}


@pytest.mark.parametrize("kind", ["tokens", "authors"])
def test_drawing_a_packed_batch_reads_no_value(kind):
    """The CPU's packed batches keep their exact query sets (`unique`, whose stream the committed runs were trained
    on), but drawing one reads no value back: the checks of user input are made once, not at every conversion."""
    cfg = run_config(**{**CFG, **SYNC_FREE[kind], "layout": "packed"})
    next_batch = train.setup_run(cfg, torch.device("cpu")).next_batch
    with no_host_reads(shapes=False):
        for _ in range(20): next_batch()
    with pytest.raises(AssertionError, match="host synchronisation"), no_host_reads(): next_batch()   # the exact sets


def test_the_host_read_guard_catches_reads():
    "The guard is honest: each way of reading a value raises inside it, and nothing is left patched after it."
    t = torch.tensor([1.0, 2.0])
    reads = (lambda: bool(t[0]), lambda: int(t[0]), lambda: float(t[0]), lambda: t.sum().item(), lambda: t.tolist(),
             lambda: t.nonzero(), lambda: torch.unique(t), lambda: t.unique(), lambda: t[t > 1],
             lambda: torch.nonzero(t), lambda: t.masked_select(t > 1))
    for read in reads:
        with no_host_reads(), pytest.raises(AssertionError, match="host synchronisation"): read()
    assert bool(t[0]) and t.tolist() == [1.0, 2.0] and t[t > 1].tolist() == [2.0] and len(torch.unique(t)) == 2


# another valid value of each setting whose type alone does not give one (a choice among names, a bound)
_OTHER = dict(positional="learned", init="xavier", architecture="product", code="independent", concept_queries="present",
              negatives_from="all", schedule="constant", device="cpu", amp="fp32", layout="padded",
              logit_scale_max=5.0, coverage=0.25, warmup_frac=0.2, concept_on_at=0.5, concept_off_at=0.5)


def _other(name: str, value):
    "A valid value of the setting `name` that differs from `value`."
    if name in _OTHER: return _OTHER[name]
    if isinstance(value, bool): return not value
    if isinstance(value, int): return value * 2 or 1
    if isinstance(value, float): return value / 2 or 0.5
    return 0.5                                                                 # None (query_weight_decay): a number


def test_every_setting_but_how_to_run_enters_the_model_key():
    "No setting is left out of the key for history's sake: every one but coverage, seed and how to run changes it (an input kind's, where not its default)."
    base = run_config()
    for name in RUN_SETTINGS:
        if name in ("input_settings", "inputs"): continue
        changed = base.replace(**{name: _other(name, getattr(base, name))})
        assert (changed.model_key() == base.model_key()) == (name in _NOT_IN_KEY), name
    pixels = run_config(inputs="pixels")
    assert len({base.model_key(), pixels.model_key(), run_config(inputs="pixels", input_settings=dict(level=2)).model_key()}) == 3
    assert run_config(inputs="pixels", input_settings=dict(level=1)).model_key() == pixels.model_key()   # the kind's default


@pytest.mark.parametrize("how", ["before test-best weights", "another n_test_scenes"])
def test_a_resume_that_cannot_continue_the_test_record_starts_it_again(tmp_path, how):
    """A checkpoint written before test-best weights were kept, or resumed with another n_test_scenes: the authors' test record
    starts again at the resumed step, with a warning; the result row's test-selected step and the test-best weights cover the
    same steps, and the authors' protocol refuses those weights."""
    import io
    from binding_nb.checkpoints import load_model
    from binding_nb.utils import write_verified
    cfg = run_config(**CFG)
    ck = tmp_path / "run.pt"
    assert train_run(cfg, ck, stop_after=20, progress=False) is None
    if how == "before test-best weights":                                   # as an older binding_nb wrote it
        saved = read_checkpoint(ck)
        for k in ("test_best_score", "test_best_step", "test_best_model", "test_best_from"): saved.pop(k, None)
        buf = io.BytesIO(); torch.save(saved, buf); write_verified(ck, buf.getvalue(), "checkpoint")
        later, message = cfg, "written before binding_nb kept test-best weights"
    else:
        later, message = cfg.replace(n_test_scenes=16), "scored on 128 scenes, this run's on 16"
    with pytest.warns(UserWarning, match=message) as said:
        row = train_run(later, ck, progress=False)
    assert [w.filename for w in said if message in str(w.message)] == [__file__]   # it points at the caller of train_run
    saved = read_checkpoint(ck)
    assert saved["test_best_from"] == 21 and saved["test_best_step"] > 20 and row["test_selected_step"] == saved["test_best_step"]
    with pytest.raises(ValueError, match="chosen among the steps from 21 only"):
        load_model(ck, "cpu", weights="test_best")
    load_model(ck, "cpu")                                                   # ours is served as before


def test_a_validation_embeds_every_query_once(monkeypatch):
    """Our validation and the authors' test read the same weights, so a validation embeds every query once, not once
    per test; the selected weights' final test embeds them once more."""
    calls, embed = [], evaluation.embed_all_queries
    for module in (train, evaluation):                  # where the run calls it, and where the tests do
        monkeypatch.setattr(module, "embed_all_queries", lambda *a, **k: (calls.append(1), embed(*a, **k))[1])
    cfg = run_config(**CFG)
    row = train_run(cfg, progress=False)
    validations = -(-cfg.steps // cfg.eval_every)
    assert len(calls) == validations + 1, (len(calls), validations)
    assert row["test_selected_step"] > 0


def test_a_resume_into_a_layout_that_draws_batches_another_way_warns(tmp_path):
    """With capped object positives, the padded layout's batches of fixed shape draw other random numbers than the packed
    layout's: a run resumed across the two warns that it leaves its stream; without the cap, it continues silently."""
    ck = tmp_path / "run.pt"
    cfg = run_config(**{**CFG, "max_object_positives": 8, "layout": "packed"})
    assert train_run(cfg, ck, stop_after=20, progress=False) is None
    with pytest.warns(UserWarning, match="resumed in layout 'padded' after step 20 in 'packed'.*not an uninterrupted"):
        train_run(cfg.replace(layout="padded"), ck, stop_after=30, progress=False)
    plain = tmp_path / "plain.pt"
    assert train_run(cfg.replace(max_object_positives=0), plain, stop_after=20, progress=False) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        train_run(cfg.replace(max_object_positives=0, layout="padded"), plain, stop_after=30, progress=False)


def test_profile_train_attention_forms_agree_and_the_main_job_profiles():
    """The written-out attention forms that `benchmarks/profile_train.py --attention` times against the fused kernel
    compute the same attention; `--main-job` profiles a step of 05's main-job transformer."""
    import importlib.util
    path = Path(__file__).parents[1] / "benchmarks" / "profile_train.py"
    spec = importlib.util.spec_from_file_location("profile_train", path)
    prof = importlib.util.module_from_spec(spec); spec.loader.exec_module(prof)
    for shape in prof.ATTENTION_SHAPES[:3]:
        q, k, v = (torch.randn(shape) for _ in range(3))
        fused = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        for form in (prof.elementwise, prof.written_out): torch.testing.assert_close(form(q, k, v), fused)
    out = subprocess.run([sys.executable, str(path), "--main-job", "--steps", "2"], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "aten::mm" in out.stdout and "Self CPU time total" in out.stdout


def test_a_hand_made_checkpoint_is_refused_naming_it(tmp_path):
    "A checkpoint saved by hand (no digest) with a config this version refuses, weights that are not a state dict, or NaN weights: a sentence naming the file."
    from binding_nb.checkpoints import load_model, read_checkpoint
    cfg = run_config(C=2, V=4, steps=5, batch_size=8, d_model=8, n_layers=1, n_heads=2, d_out=8, eval_every=5, ckpt_every=5,
                     n_val_scenes=8, n_test_scenes=8, device="cpu")
    train_run(cfg, tmp_path / "run.pt", progress=False)
    cases = {"config": (lambda c: c["config"].update(d_model=-1), "holds a config this version refuses (d_model must be >= 1"),
             "weights": (lambda c: c.update(model=None, best_model=None), "holds weights that are not a state dict"),
             "nan": (lambda c: [t.fill_(float("nan")) for t in c["best_model"].values() if t.is_floating_point()], "holds selected weights that are not finite")}
    for name, (change, message) in cases.items():
        ck = read_checkpoint(tmp_path / "run.pt"); change(ck); torch.save(ck, tmp_path / f"{name}.pt")
        with pytest.raises(ValueError, match=re.escape(f"{tmp_path / name}.pt {message.split(' (')[0]}")): load_model(tmp_path / f"{name}.pt", "cpu")


def test_a_stop_on_purpose_saves_where_it_stopped_and_needs_a_checkpoint(tmp_path):
    "stop_after between two checkpoints saves that step (a resume trains on from it, to the uninterrupted run's row); without a checkpoint it is refused."
    cfg = run_config(**{**CFG, "steps": 30, "ckpt_every": 20, "eval_every": 10})
    whole = train_run(cfg, tmp_path / "whole.pt", progress=False)
    assert train_run(cfg, tmp_path / "cut.pt", stop_after=15, progress=False) is None and read_checkpoint(tmp_path / "cut.pt")["step"] == 15
    drop = lambda r: {k: v for k, v in r.items() if k != "train_seconds"}
    assert drop(train_run(cfg, tmp_path / "cut.pt", progress=False)) == drop(whole)
    with pytest.raises(ValueError, match="needs a checkpoint to save it in"): train_run(cfg, None, stop_after=15, progress=False)


def test_a_run_without_validation_objects_is_refused():
    "val_fraction=0, or a coverage leaving one train object, would keep weights chosen on no scene: refused when the config is made."
    with pytest.raises(ValueError, match=r"val_fraction must be in \(0, 1\), got 0"): run_config(val_fraction=0)
    with pytest.raises(ValueError, match="leaves 1 train object, and none to validate on"): run_config(V=4, coverage=0.05)


def test_one_setting_is_one_run():
    "A float32 coverage is the run of its decimal (one name, one config); a coverage other by a hair has another name; text for a bool or a bool for a number is refused."
    import numpy as np
    assert run_config(coverage=np.float32(0.3)) == run_config(coverage=0.3)
    assert run_config(coverage=np.float32(0.3)).run_name() == run_config(coverage=0.3).run_name() != run_config(coverage=0.30000001).run_name()
    for bad in (dict(compile="false"), dict(coverage=True)):
        with pytest.raises(ValueError, match=f"{next(iter(bad))} must be"): run_config(**bad)
