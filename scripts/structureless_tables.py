"""Which form probes memorise? Each form fitted to a structureless table at the sizes of 06's two protocols (04a's memorisation test, at full size).

A structureless table gives every object of a C = 2, V = 30 space its own random vector (64 dimensions, N(0, 1)), and a scene the
sum of its objects' (`toy_embeddings(..., "table", noise=0)`): nothing of it can be predicted for an object from its concepts. Each
form probe is fitted to it as 06 fits a model's binding function, in two settings:

- ours: a seeded 20,000 of the ordered two-object scenes, fitted on those of half the objects (10% of them kept for validation),
  rank 64, N(1, 0.3^2) start, 1,500 full-batch Adam steps at 0.01, with the probes' default solver (`solver_settings`);
- the authors': every ordered pair of `paper_object_sample(space, --paper_objects)`, fitted on those of half of them, as wide as the
  embedding (64), one N(0, 1) start, 4,000 full-batch Adam steps at 0.01, nothing else (`paper_cells`);
- capacity: the authors' scenes and width, fitted with our solver as in ours: what the probe can fit, whatever the solver.

A probe that fits such a table on its fit scenes (train R^2 near 1) can memorise objects, and its held-out numbers on a real
binding function mean little; `memorises` must flag it (`flagged`; `flagged_by_directions`: the rule before it counted the
embedding's width, free directions per slot against fit objects). One row per (form, setting, paper_objects), appended as each fit
finishes through a results table (written whole and atomically: a kill keeps every finished row and cuts none); a rerun skips the rows
already there, and a damaged one (cut short, a metric missing) is set aside and fitted again.

    python scripts/structureless_tables.py [--out results/complexity/structureless_tables.csv] [--workers 2] [--forms NAME ...]
                                           [--settings ours authors capacity] [--paper_objects 300 400] [--max_steps N]
"""
import argparse, json, multiprocessing as mp, time
from pathlib import Path

import pandas as pd

from binding_nb.results import ResultsTable

COLUMNS = ["form", "setting", "paper_objects", "rank", "dim", "steps", "starts", "moment", "finish", "fit_objects", "n_train", "train_r2",
           "val_r2", "test_r2", "free_directions", "flagged", "flagged_by_directions", "wall_s"]
KEY = ["form", "setting", "paper_objects", "steps"]
SETTINGS = {"ours": dict(rank=64, init=0.3, init_mean=1.0, steps=1500), "authors": dict(rank=64, init=1.0, init_mean=0.0, steps=4000),
            "capacity": dict(rank=64, init=0.3, init_mean=1.0, steps=1500)}
PAPER_SCENES = ("authors", "capacity")      # the settings that read every pair of the authors' objects
FLAGS = ("moment", "flagged", "flagged_by_directions")


def _row_checks(df: pd.DataFrame) -> dict[str, pd.Series]:
    num = lambda c: pd.to_numeric(df[c], errors="coerce")
    return {"a missing R^2": pd.concat([num(c).isna() for c in ("train_r2", "val_r2", "test_r2")], axis=1).any(axis=1),
            "a flag that is not True or False": ~pd.concat([df[c].isin(["True", "False"]) for c in FLAGS], axis=1).all(axis=1),
            "an unknown setting": ~df.setting.isin(list(SETTINGS))}


STRUCTURELESS = ResultsTable("structureless_tables.csv", columns=tuple(COLUMNS), keys=tuple(KEY), text=("form", "setting", *FLAGS),
                             counts=("paper_objects", "rank", "dim", "steps", "starts", "finish", "fit_objects", "n_train",
                                     "free_directions"),
                             checks=_row_checks, advice="pass the CSV file to write, e.g. results/complexity/structureless_tables.csv")


def run(job: tuple) -> dict:
    import numpy as np, torch
    torch.set_num_threads(1)
    from binding_nb.approximators import FORMS, ONE_ADAM_START, fit_approximator, free_directions, memorises, solver_settings
    from binding_nb.geometry import SceneTable, r2_score
    from binding_nb.learned import PAPER_VAL_FRACTION, approximator_seed, binding_scenes, paper_object_sample
    from binding_nb.scenes import ConceptSpace
    from binding_nb.sweeps import holdout_split
    from binding_nb.toys import toy_embeddings
    form, setting, n_objects, steps = job
    t0, space, s = time.perf_counter(), ConceptSpace([30, 30]), SETTINGS[setting]
    scenes = binding_scenes(space, objects=paper_object_sample(space, n_objects)) if setting in PAPER_SCENES else binding_scenes(space, 20_000)
    emb = toy_embeddings(space, scenes, "table", dim=64, noise=0)
    table = SceneTable(space, emb, scenes, np.zeros((0, 64), np.float32), np.zeros(0, np.int64), "structureless table")
    split = holdout_split(table, 0.5, approximator_seed(0), PAPER_VAL_FRACTION if setting in PAPER_SCENES else 0.1)
    solver = ONE_ADAM_START if setting == "authors" else solver_settings(form)
    app = fit_approximator(form, space, scenes[split.train], emb[split.train], scenes[split.val], emb[split.val], capacity=s["rank"], lr=1e-2,
                           steps=steps, batch_size=None, eval_every=100, seed=0, device="cpu", init=s["init"], init_mean=s["init_mean"],
                           **solver)
    r2 = lambda rows: r2_score(emb[rows], app.predict(scenes[rows]))
    n_fit = len(np.unique(table.ids[split.train]))
    return dict(form=form, setting=setting, paper_objects=n_objects if setting in PAPER_SCENES else 0, rank=s["rank"], dim=64, steps=steps, **solver,
                fit_objects=n_fit, n_train=len(split.train), train_r2=r2(split.train), val_r2=r2(split.val), test_r2=r2(split.test),
                free_directions=free_directions(FORMS[form], s["rank"], [30, 30]), flagged=memorises(form, s["rank"], n_fit, [30, 30], 64),
                flagged_by_directions=free_directions(FORMS[form], s["rank"], [30, 30]) >= n_fit,   # the rule before it counted the width
                wall_s=round(time.perf_counter() - t0, 1))


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    "The command line, checked before any fit."
    from binding_nb.approximators import FORMS
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="results/complexity/structureless_tables.csv")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--forms", nargs="+", default=list(FORMS), choices=list(FORMS))
    p.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    p.add_argument("--paper_objects", nargs="+", type=int, default=[300, 400], help="objects the authors' setting reads")
    p.add_argument("--max_steps", type=int, default=None, help="cap the steps (a quick check)")
    a = p.parse_args(argv)
    if a.workers < 1: p.error(f"--workers must be >= 1, got {a.workers}")
    if min(a.paper_objects) < 4: p.error(f"--paper_objects must be >= 4 (half of them fitted, pairs of them read), got {min(a.paper_objects)}")
    if a.max_steps is not None and a.max_steps < 1: p.error(f"--max_steps must be >= 1, got {a.max_steps}")
    from binding_nb.utils import out_csv
    a.out = str(out_csv(p, a.out))
    return a


def jobs_to_fit(a: argparse.Namespace, have: pd.DataFrame) -> list[tuple]:
    "The (form, setting, paper_objects, steps) jobs asked for whose row `have` lacks, each once."
    steps = lambda st: SETTINGS[st]["steps"] if a.max_steps is None else min(SETTINGS[st]["steps"], a.max_steps)
    jobs = [(f, st, n, steps(st)) for f in a.forms for st in a.settings for n in (a.paper_objects if st in PAPER_SCENES else [0])]
    done = set(zip(have.form.astype(str), have.setting.astype(str), have.paper_objects.astype(int), have.steps.astype(int))) \
        if len(have) else set()
    return list(dict.fromkeys(j for j in jobs if j not in done))


def main(argv: list[str] | None = None) -> None:
    a = parse(argv)
    out = Path(a.out)
    jobs = jobs_to_fit(a, STRUCTURELESS.read(out))     # damaged rows set aside, with a warning: fitted again
    print(f"{len(jobs)} fits to run into {out}", flush=True)
    if not jobs: return
    with mp.get_context("spawn").Pool(a.workers) as pool:
        for row in pool.imap_unordered(run, jobs):
            STRUCTURELESS.append(out, {k: str(v) if k in FLAGS else v for k, v in row.items()})
            print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}, default=str), flush=True)


if __name__ == "__main__":
    main()
