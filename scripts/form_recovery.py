"""Which bindings can the form probes recover from half the objects? A map over forms, ranks and sample sizes (04's known answers).

A random encoder of exactly one form (zero-mean tables N(0, 1) of rank r, a head N(0, 1/width) to 64 or 128 dimensions,
drawn from numpy's generator) embeds a seeded sample of the ordered two-object scenes of a 30 x 30 space. Its own probe, at its
rank or at the ranks of --probe_ranks, is fitted on the scenes of half the objects from N(0, 0.3^2) (one start per --starts seed)
for --steps full-batch Adam steps at learning rate --lr (the checkpoint of lowest validation loss kept), and judged by its R^2 on
the scenes of validation objects and of the held-out objects, and by the held-out object recognition of the encoder's own linear
probes on its predictions, beside theirs on the encoder itself (the ceiling) and the bag-of-concepts baseline. One row per (form,
rank, dim, scenes, steps, lr, probe rank, start) as runs finish; a rerun skips the rows already there (with --recognition, it
fits again the rows written before recognition was recorded, and replaces them).

    python scripts/form_recovery.py [--out results/complexity/form_recovery.csv] [--workers 2] [--forms NAME ...]
                                    [--ranks 8 16 32 64] [--dims 64 128] [--scenes 20000] [--steps 1500] [--lr 0.01]
                                    [--probe_ranks R ...] [--starts 0 ...] [--recognition] [--max_steps N]
"""
import argparse, json, multiprocessing as mp, time
from pathlib import Path

import numpy as np
import pandas as pd

from binding_nb.utils import arg_type, atomic_file, number_in, out_csv, read_csv_named, whole_number
from binding_nb.approximators import FORMS

COLUMNS = ["form", "rank", "dim", "scenes", "steps", "lr", "probe_rank", "start", "n_train", "n_test", "train_r2", "val_r2", "test_r2",
           "test_object_acc", "ceiling_object_acc", "bag_of_concepts_acc", "best_step", "wall_s"]
KEY = ["form", "rank", "dim", "scenes", "steps", "lr", "probe_rank", "start"]


def run(job: tuple) -> dict:
    import torch
    torch.set_num_threads(1)
    from binding_nb.approximators import ONE_ADAM_START, fit_approximator, form_embeddings, held_out_reference, score_approximator
    from binding_nb.sweeps import holdout_split
    from binding_nb.datasets import all_pairs
    from binding_nb.geometry import fit_probes, probe_split, r2_score, scene_table
    from binding_nb.scenes import ConceptSpace
    form, rank, dim, n, steps, lr, probe_rank, start = job
    t0, space = time.perf_counter(), ConceptSpace([30, 30])
    pairs = all_pairs(space)
    pairs = pairs[(pairs[..., 0] >= 0).all(1)]
    scenes = pairs[np.sort(np.random.default_rng(0).choice(len(pairs), n, replace=False))]
    t = scene_table(form_embeddings(space, scenes, form, rank, dim, seed=1), (scenes, space))
    sp = holdout_split(t, 0.5, seed=1)
    app = fit_approximator(form, space, t.values[sp.train], t.emb[sp.train], t.values[sp.val], t.emb[sp.val], capacity=probe_rank, lr=lr,
                           steps=steps, batch_size=None, eval_every=100, seed=start, device="cpu", init=0.3, init_mean=0.0,
                           **ONE_ADAM_START)   # one Adam start per --starts seed: the fit this map was made with
    r2 = lambda rows: r2_score(t.emb[rows], app.predict(t.values[rows]))
    probes = fit_probes(t, *probe_split(t.n, 0.4, 1), device="cpu")          # the encoder's own linear probes, as 04's known answers read it
    ref = held_out_reference(t, sp.test, probes)
    return dict(form=form, rank=rank, dim=dim, scenes=n, steps=steps, lr=lr, probe_rank=probe_rank, start=start, n_train=len(sp.train),
                n_test=len(sp.test), train_r2=r2(sp.train), val_r2=r2(sp.val), test_r2=r2(sp.test),
                test_object_acc=score_approximator(app, t, sp.test, probes)["object_acc"], ceiling_object_acc=ref["ceiling_object_acc"],
                bag_of_concepts_acc=ref["bag_of_concepts_acc"],
                best_step=app.best_step, wall_s=round(time.perf_counter() - t0, 1))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="results/complexity/form_recovery.csv")
    p.add_argument("--workers", type=arg_type(whole_number, low=1), default=2)
    p.add_argument("--forms", nargs="+", default=["additive", "per_object_product", "global_product"], choices=list(FORMS))
    p.add_argument("--ranks", nargs="+", type=arg_type(whole_number, low=1), default=[8, 16, 32, 64])
    p.add_argument("--dims", nargs="+", type=arg_type(whole_number, low=1), default=[64, 128], help="embedding dimensions of the encoders")
    p.add_argument("--scenes", nargs="+", type=arg_type(whole_number, low=2), default=[20_000], help="scenes sampled (the global product also at 100,000)")
    p.add_argument("--steps", type=arg_type(whole_number, low=1), default=1500, help="Adam steps on the full batch")
    p.add_argument("--lr", type=arg_type(number_in, low=0, low_open=True), default=1e-2, help="Adam learning rate")
    p.add_argument("--probe_ranks", nargs="+", type=arg_type(whole_number, low=1), default=None, help="the probe's ranks (default: the encoder's own)")
    p.add_argument("--starts", nargs="+", type=arg_type(whole_number, low=0), default=[0], help="seeds of the probe's initial tables")
    p.add_argument("--recognition", action="store_true", help="also run again the rows measured before held-out recognition was recorded")
    p.add_argument("--max_steps", type=arg_type(whole_number, low=1), default=None, help="cap the steps (a quick check)")
    a = p.parse_args()
    steps = a.steps if a.max_steps is None else min(a.steps, a.max_steps)
    out = out_csv(p, a.out)
    try: rows = read_csv_named(out) if out.exists() else pd.DataFrame(columns=COLUMNS)
    except ValueError as e: p.error(str(e))
    earlier = {"lr": 1e-2, "probe_rank": rows["rank"], "start": 0}      # rows from before these columns: learning rate 0.01, own rank, start 0
    rows = rows.assign(**{c: rows[c].fillna(v) if c in rows else v for c, v in earlier.items()}).reindex(columns=COLUMNS).to_dict("records")
    key = lambda r: tuple(r[k] for k in KEY)
    done = {key(r) for r in rows if (r["test_object_acc"] == r["test_object_acc"]) or not a.recognition}   # NaN: a row from before recognition was read
    sizes = lambda f: sorted(set(a.scenes) | ({100_000} if f.startswith("global") and a.max_steps is None else set()))
    jobs = [(f, r, d, n, steps, a.lr, pr, s) for f in a.forms for r in a.ranks for d in a.dims for n in sizes(f)
            for pr in (a.probe_ranks or [r]) for s in a.starts]
    jobs = [j for j in jobs if j not in done]
    with mp.get_context("spawn").Pool(a.workers) as pool:
        for row in pool.imap_unordered(run, jobs):
            rows = [r for r in rows if key(r) != key(row)] + [row]          # a row measured again replaces the earlier one
            with atomic_file(out) as f:          # written whole: a kill mid-write cuts no row
                pd.DataFrame(rows, columns=COLUMNS).sort_values(KEY).to_csv(f, index=False)
            print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}), flush=True)


if __name__ == "__main__":
    main()
