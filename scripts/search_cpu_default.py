"""Search for a CPU default of the coverage experiment where binding shows: held-out object recognition clearly above the
bag-of-concepts baseline at high coverage (C=2, V=50, coverage 0.9), within the main job's budget per run (1,500 steps of
128 scenes). Each configuration changes one thing against the defaults (depth and width at about the same FLOPs, the
recipe choices that act on the seen-vs-unseen gap, a schedule of the concept loss), plus two combinations.

    python scripts/search_cpu_default.py [--out results/plateau/cpu_search.csv] [--workers 2] [--only NAME ...]

Runs the configurations in `--workers` processes of one thread each and writes one row per configuration (held-out
concept and object recognition, the baseline, object recognition on test scenes with a seen / only unseen attribute swaps,
wall time) to --out as they finish.
"""
import argparse, json, math, multiprocessing as mp, time
from pathlib import Path

import pandas as pd

from binding_nb.utils import arg_type, atomic_file, number_in, out_csv, read_csv_named, whole_number

BASE = dict(C=2, V=50, coverage=0.9, steps=1500, batch_size=128, device="cpu")
SEARCH = {
    "defaults": {},
    "deeper, narrower (d 48, 4 layers)": dict(d_model=48, n_layers=4),
    "deep, narrow (d 32, 8 layers)": dict(d_model=32, n_layers=8),
    "wide, shallow (d 96, 1 layer)": dict(d_model=96, n_layers=1),
    "held-out objects as negatives": dict(negatives_from="all"),
    "logit scale from e^1.15, clamped at 10": dict(logit_scale_init=1.15, logit_scale_max=math.log(10)),
    "query-encoder weight decay 0.3": dict(query_weight_decay=0.3),
    "concept loss off by 50% of the run": dict(concept_off_at=0.5),
    "concept loss off by 20% of the run": dict(concept_off_at=0.2),
    "no concept loss": dict(concept_weight=0.0),
    "combination: held-out negatives, clamp, query wd, concept off by 50%": dict(
        negatives_from="all", logit_scale_init=1.15, logit_scale_max=math.log(10), query_weight_decay=0.3, concept_off_at=0.5),
    "the authors' recipe": "authors",
}


def run(name: str) -> dict:
    import torch
    torch.set_num_threads(1)
    from binding_nb.train import train_run
    from binding_nb.config import run_config, with_recipe
    change = SEARCH[name]
    cfg = with_recipe(run_config(**BASE), "authors") if change == "authors" else run_config(**BASE, **change)
    t0 = time.perf_counter()
    row = train_run(cfg, None, progress=False)
    return dict(configuration=name, **{k: row[k] for k in ("concept_acc", "object_acc", "bag_of_concepts_acc",
                "object_acc_seen_swap", "object_acc_unseen_swap", "seen_swap_frac", "best_step", "model_key")},
                wall_s=round(time.perf_counter() - t0, 1))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="results/plateau/cpu_search.csv")
    p.add_argument("--workers", type=arg_type(whole_number, low=1), default=2)
    p.add_argument("--only", nargs="+", default=None, choices=list(SEARCH), help="names of configurations to run (default: all)")
    a = p.parse_args()
    names = a.only or list(SEARCH)
    out, rows, t0 = out_csv(p, a.out), [], time.perf_counter()
    with mp.get_context("spawn").Pool(a.workers) as pool:
        for row in pool.imap_unordered(run, names):
            rows.append(row)
            with atomic_file(out) as f:          # written whole: a kill mid-write cuts no row
                pd.DataFrame(rows).set_index("configuration").loc[[n for n in names if n in {r["configuration"] for r in rows}]] \
                    .reset_index().to_csv(f, index=False)
            print(json.dumps(row), flush=True)
    print(json.dumps(dict(configurations=len(rows), wall_min=round((time.perf_counter() - t0) / 60, 1), base=BASE)))


if __name__ == "__main__":
    main()
