"""What do the transformers lack? Levers on the CPU transformers of the coverage experiment, beside the product encoders.

Each configuration changes one thing against the CPU defaults (1,500 steps of 128 scenes, d_model 64, 2 layers), on the main
job's space (C=2, V=50, coverage 0.5), two seeds each; the defaults, the levers that act on the two towers' agreement and the
product encoders also on two spaces with too many training objects to memorise (C=2, V=200 and C=3, V=20, both at coverage 0.3). Every run is evaluated exhaustively on held-out objects (with the seen/unseen attribute-
swap split) and on scenes of its training objects, which tells binding that transfers from binding that is memorised.

    python scripts/search_binding_levers.py [--out results/plateau/binding_levers.csv] [--workers 2] [--only NAME ...]

Runs in `--workers` processes of one thread each; writes one row per run to --out as runs finish, and skips runs already there.
"""
import argparse, json, multiprocessing as mp, tempfile, time
from pathlib import Path

import pandas as pd

from binding_nb.utils import arg_type, atomic_file, number_in, out_csv, read_csv_named, whole_number

BASE = dict(steps=1500, batch_size=128, n_test_scenes=512, device="cpu")
MAIN = {"C=2, V=50, coverage 0.5": dict(C=2, V=50, coverage=0.5)}
LARGE = {"C=2, V=200, coverage 0.3": dict(C=2, V=200, coverage=0.3), "C=3, V=20, coverage 0.3": dict(C=3, V=20, coverage=0.3)}
PRODUCT = dict(architecture="product", lr=1e-2)
LEVERS = {   # name: (settings, spaces)
    "transformer (defaults)": ({}, MAIN | LARGE),
    "no concept loss": (dict(concept_weight=0.0), MAIN | LARGE),
    "object loss first (concept loss from 50%)": (dict(concept_on_at=0.5), MAIN),
    "constant lr, weight decay 0.1": (dict(schedule="constant", weight_decay=0.1), MAIN),
    "constant lr, weight decay 1, embeddings std 0.1": (dict(schedule="constant", weight_decay=1.0, embed_std=0.1), MAIN),
    "as above, 3,000 steps": (dict(schedule="constant", weight_decay=1.0, embed_std=0.1, steps=3000), MAIN),
    "attention only (no feed-forward)": (dict(ffn_mult=0), MAIN),
    "wide feed-forward (1,024)": (dict(ffn_width=1024), MAIN),
    "shared token embedding": (dict(share_embedding=True), MAIN | LARGE),
    "shared token embedding, no concept loss": (dict(share_embedding=True, concept_weight=0.0), MAIN),
    "Grokfast (lambda 2)": (dict(grokfast=2.0), MAIN | LARGE),
    "product, independent codes": (dict(PRODUCT, code="independent"), MAIN | LARGE),
    "product, shared code": (dict(PRODUCT, code="shared"), MAIN | LARGE),
}
SEEDS = (0, 1)
COLUMNS = ["configuration", "space", "seed", "C", "V", "coverage", "steps", "concept_acc", "object_acc", "bag_of_concepts_acc",
           "object_acc_seen_swap", "object_acc_unseen_swap", "seen_swap_frac", "train_object_acc", "train_bag_of_concepts_acc",
           "best_step", "model_key", "wall_s"]


def run(job: tuple[str, str, int]) -> dict:
    import torch
    torch.set_num_threads(1)
    from binding_nb.scenes import sample_scenes
    from binding_nb.checkpoints import load_model
    from binding_nb.train import train_run
    from binding_nb.config import run_config
    from binding_nb.evaluation import evaluate, run_data
    name, space, seed = job
    change, spaces = LEVERS[name]
    cfg = run_config(**{**BASE, **spaces[space], **change, "seed": seed})
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        row = train_run(cfg, Path(tmp) / "run.pt", progress=False)
        model, _ = load_model(Path(tmp) / "run.pt", "cpu")                  # the weights selected on validation
    data = run_data(cfg, torch.device("cpu"))
    seen = sample_scenes(cfg.space, torch.as_tensor(data.fit), 512, 2, 10_000 + seed, min_objects=2)   # scenes of training objects
    train = evaluate(model, cfg.space, seen, max_objects=2, hard=False)
    return dict(configuration=name, space=space, seed=seed, **{k: row[k] for k in COLUMNS[3:-5] if k in row},
                train_object_acc=train["object_acc"], train_bag_of_concepts_acc=train["bag_of_concepts_acc"],
                best_step=row["best_step"], model_key=row["model_key"], wall_s=round(time.perf_counter() - t0, 1))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="results/plateau/binding_levers.csv")
    p.add_argument("--workers", type=arg_type(whole_number, low=1), default=2)
    p.add_argument("--only", nargs="+", default=None, choices=list(LEVERS), help="names of configurations to run (default: all)")
    a = p.parse_args()
    out = out_csv(p, a.out)
    try: rows = read_csv_named(out).to_dict("records") if out.exists() else []
    except ValueError as e: p.error(str(e))
    done = {(r["configuration"], r["space"], r["seed"]) for r in rows}
    jobs = [(n, s, seed) for s in MAIN | LARGE for seed in SEEDS for n in (a.only or LEVERS)   # the main space first
            if s in LEVERS[n][1] and (n, s, seed) not in done]
    t0 = time.perf_counter()
    with mp.get_context("spawn").Pool(a.workers) as pool:
        for row in pool.imap_unordered(run, jobs):
            rows.append(row)
            order = {n: i for i, n in enumerate(LEVERS)}
            with atomic_file(out) as f:          # written whole: a kill mid-write cuts no row
                pd.DataFrame(rows, columns=COLUMNS).sort_values(["space", "configuration", "seed"],
                                                                key=lambda c: c.map(order) if c.name == "configuration" else c).to_csv(f, index=False)
            print(json.dumps(row), flush=True)
    print(json.dumps(dict(runs=len(jobs), wall_min=round((time.perf_counter() - t0) / 60, 1), base=BASE)))


if __name__ == "__main__":
    main()
