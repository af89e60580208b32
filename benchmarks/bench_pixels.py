"""Benchmark: the square renderer and the pixel encoders' training steps (App. E, page 07).

Run `python benchmarks/bench_pixels.py [--device cpu|cuda] [--threads 1] [--seconds 10] [--n 4096] [--V 50]`; prints one JSON
line per measurement:
- `render`: milliseconds to render `--n` scenes of two squares (32 x 32) at each level, and images/s (median of repeats,
  one device synchronisation per call);
- `train`: training steps/s of a run at the page's CPU default (C=2, V=10, d_model 64, 2 layers, batch 128) with pixel
  inputs at each level, beside the same run on scene tokens, timed back to back after a warm-up.
"""
import argparse, json, statistics, time

import torch

from binding_nb.loop import train_step
from binding_nb.models import batch_loss
from binding_nb.pixels import LEVELS, SquareRenderer
from binding_nb.config import run_config, RunConfig
from binding_nb.train import setup_run
from binding_nb.utils import arg_type, number_in, resolve_device, whole_number


def sync(dev: torch.device) -> None:
    if dev.type == "cuda": torch.cuda.synchronize()


def render_ms(renderer: SquareRenderer, scenes: torch.Tensor, repeats: int = 10) -> float:
    "Median milliseconds of one `render` call of `scenes`."
    renderer.render(scenes, seed=0); sync(scenes.device)
    times = []
    for k in range(repeats):
        t0 = time.perf_counter(); renderer.render(scenes, seed=k); sync(scenes.device)
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


def steps_per_second(cfg: RunConfig, seconds: float) -> float:
    "Training steps per second of `cfg` back to back, after five warm-up steps."
    dev = resolve_device(cfg.device)
    run = setup_run(cfg, dev)
    step = lambda: train_step(run.model, run.opt, run.sched, run.next_batch(), batch_loss, run.amp)
    for _ in range(5): step()
    sync(dev); n, t0 = 0, time.perf_counter()
    while n < 5 or time.perf_counter() - t0 < seconds:
        step(); n += 1
    sync(dev)
    return n / (time.perf_counter() - t0)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="auto"); p.add_argument("--threads", type=arg_type(whole_number, low=0), default=1)
    p.add_argument("--seconds", type=arg_type(number_in, low=0, low_open=True), default=10.0); p.add_argument("--n", type=arg_type(whole_number, low=1), default=4096)
    p.add_argument("--V", type=arg_type(whole_number, low=2), default=50, help="palette size for the rendering benchmark")
    args = p.parse_args()
    try: dev = resolve_device(args.device)
    except (ValueError, RuntimeError) as e: p.error(str(e))
    if args.threads: torch.set_num_threads(args.threads)
    scenes = torch.randint(0, args.V, (args.n, 2, 2), generator=torch.Generator().manual_seed(0)).to(dev)
    for level in LEVELS:
        ms = render_ms(SquareRenderer(V=args.V, level=level), scenes)
        print(json.dumps(dict(bench="render", device=str(dev), threads=args.threads, level=level, n=args.n, V=args.V,
                              ms=round(ms, 1), images_per_s=round(args.n / ms * 1e3))), flush=True)
    base = run_config(C=2, V=10, coverage=0.9, device=str(dev))
    for name, cfg in [("tokens", base)] + [(f"pixels, level {l}", base.replace(inputs="pixels", input_settings=dict(level=l))) for l in LEVELS]:
        print(json.dumps(dict(bench="train", device=str(dev), threads=args.threads, inputs=name, batch_size=cfg.batch_size,
                              steps_per_s=round(steps_per_second(cfg, args.seconds), 2))), flush=True)


if __name__ == "__main__":
    main()
