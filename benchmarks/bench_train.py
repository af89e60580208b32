"""Benchmark: training steps of the controlled dual encoders (App. B.2-B.4) at a reference configuration.

Run `python benchmarks/bench_train.py [--device cpu|cuda] [--threads 1] [--seconds 20] [--amp] [--compile]
[--architectures transformer product-shared] [--authors PATH [--rounds 3]]`; prints one JSON line per architecture
with `steps_per_s` (steps timed back to back, one device synchronisation at the end, as the training loop runs them),
`achieved_gflops` (analytic forward+backward matmul FLOPs per step times steps/s), `matmul_peak_gflops` (a large matmul
timed in the same process before and after the steps, the better of the two, in bf16 with `--amp`, else fp32) and their
ratio, and a per-step split into building the batch and the model's step (synchronised after each part, so only
indicative on a GPU). Reference: the preset `BENCH_SCALE` (binding_nb.config: d_model 128, 4 layers, 4 heads, d_out 64,
256 scenes per batch, C=2, V=20, max_objects=2), concept and object queries; the product encoders (rank 64) on the same
batches, whose FLOPs are not counted (null).

With `--authors PATH` (a checkout of the authors' public code, github.com/oshapio/binding-concepts-complexity) it also
times their trainer (`train_clean.amortizer`, run as it is in this process, wandb disabled) at the same configuration
and on the same threads: ours and theirs in turn for `--rounds` rounds (3), ours first in odd rounds and theirs first in
even ones, so that a steady drift in the machine's speed falls on both; it prints each round's rates and the median
ratio. With `--compile` as well, ours both eager (as their trainer runs) and compiled, each against theirs. Both are
fp32: `--amp` is refused beside `--authors`.
"""
import argparse, contextlib, json, statistics, sys, tempfile, time, types
from pathlib import Path

import torch

from binding_nb.loop import train_step
from binding_nb.models import batch_loss, step_flops
from binding_nb.config import ARCHITECTURES, BENCH_SCALE, run_config, RunConfig, with_architecture
from binding_nb.train import setup_run
from binding_nb.utils import arg_type, number_in, resolve_device, whole_number


def sync(dev: torch.device) -> None:
    if dev.type == "cuda": torch.cuda.synchronize()


def matmul_peak_gflops(dev: torch.device, dtype: torch.dtype, n: int = 4096, repeats: int = 10) -> float:
    "Best-of-`repeats` GFLOP/s of an n x n matmul in `dtype`."
    n = n if dev.type == "cuda" else 2048
    a, b = torch.randn(n, n, device=dev, dtype=dtype), torch.randn(n, n, device=dev, dtype=dtype)
    for _ in range(3): a @ b
    best = float("inf")
    for _ in range(repeats):
        sync(dev); t0 = time.perf_counter(); a @ b; sync(dev)
        best = min(best, time.perf_counter() - t0)
    return 2 * n ** 3 / best / 1e9


def measure(cfg: RunConfig, seconds: float, amp: bool) -> dict:
    "Steps/s of `cfg` back to back, where a step's time goes, and (transformers) the FLOPs against the matmul peak."
    dev = resolve_device(cfg.device)
    run = setup_run(cfg, dev)
    model, batch = run.model, run.next_batch
    step = lambda b: train_step(model, run.opt, run.sched, b, batch_loss, amp=amp)
    peak_before = matmul_peak_gflops(dev, torch.bfloat16 if amp else torch.float32)
    for _ in range(10): step(batch())                           # warm-up (and compilation)
    sync(dev)
    n, t0 = 0, time.perf_counter()                              # back to back: the rate the training loop gets
    while n < 10 or time.perf_counter() - t0 < seconds:
        for _ in range(10): step(batch())
        n += 10
        if dev.type == "cuda" and n % 100: continue
        sync(dev)
    sync(dev)
    wall = time.perf_counter() - t0
    split, flops = {"batch": 0.0, "model": 0.0}, 0
    transformer = cfg.architecture == "transformer"
    for _ in range(10):                                         # where a step's time goes (synchronised per part)
        sync(dev); t1 = time.perf_counter(); b = batch(); sync(dev); t2 = time.perf_counter()
        step(b); sync(dev); t3 = time.perf_counter()
        split["batch"] += t2 - t1; split["model"] += t3 - t2; flops += step_flops(cfg.model, b) if transformer else 0
    steps_per_s = n / wall
    achieved = flops / 10 * steps_per_s / 1e9 if transformer else None
    peak = max(peak_before, matmul_peak_gflops(dev, torch.bfloat16 if amp else torch.float32))   # the better of the two
    return {"steps": n, "steps_per_s": round(steps_per_s, 3), "batch_ms": round(100 * split["batch"], 2),
            "model_ms": round(100 * split["model"], 2), "gflop_per_step": round(flops / 10 / 1e9, 3) if transformer else None,
            "achieved_gflops": round(achieved, 2) if transformer else None, "matmul_peak_gflops": round(peak, 2),
            "fraction_of_peak": round(achieved / peak, 3) if transformer else None,
            "params_per_encoder": sum(p.numel() for p in model.scene_encoder.parameters())}


class _Enough(Exception):
    "Raised into the authors' loop once it has run long enough."


def authors_trainer(checkout: Path) -> Path:
    "The folder of the authors' trainer in `checkout`, or an exit that says what to pass."
    folder = Path(checkout).expanduser() / "src" / "mob" / "clip_embeddings" / "amortization"
    if not (folder / "train_clean.py").is_file():
        raise SystemExit(f"--authors {checkout}: no src/mob/clip_embeddings/amortization/train_clean.py there; pass a "
                         f"checkout of github.com/oshapio/binding-concepts-complexity")
    return folder


def authors_steps_per_s(checkout: Path, cfg: RunConfig, seconds: float) -> dict:
    """Steps/s of the authors' trainer at `cfg`'s sizes, timed in this process by the range its loop walks (their
    progress bar is swapped for a clock; their loop, data and model are theirs, unchanged), from its 10th step on."""
    folder = authors_trainer(checkout)
    sys.modules.setdefault("wandb", types.SimpleNamespace(init=lambda **k: None, log=lambda *a, **k: None))
    sys.path.insert(0, str(folder))
    import train_clean
    times, cuda = [], torch.cuda.is_available()              # their trainer takes the GPU wherever there is one
    def clock(steps):                               # stands in for tqdm: a time per step, stopped after `seconds`
        for i in steps:
            if cuda: torch.cuda.synchronize()                # the steps before have run, not just been queued
            times.append(time.perf_counter())
            if len(times) > 20 and times[-1] - times[10] >= seconds: raise _Enough
            yield i
    train_clean.tqdm = clock
    params = dict(sim_type="cos", epochs=100_000, model_d_out=cfg.d_out, model_d_model=cfg.d_model,
                  model_num_heads=cfg.n_heads, model_num_layers=cfg.n_layers, model_lr=cfg.lr,
                  train_batch_size=cfg.batch_size, train_num_grad_steps=1, test_every_steps=0, test_num_batches=1,
                  test_batch_size=cfg.batch_size, use_scheduler=True, weight_decay=0.1, num_concepts=cfg.C,
                  num_vals_per_concept=cfg.V, probe_concepts=True, probe_objects=True, max_num_objects=cfg.max_objects,
                  train_object_fraction=cfg.coverage, object_split_seed=0, save_model=False,
                  save_best_object_model=False, num_concept_values_take_max=64, num_object_values_take_max=64,
                  num_negative_objs_per_pos=0, num_swap_obj_negatives_per_scene=1, train_probe_all_objects=True,
                  use_cliplike_text_encoder=False, use_wandb=False, train_num_workers=0, test_num_workers=0,
                  prefetch_factor=4)
    with tempfile.TemporaryDirectory() as work, contextlib.redirect_stdout(sys.stderr):   # their prints: not our JSON
        try: train_clean.amortizer({**params, "working_dir": work})
        except _Enough: pass
    return {"steps": len(times) - 11, "steps_per_s": round((len(times) - 11) / (times[-1] - times[10]), 3)}


def against_the_authors(checkout: Path, cfg: RunConfig, seconds: float, rounds: int, measure=measure,
                        theirs=authors_steps_per_s) -> dict:
    """Ours (eager, as their trainer runs; and compiled where `cfg.compile`) and theirs at `cfg`'s sizes, timed in
    turn for `rounds` rounds, ours first in odd rounds and theirs first in even ones, so that a steady drift in the
    machine's speed falls on both; each rate per round, and the median over rounds of each ratio."""
    kinds = {"ours": cfg.replace(compile=False), **({"ours_compiled": cfg} if cfg.compile else {})}
    mine = lambda: {f"{k}_steps_per_s": measure(c, seconds, False)["steps_per_s"] for k, c in kinds.items()}
    their = lambda: {"theirs_steps_per_s": theirs(checkout, cfg, seconds)["steps_per_s"]}
    each = []
    for r in range(rounds):
        first, second = (mine, their) if r % 2 == 0 else (their, mine)
        got = first() | second()
        each.append({k: got[k] for k in sorted(got)})
    # three significant figures: a ratio far below one (a slow machine, a stand-in trainer) is not rounded to zero
    ratio = lambda k: float(f'{statistics.median(r[f"{k}_steps_per_s"] / r["theirs_steps_per_s"] for r in each):.3g}')
    return {"rounds": each, **{f"{k}_over_theirs": ratio(k) for k in kinds}}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="auto")
    p.add_argument("--threads", type=arg_type(whole_number, low=0), default=1,
                   help="torch CPU threads (0: torch's default). 1 by default: on a shared 2-core machine two threads "
                        "stall on each other whenever the other core is busy (10x slower steps measured)")
    p.add_argument("--coverage", type=arg_type(number_in, low=0, high=1, low_open=True), default=0.5)
    p.add_argument("--seconds", type=arg_type(number_in, low=0, low_open=True), default=20.0, help="time spent in measured steps of each architecture (at least 10 steps)")
    p.add_argument("--amp", action="store_true", help="bf16 autocast (the default of training runs on CUDA)")
    p.add_argument("--compile", action="store_true", help="torch.compile the transformer bodies")
    p.add_argument("--architectures", nargs="+", default=["transformer", "product-shared"], choices=ARCHITECTURES)
    p.add_argument("--authors", type=Path, help="a checkout of the authors' public code: time their trainer too")
    p.add_argument("--rounds", type=arg_type(whole_number, low=1), help="with --authors: rounds of ours and theirs, timed in turn (3)")
    a = p.parse_args()
    try: resolve_device(a.device)
    except (ValueError, RuntimeError) as e: p.error(str(e))
    if a.rounds is not None and not a.authors: p.error("--rounds counts the rounds against the authors: pass --authors")
    a.rounds = 3 if a.rounds is None else a.rounds
    if a.authors:                                               # a wrong path fails before anything is timed
        authors_trainer(a.authors)
        if a.amp: raise SystemExit("--authors: their trainer runs in fp32; drop --amp to compare like with like")
        if resolve_device(a.device).type != ("cuda" if torch.cuda.is_available() else "cpu"):
            raise SystemExit(f"--authors: their trainer runs on {'cuda' if torch.cuda.is_available() else 'cpu'} "
                             f"here; pass --device auto to time ours there too")
    if a.threads: torch.set_num_threads(a.threads)
    base = BENCH_SCALE(run_config(coverage=a.coverage, steps=100_000, device=a.device, compile=a.compile))   # every figure at it
    dev = resolve_device(base.device)
    where = {"device": str(dev), "gpu": torch.cuda.get_device_name() if dev.type == "cuda" else None,
             "threads": torch.get_num_threads()}
    for name in a.architectures:
        print(json.dumps({"bench": "train_step", "architecture": name, **where, "amp": a.amp, "compile": a.compile,
                          **measure(with_architecture(base, name), a.seconds, a.amp)}), flush=True)
    if a.authors: print(json.dumps({"bench": "authors_train_step", "architecture": "transformer", **where,
                                    **against_the_authors(a.authors, base, a.seconds, a.rounds)}), flush=True)

if __name__ == "__main__":
    main()
