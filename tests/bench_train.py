"""Benchmark: training steps of the controlled dual encoder (App. B.2-B.4) at the reference configuration.

Run `python tests/bench_train.py [--device cpu] [--threads 1] [--seconds 20]`; prints one JSON line with `steps_per_s`,
`achieved_gflops` (analytic forward+backward matmul FLOPs per step times steps/s), `matmul_peak_gflops` (a 2048x2048 fp32
matmul timed in the same process) and their ratio. Reference: d_model 128, 4 layers, 4 heads, d_out 64, 256 scenes per
batch, C=2, V=20, max_objects=2, concept and object queries.
"""
import argparse, json, time

import torch

from binding_nb.models import batch_loss, step_flops
from binding_nb.scenes import make_batch
from binding_nb.train import RunConfig, build_model, make_optimizer, run_data, train_step
from binding_nb.utils import make_generator, resolve_device


def sync(dev: torch.device) -> None:
    if dev.type == "cuda": torch.cuda.synchronize()


def matmul_peak_gflops(dev: torch.device, n: int = 2048, repeats: int = 10) -> float:
    "Best-of-`repeats` fp32 GFLOP/s of an n x n matmul."
    a, b = torch.randn(n, n, device=dev), torch.randn(n, n, device=dev)
    for _ in range(3): a @ b
    best = float("inf")
    for _ in range(repeats):
        sync(dev); t0 = time.perf_counter(); a @ b; sync(dev)
        best = min(best, time.perf_counter() - t0)
    return 2 * n ** 3 / best / 1e9


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="auto")
    p.add_argument("--threads", type=int, default=1,
                   help="torch CPU threads (0: torch's default). 1 by default: on a shared 2-core machine two threads "
                        "stall on each other whenever the other core is busy (10x slower steps measured)")
    p.add_argument("--coverage", type=float, default=0.5)
    p.add_argument("--seconds", type=float, default=20.0, help="time spent in measured steps (at least 10 steps)")
    a = p.parse_args()
    if a.threads: torch.set_num_threads(a.threads)
    cfg = RunConfig(C=2, V=20, max_objects=2, coverage=a.coverage, batch_size=256, d_model=128, n_layers=4, n_heads=4,
                    d_out=64, steps=10_000, device=a.device)
    dev = resolve_device(cfg.device)
    data = run_data(cfg, dev)
    model = build_model(cfg, dev)
    opt, sched = make_optimizer(model, cfg)
    arch = cfg.model_config()
    g = make_generator(0, dev)
    batch_s = model_s = 0.0
    flops = 0

    def step() -> int:
        nonlocal batch_s, model_s
        sync(dev); t0 = time.perf_counter()
        batch = make_batch(data.space, data.fit, cfg.batch_size, cfg.max_objects, g, cfg.n_perturb, data.allowed)
        sync(dev); t1 = time.perf_counter()
        train_step(model, opt, sched, batch, batch_loss)
        sync(dev); t2 = time.perf_counter()
        batch_s += t1 - t0; model_s += t2 - t1
        return step_flops(arch, batch)

    for _ in range(5): step()                                   # warm-up
    batch_s = model_s = 0.0
    n, t0 = 0, time.perf_counter()
    while n < 10 or time.perf_counter() - t0 < a.seconds:
        flops += step(); n += 1
    wall = time.perf_counter() - t0
    peak = matmul_peak_gflops(dev)
    steps_per_s = n / wall
    achieved = flops / n * steps_per_s / 1e9
    print(json.dumps({"bench": "train_step", "device": str(dev), "threads": torch.get_num_threads(), "steps": n,
                      "steps_per_s": round(steps_per_s, 3), "batch_ms": round(1e3 * batch_s / n, 1),
                      "model_ms": round(1e3 * model_s / n, 1), "gflop_per_step": round(flops / n / 1e9, 3),
                      "achieved_gflops": round(achieved, 2), "matmul_peak_gflops": round(peak, 2),
                      "fraction_of_peak": round(achieved / peak, 3),
                      "params_per_encoder": sum(p.numel() for p in model.scene_encoder.parameters())}))


if __name__ == "__main__":
    main()
