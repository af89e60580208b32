"""Diagnostic: the scene encoder can bind, but the contrastive dual encoder does not find the binding (the 05a_plateau page).

Run `python tests/diag_plateau.py [--steps 1500] [--seeds 0 1 2] [--concept-weights 1 0] [--threads 1]`; prints one JSON line
per run (about 6 minutes on one core for the defaults): first the supervised run (steps until the scene encoder gets all 81
toy scenes right), then the contrastive runs of `binding_nb.plateau.toy_runs`, one per seed and concept-loss weight.
"""
import argparse, json, time

import torch

from binding_nb.datasets import all_pairs
from binding_nb.plateau import supervised_steps, toy_runs
from binding_nb.train import RunConfig


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=1500)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--concept-weights", type=float, nargs="+", default=[1.0, 0.0])
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args()
    if a.threads: torch.set_num_threads(a.threads)
    cfg = RunConfig(C=2, V=3, coverage=1.0, steps=a.steps, device="cpu")
    t0 = time.perf_counter()
    n = supervised_steps(cfg, torch.from_numpy(all_pairs(cfg.space, singles=False)))
    print(json.dumps(dict(run="supervised", steps_to_all_correct=n, seconds=round(time.perf_counter() - t0, 1))), flush=True)
    for row in toy_runs(a.seeds, a.steps, a.concept_weights):
        print(json.dumps(dict(run="contrastive", **row)), flush=True)


if __name__ == "__main__":
    main()
