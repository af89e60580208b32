"""Benchmark: training steps of the controlled dual encoders (App. B.2-B.4) at a reference configuration.

Run `python benchmarks/bench_train.py [--device cpu|cuda] [--threads 1] [--seconds 20] [--amp] [--compile]
[--architectures transformer product-shared]`; prints one JSON line per architecture
with `steps_per_s` (steps timed back to back, one device synchronisation at the end, as the training loop runs them),
`achieved_gflops` (analytic forward+backward matmul FLOPs per step times steps/s), `matmul_peak_gflops` (a large matmul
timed in the same process, in bf16 with `--amp`, else fp32) and their ratio, and a per-step split into building the batch
and the model's step (synchronised after each part, so only indicative on a GPU). Reference: d_model 128, 4 layers,
4 heads, d_out 64, 256 scenes per batch, C=2, V=20, max_objects=2, concept and object queries; the product encoders (rank 64)
on the same batches, whose FLOPs are not counted (null).
"""
import argparse, json, time

import torch

from binding_nb.loop import train_step
from binding_nb.models import batch_loss, step_flops
from binding_nb.config import ARCHITECTURE_NAMES, run_config, RunConfig, with_architecture
from binding_nb.train import setup_run
from binding_nb.utils import resolve_device


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
    data, model, opt, sched, g, batch = setup_run(cfg, dev)
    step = lambda b: train_step(model, opt, sched, b, batch_loss, amp=amp)
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
    peak = matmul_peak_gflops(dev, torch.bfloat16 if amp else torch.float32)
    return {"steps": n, "steps_per_s": round(steps_per_s, 3), "batch_ms": round(100 * split["batch"], 2),
            "model_ms": round(100 * split["model"], 2), "gflop_per_step": round(flops / 10 / 1e9, 3) if transformer else None,
            "achieved_gflops": round(achieved, 2) if transformer else None, "matmul_peak_gflops": round(peak, 2),
            "fraction_of_peak": round(achieved / peak, 3) if transformer else None,
            "params_per_encoder": sum(p.numel() for p in model.scene_encoder.parameters())}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="auto")
    p.add_argument("--threads", type=int, default=1,
                   help="torch CPU threads (0: torch's default). 1 by default: on a shared 2-core machine two threads "
                        "stall on each other whenever the other core is busy (10x slower steps measured)")
    p.add_argument("--coverage", type=float, default=0.5)
    p.add_argument("--seconds", type=float, default=20.0, help="time spent in measured steps of each architecture (at least 10 steps)")
    p.add_argument("--amp", action="store_true", help="bf16 autocast (the default of training runs on CUDA)")
    p.add_argument("--compile", action="store_true", help="torch.compile the transformer bodies")
    p.add_argument("--architectures", nargs="+", default=["transformer", "product-shared"], choices=ARCHITECTURE_NAMES)
    a = p.parse_args()
    if a.threads: torch.set_num_threads(a.threads)
    base = run_config(C=2, V=20, max_objects=2, coverage=a.coverage, batch_size=256, d_model=128, n_layers=4, n_heads=4,
                     d_out=64, steps=100_000, device=a.device, compile=a.compile)
    dev = resolve_device(base.device)
    for name in a.architectures:
        print(json.dumps({"bench": "train_step", "architecture": name, "device": str(dev),
                          "gpu": torch.cuda.get_device_name() if dev.type == "cuda" else None, "threads": torch.get_num_threads(),
                          "amp": a.amp, "compile": a.compile, **measure(with_architecture(base, name), a.seconds, a.amp)}), flush=True)

if __name__ == "__main__":
    main()
