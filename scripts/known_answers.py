"""04's known answers at every rank: each form's own probe (and the additive probe, and both products on a table) fitted to a random
encoder of that form, and at ranks 32 and 64 to 06's known shared code, as `binding_nb.complexity.known_answer` fits it (moment
start and one random start, each finished by L-BFGS).

    python scripts/known_answers.py [--out results/complexity/known_answers.csv] [--ranks 8 16 32 64] [--workers 2]

One row per (encoder, family); the page 04_complexity renders the file and checks every row of it. Each job's rows are written as
the job finishes (an interrupted run keeps the jobs it finished), through a results table: a damaged row (cut short, a metric missing)
is set aside and its job fitted again. Rows already in --out that answer a job (its encoder and rank, probe, steps and finish) are kept
and not fitted again: --ranks 8 adds rank 8 to the file and keeps the other ranks; a job fitted again replaces its encoder's rows of
that probe.
"""
import argparse, multiprocessing as mp, time
from pathlib import Path

import pandas as pd

from binding_nb.results import ResultsTable

def run(job: tuple) -> pd.DataFrame:
    import torch
    torch.set_num_threads(1)
    from binding_nb.complexity import known_answer
    t0 = time.perf_counter()
    rows = known_answer(*job)
    print(f"{rows.encoder.iloc[0]}: {', '.join(rows.family)} in {time.perf_counter() - t0:.0f} s", flush=True)
    return rows


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    "The command line, checked before any fit: each rank once, in order, at least 1; `--out` a file whose folder can be written."
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="results/complexity/known_answers.csv")
    p.add_argument("--ranks", nargs="+", type=int, default=[8, 16, 32, 64])
    p.add_argument("--workers", type=int, default=2)
    a = p.parse_args(argv)
    a.ranks = sorted(set(a.ranks))                                   # --ranks 8 8: each job once
    if a.ranks[0] < 1: p.error(f"--ranks must be >= 1, got {a.ranks[0]}")
    if a.workers < 1: p.error(f"--workers must be >= 1, got {a.workers}")
    from binding_nb.utils import out_csv
    a.out = str(out_csv(p, a.out))
    return a


SAME = ["encoder", "code_rank", "family", "steps", "finish"]   # a row that answers a job: its code and rank, its probe, and how it was fitted
METRICS = ("train_r2", "val_r2", "r2", "concept_acc", "object_acc", "ceiling_object_acc", "bag_of_concepts_acc")


def _missing_metrics(df: pd.DataFrame) -> dict[str, pd.Series]:
    missing = pd.concat([pd.to_numeric(df[c], errors="coerce").isna() for c in METRICS], axis=1).any(axis=1)
    return {"a missing metric": missing & (df.status == "ok")}     # a fit that diverged keeps its row, empty by design


KNOWN_ANSWERS = ResultsTable(
    "known_answers.csv",
    columns=("encoder", "code", "code_rank", "scenes", "family", "capacity", "lr", "init", "init_mean", "form", "starts", "moment",
             "finish", "coverage", "seed", "steps", "n_train", "n_val", "n_test", "fit_objects", "regime", "ceiling_concept_acc",
             "ceiling_object_acc", "bag_of_concepts_acc", "ceiling_concept_acc_in_batch", "ceiling_object_acc_in_batch",
             "bag_of_concepts_acc_in_batch", "val_score", "val_concept_acc", "val_object_acc", "val_r2", "concept_acc", "object_acc", "r2",
             "concept_acc_in_batch", "object_acc_in_batch", "train_r2", "best_step", "start", "finish_step", "seconds", "status"),
    keys=tuple(SAME), text=("encoder", "code", "family", "form", "regime", "status"),
    counts=("code_rank", "scenes", "capacity", "starts", "finish", "seed", "steps", "n_train", "n_val", "n_test", "fit_objects"),
    checks=_missing_metrics, advice="pass the CSV file to write, e.g. results/complexity/known_answers.csv")


def write_job(out: Path, rows: pd.DataFrame) -> pd.DataFrame:
    "Put one job's rows into the table at `out`, in place of its encoder's earlier rows of the same probes; the table."
    have = KNOWN_ANSWERS.read(out)
    old = have.encoder.astype(str).isin(rows.encoder.astype(str)) & have.family.astype(str).isin(rows.family.astype(str)) \
        & (have.code_rank.astype(float) == float(rows.code_rank.iloc[0])) if len(have) else pd.Series(False, index=have.index)
    table = pd.concat([have[~old], rows], ignore_index=True) if len(have[~old]) else rows
    table = table.sort_values(["code_rank", "encoder", "family"], kind="stable").reset_index(drop=True)
    KNOWN_ANSWERS.write(table, out)
    return table


def todo(jobs: list[tuple], have: pd.DataFrame, steps: int = 300, finish: int = 500) -> list[tuple]:
    "The jobs of which some row is not in `have` yet (`known_answer`'s defaults: `steps`, and `finish` as `code_solver` sets it)."
    from binding_nb.complexity import code_solver
    whole = lambda c: pd.to_numeric(have[c]).astype(int)      # 8, 8.0 and "8" alike
    done = set(zip(have.encoder.astype(str), whole("code_rank"), have.family.astype(str), whole("steps"), whole("finish"))) \
        if len(have) else set()
    name = lambda code, rank: f"{code}, rank {rank}" if code else "table"
    return [j for j in jobs if any((name(j[0], j[1]), j[1], f, steps, code_solver(j[0], finish)["finish"]) not in done for f in j[2])]


def main(argv: list[str] | None = None) -> None:
    a = parse(argv)
    from binding_nb.complexity import known_jobs
    out = Path(a.out)
    have = KNOWN_ANSWERS.read(out)                 # damaged rows set aside, with a warning: their jobs are fitted again
    jobs = todo(known_jobs(a.ranks), have)
    print(f"{len(jobs)} of {len(known_jobs(a.ranks))} jobs to fit; {len(have)} rows in {out} kept")
    if not jobs: return
    new = 0
    with mp.get_context("spawn").Pool(a.workers) as pool:
        for rows in pool.imap_unordered(run, jobs, chunksize=1):     # each job's rows written as it finishes
            table = write_job(out, rows); new += len(rows)
    print(f"wrote {new} new rows, {len(table)} in all, to {out}")


if __name__ == "__main__":
    main()
