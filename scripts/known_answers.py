"""04's known answers at every rank: each form's own probe (and the additive probe, and both products on a table) fitted to a random
encoder of that form, and at ranks 32 and 64 to 06's known shared code, as `binding_nb.complexity.known_answer` fits it (moment
start and one random start, each finished by L-BFGS).

    python scripts/known_answers.py [--out results/complexity/known_answers.csv] [--ranks 8 16 32 64] [--workers 2]

One row per (encoder, family); the page 04_complexity renders the file and checks every row of it. Rows already in --out that
answer a job (its encoder and rank, probe, steps and finish) are kept and not fitted again: --ranks 8 adds rank 8 to the file and keeps the
other ranks.
"""
import argparse, multiprocessing as mp, time
from pathlib import Path

import pandas as pd

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
    from binding_nb.utils import writable_folder
    out = Path(a.out)
    if out.is_dir(): p.error(f"--out {out} is a folder: name the CSV file to write, e.g. {out / 'known_answers.csv'}")
    try: writable_folder(out.parent, "--out's folder", "pass a file in a folder you can write to")
    except OSError as e: p.error(str(e))
    return a


SAME = ["encoder", "code_rank", "family", "steps", "finish"]   # a row that answers a job: its code and rank, its probe, and how it was fitted


def todo(jobs: list[tuple], have: pd.DataFrame, steps: int = 300, finish: int = 500) -> list[tuple]:
    "The jobs of which some row is not in `have` yet (`known_answer`'s defaults: `steps` and `finish`)."
    done = set(map(tuple, have[SAME].astype(str).to_numpy())) if len(have) else set()
    name = lambda code, rank: f"{code}, rank {rank}" if code else "table"
    return [j for j in jobs if any((name(j[0], j[1]), str(j[1]), f, str(steps), str(finish)) not in done for f in j[2])]


def main(argv: list[str] | None = None) -> None:
    a = parse(argv)
    from binding_nb.complexity import known_jobs
    out = Path(a.out)
    have = pd.read_csv(out) if out.is_file() else pd.DataFrame()
    jobs = todo(known_jobs(a.ranks), have)
    print(f"{len(jobs)} of {len(known_jobs(a.ranks))} jobs to fit; {len(have)} rows in {out} kept")
    if not jobs: return
    with mp.get_context("spawn").Pool(a.workers) as pool:
        new = pd.concat(pool.map(run, jobs, chunksize=1), ignore_index=True)
    rows = pd.concat([have, new], ignore_index=True).drop_duplicates(["encoder", "code_rank", "family"], keep="last")   # a job fitted again replaces its rows
    rows.sort_values(["code_rank", "encoder", "family"], kind="stable").to_csv(out, index=False)
    print(f"wrote {len(new)} new rows, {len(rows)} in all, to {out}")


if __name__ == "__main__":
    main()
