"""The prepared GPU run of the coverage experiment (§5.2, Fig. 6), for one H200-class device and a fixed time budget.

Runs, all evaluated exhaustively on held-out objects, in this order of priority:
  (a) the authors' documented run (V=20, coverage 0.8, d_model 256, 6 layers, 4 heads, d_out 64, batch 512, lr 3e-5) in the
      authors' recipe;
  (b) the same scale in our recipe;
  (d) (b) with one token embedding shared by the two towers (the change that lets the product encoders generalise, in
      its transformer form);
  (e) App. E: (b) with a pixel scene tower (page 07) reading level-3 images (speckle noise, overlapping squares), eight layers
      deep as in the paper; the query tower stays symbolic;
  (c) coverage points of Fig. 6 at C=2, V=50, at that scale, in the recipe of --c-recipe, as many as still fit.
It first measures the steps/s of each configuration (a few seconds each, drawing the batches included, under CUDA's
sync guard: gpu_timing.json says what, if anything, waited for the device), then gives each run the number of steps that fits
its share of --budget (at most the documented 50,000), and records how many steps each one ran.

    PYTHONPATH=. python scripts/gpu_coverage_run.py --out "$OUT" --budget 510
    PYTHONPATH=. python scripts/gpu_coverage_run.py --out /tmp/gpu_check --budget 40 --device cpu --tiny   # a CPU rehearsal

Writes under --out: gpu_runs.csv (one row per run, rewritten after every run, so a cut-off run keeps what finished),
gpu_timing.json (hardware, software, steps/s, planned and run steps, wall times), fig6_gpu.png and fig6_gpu.pdf.
Needs only torch, numpy, pandas and matplotlib beside the library: no papermill or nbdev.
"""
import argparse, contextlib, json, platform, subprocess, time, traceback
from pathlib import Path

import pandas as pd
import torch

from binding_nb.loop import train_step
from binding_nb.models import batch_loss
from binding_nb.train import setup_run, train_run
from binding_nb.config import GPU_SCALE, run_config, RunConfig, TINY_SCALE, with_recipe
from binding_nb.utils import arg_type, number_in, resolve_device, writable_folder

TINY_PIXELS = dict(image_size=16, square=6)      # 16 patch tokens: a rehearsal's pixel run fits its few seconds
SHARES = {"a": 0.25, "b": 0.25, "d": 0.17, "e": 0.13, "c": 0.2}


def planned_runs(args) -> list[tuple[str, RunConfig]]:
    "(label, config) of every run, in priority order; steps are the documented maximum, cut to the budget later."
    scale = TINY_SCALE if args.tiny else GPU_SCALE
    v_small, v_large = (6, 8) if args.tiny else (20, 50)
    base = scale(run_config(C=2, max_objects=2, device=args.device, log_every=200))
    runs = [("a", with_recipe(base.replace(V=v_small, coverage=0.8), "authors")),
            ("b", base.replace(V=v_small, coverage=0.8)),
            ("d", base.replace(V=v_small, coverage=0.8, share_embedding=True)),
            ("e", base.replace(V=v_small, coverage=0.8, inputs="pixels", input_settings=dict(level=3, **TINY_PIXELS if args.tiny else {}),
                                       **{} if args.tiny else dict(n_layers=8)))]
    runs += [("c", with_recipe(base.replace(V=v_large, coverage=c), args.c_recipe)) for c in args.coverages]
    return runs


def sync(dev: torch.device) -> None:
    if dev.type == "cuda": torch.cuda.synchronize()


@contextlib.contextmanager
def sync_guard(dev: torch.device):
    "On a GPU, any step within the block that waits for the device raises (CUDA's sync debug mode 'error')."
    if dev.type == "cuda": torch.cuda.set_sync_debug_mode("error")
    try: yield
    finally:
        if dev.type == "cuda": torch.cuda.set_sync_debug_mode("default")


def steps_per_second(cfg: RunConfig, seconds: float, clock=time.perf_counter) -> tuple[float, str | None]:
    """Training steps per second of `cfg` on its device, back to back (drawing each batch included), after a short
    warm-up, timed by `clock`; and where the first step that waited for the device did (None: none did). The steps run
    under `sync_guard`; where one waits, they are timed again without it."""
    dev = resolve_device(cfg.device)
    run = setup_run(cfg, dev)
    def step(): train_step(run.model, run.opt, run.sched, run.next_batch(), batch_loss, run.amp)
    def timed(guard) -> float:
        sync(dev); n, t0 = 0, clock()
        with guard:
            while n < 10 or clock() - t0 < seconds:
                for _ in range(10): step()
                n += 10
        sync(dev)
        return n / (clock() - t0)
    for _ in range(5): step()
    try: return timed(sync_guard(dev)), None
    except RuntimeError as e:                                  # a step waited for the device: say where, time it anyway
        if "synchroniz" not in str(e): raise
        frames = traceback.extract_tb(e.__traceback__)
        frame = ([f for f in frames if "binding_nb" in f.filename] or frames)[-1]          # our line that waited
        where = f"{frame.filename}:{frame.lineno} in {frame.name}"
        return timed(contextlib.nullcontext()), f"{str(e).splitlines()[0]} ({where})"


def hardware(dev: torch.device) -> dict:
    info = dict(device=str(dev), torch=torch.__version__, python=platform.python_version(), host=platform.node())
    if dev.type == "cuda": info.update(gpu=torch.cuda.get_device_name(), cuda=torch.version.cuda)
    try: info["commit"] = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip() or None
    except OSError: info["commit"] = None
    return info


def plot(rows: pd.DataFrame, out: Path) -> None:
    import matplotlib; matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.4))
    ab = rows[rows.run.isin(["a", "b", "d", "e"])]
    x = range(len(ab))
    ax1.bar([i - 0.2 for i in x], ab.object_acc, 0.4, label="object recognition", color="C3")
    ax1.bar([i + 0.2 for i in x], ab.bag_of_concepts_acc, 0.4, label="bag-of-concepts baseline", color="0.6")
    ax1.set(xticks=list(x), xticklabels=[f"({r.run}) {r.recipe}{', shared emb.' if r.shared_embedding else ''}{', pixels' if r.inputs == 'pixels' else ''}\n{r.steps:,} steps" for r in ab.itertuples()], ylim=(0, 1),
            title="V=20, coverage 0.8, held-out objects")
    ax1.legend(fontsize=7)
    c = rows[rows.run == "c"].sort_values("coverage")
    for col, label, style in (("concept_acc", "concept recognition", "C0-o"), ("object_acc", "object recognition", "C3-o"),
                              ("bag_of_concepts_acc", "bag-of-concepts baseline", "k--")):
        ax2.plot(c.coverage, c[col], style, label=label, ms=4)
    ax2.set(xlabel="coverage", ylim=(-0.03, 1.03), title=f"(c) C=2, V={int(c.V.iloc[0]) if len(c) else 50}")
    ax2.legend(fontsize=7)
    fig.tight_layout()
    for ext in ("png", "pdf"): fig.savefig(out / f"fig6_gpu.{ext}", dpi=100)


def main(argv: list[str] | None = None, clock=time.perf_counter) -> None:
    """The whole run, from the command line `argv`. `clock` (seconds) times the measurement and the budget, so that a
    test can pass one that the machine's speed cannot move."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="folder for the CSV, the JSON and the figure (created)")
    p.add_argument("--budget", type=arg_type(number_in, low=0, low_open=True), default=510.0, help="seconds for the whole script, measurement included")
    p.add_argument("--device", default="auto")
    p.add_argument("--coverages", type=arg_type(number_in, low=0, high=1, low_open=True), nargs="+", default=[0.9, 0.5, 0.7, 0.3, 0.1], help="(c), in priority order")
    p.add_argument("--c-recipe", default="authors", choices=["ours", "authors"])
    p.add_argument("--measure-seconds", type=arg_type(number_in, low=0, low_open=True), default=4.0)
    p.add_argument("--tiny", action="store_true", help="shrink every run, for a rehearsal on a CPU")
    args = p.parse_args(argv)
    start = clock()
    try: out, dev = writable_folder(args.out, "--out", "pass a folder for the results"), resolve_device(args.device)
    except (OSError, ValueError, RuntimeError) as e: p.error(str(e))
    if dev.type == "cpu": torch.set_num_threads(1)
    runs = planned_runs(args)
    rates, waits = {}, {}                       # steps/s per architecture and recipe, and what waited for the device
    for label, cfg in runs:
        key = (cfg.V, cfg.model_key())
        if key not in rates: rates[key], waits[key] = steps_per_second(cfg, args.measure_seconds, clock)
    name = lambda k: f"V{k[0]}_{k[1]}"
    timing = dict(hardware=hardware(dev), budget_s=args.budget, measured_steps_per_s={name(k): round(v, 2) for k, v in rates.items()},
                  steps_waited_for_the_device={name(k): w for k, w in waits.items()},
                  measurement_s=round(clock() - start, 1), runs=[])
    remaining = args.budget - (clock() - start)
    n_c = sum(label == "c" for label, _ in runs)
    rows = []
    for label, cfg in runs:
        share = SHARES[label] / (n_c if label == "c" else 1)
        left = args.budget - (clock() - start)
        seconds = min(share * remaining, left - 5)
        steps = min(cfg.steps, int(0.8 * seconds * rates[(cfg.V, cfg.model_key())]))   # 20% for evaluation and slack
        if steps < 50:
            timing["runs"].append(dict(run=label, coverage=cfg.coverage, skipped="not enough time left")); continue
        run = cfg.replace(steps=steps, eval_every=max(1, steps // 10), ckpt_every=steps)
        t0 = clock()
        row = train_run(run, checkpoint=None, progress=False)
        wall = clock() - t0
        recipe = "authors" if run.init == "xavier" else "ours"
        rows.append(dict(run=label, recipe=recipe, shared_embedding=run.share_embedding, inputs=run.inputs,
                         level=run.model.input_settings.level if run.inputs == "pixels" else None, **row, wall_s=round(wall, 1),
                         documented_steps=cfg.steps))
        timing["runs"].append(dict(run=label, recipe=recipe, V=run.V, coverage=run.coverage, steps_planned=steps,
                                   steps_run=run.steps, wall_s=round(wall, 1), steps_per_s=round(run.steps / wall, 2)))
        pd.DataFrame(rows).to_csv(out / "gpu_runs.csv", index=False)
        (out / "gpu_timing.json").write_text(json.dumps(timing, indent=1))
        print(json.dumps(timing["runs"][-1]), flush=True)
    timing["total_s"] = round(clock() - start, 1)
    (out / "gpu_timing.json").write_text(json.dumps(timing, indent=1))
    if rows: plot(pd.DataFrame(rows), out)
    print(json.dumps(dict(total_s=timing["total_s"], runs=len(rows))), flush=True)


if __name__ == "__main__":
    main()
