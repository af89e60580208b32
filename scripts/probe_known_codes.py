"""Can §5.4's form probes recover a known multiplicative code? A study for the learned-binding page.

A dual encoder whose binding is known, untrained: every object is `[sum_k u_{c_k} ; prod_k v_{c_k}]` (one value code for both
towers, rank r), a scene is the sum of its objects, the queries are the unit codes of every object and `[u ; 0]` of every
value. Its own held-out recognition (the ceiling) is read through those queries. The approximators of 04 are fitted to its scene
embeddings on scenes of 40% of the objects, selected on validation objects, and read through the same queries on scenes of the
other objects: the global and the per-object product should recover the code, the additive probe should not.

    python scripts/probe_known_codes.py [--out results/learned/known_codes.csv] [--workers 2] [--V 30] [--n_scenes 20000]
                                        [--codes NAME ...] [--max_steps N]

One row per (code, probe, steps) as runs finish; a rerun skips the rows already there.
"""
import argparse, json, multiprocessing as mp, time
from pathlib import Path

import numpy as np
import pandas as pd

from binding_nb.utils import arg_type, atomic_file, number_in, out_csv, read_csv_named, whole_number

CODES = {   # name: (rank of the code, mean of v, spread of v)
    "zero-mean v, rank 8": (8, 0.0, 1.0),
    "zero-mean v, rank 32": (32, 0.0, 1.0),
    "v = 1 + 0.5 N(0, 1), rank 32": (32, 1.0, 0.5),
}
PROBES = [   # family, capacity, steps, mean of the product tables at the start (the tables start at N(mean, 0.3^2))
    ("additive", 64, 1500, 0.0), ("mlp", 256, 1500, 0.0), ("per_object_product", 64, 1500, 0.0), ("per_object_product", 64, 1500, 1.0),
    ("per_object_product_shared", 32, 1500, 0.0), ("global_product", 64, 1500, 0.0), ("global_product", 64, 1500, 1.0),
    ("global_product", 64, 4000, 1.0)]
COLUMNS = ["code", "family", "capacity", "steps", "init_mean", "V", "n_train", "n_test", "train_r2", "test_r2", "concept_acc", "object_acc",
           "ceiling_concept_acc", "ceiling_object_acc", "bag_of_concepts_acc", "best_step", "wall_s"]


def run(job: tuple) -> dict:
    import torch
    torch.set_num_threads(1)
    from binding_nb.approximators import ONE_ADAM_START, fit_approximator
    from binding_nb.geometry import r2_score
    from binding_nb.scenes import ConceptSpace, bag_of_concepts_accuracy, concept_recognition, coverage_split, object_recognition
    code, fam, capacity, steps, init_mean, V, n_scenes = job
    rank, v_mean, spread = CODES[code]
    space, rng, t0 = ConceptSpace([V, V]), np.random.default_rng(0), time.perf_counter()
    u = rng.standard_normal((space.n_values, rank), dtype=np.float32)
    v = v_mean + spread * rng.standard_normal((space.n_values, rank), dtype=np.float32)
    gi = np.asarray(space.value_index(space.object_values(np.arange(space.n_objects))))
    objects = np.concatenate([u[gi].sum(1), v[gi].prod(1)], 1)
    values = np.concatenate([u, 0 * u], 1)
    unit = lambda x: torch.as_tensor(x / np.linalg.norm(x, axis=1, keepdims=True))
    O = space.n_objects
    rows = np.sort(rng.choice(O * O, min(n_scenes, O * O), replace=False))
    ids = np.stack([rows // O, rows % O], 1)
    scenes, emb = np.asarray(space.object_values(ids)), objects[ids].sum(1)
    split = coverage_split(space, 0.4, 0, 0.1)
    inside = lambda objs: np.isin(ids, objs).all(1)
    train, test = np.flatnonzero(inside(split.fit)), np.flatnonzero(inside(split.heldout))
    val = np.flatnonzero(inside(split.train) & np.isin(ids, split.val).any(1))

    def recognition(x, rows):
        s, sc = torch.as_tensor(x, dtype=torch.float32), torch.as_tensor(scenes[rows])
        return (float(concept_recognition(s @ unit(values).T, sc, space).float().mean()),
                float(object_recognition(s @ unit(objects).T, sc, space).float().mean()))

    app = fit_approximator(fam, space, scenes[train], emb[train], scenes[val], emb[val], capacity=capacity, lr=1e-2, steps=steps,
                           batch_size=None, eval_every=50, seed=0, device="cpu", init=0.3, init_mean=init_mean,
                           **ONE_ADAM_START)   # one Adam start: the fit this study was made with
    pred = app.predict(scenes[test])
    (c, o), (cc, co) = recognition(pred, test), recognition(emb[test], test)
    return dict(code=code, family=fam, capacity=capacity, steps=steps, init_mean=init_mean, V=V, n_train=len(train), n_test=len(test),
                train_r2=r2_score(emb[train], app.predict(scenes[train])), test_r2=r2_score(emb[test], pred), concept_acc=c,
                object_acc=o, ceiling_concept_acc=cc, ceiling_object_acc=co,
                bag_of_concepts_acc=bag_of_concepts_accuracy(space, torch.as_tensor(scenes[test])), best_step=app.best_step,
                wall_s=round(time.perf_counter() - t0, 1))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="results/learned/known_codes.csv")
    p.add_argument("--workers", type=arg_type(whole_number, low=1), default=2)
    p.add_argument("--V", type=arg_type(whole_number, low=2), default=30)
    p.add_argument("--n_scenes", type=arg_type(whole_number, low=2), default=20_000)
    p.add_argument("--codes", nargs="+", default=list(CODES), choices=list(CODES), help="the codes to probe (default: all)")
    p.add_argument("--max_steps", type=arg_type(whole_number, low=1), default=None, help="cap every probe's steps (a quick check)")
    a = p.parse_args()
    out = out_csv(p, a.out)
    try: rows = read_csv_named(out).to_dict("records") if out.exists() else []
    except ValueError as e: p.error(str(e))
    done = {(r["code"], r["family"], r["capacity"], r["steps"], r.get("init_mean", float("nan"))) for r in rows}
    cap_steps = lambda s: s if a.max_steps is None else min(s, a.max_steps)
    jobs = list(dict.fromkeys((c, f, cap, cap_steps(s), mean, a.V, a.n_scenes) for c in a.codes for f, cap, s, mean in PROBES
                              if (c, f, cap, cap_steps(s), mean) not in done))
    with mp.get_context("spawn").Pool(a.workers) as pool:
        for row in pool.imap_unordered(run, jobs):
            rows.append(row)
            with atomic_file(out) as f:          # written whole: a kill mid-write cuts no row
                pd.DataFrame(rows, columns=COLUMNS).sort_values(["code", "family", "capacity", "steps", "init_mean"]).to_csv(f, index=False)
            print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}), flush=True)


if __name__ == "__main__":
    main()
