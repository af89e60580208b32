"""04's known answers at every rank: each form's own probe (and the additive probe, and both products on a table) fitted to a random
encoder of that form, as `binding_nb.complexity.known_answer` fits it (moment start and one random start, each finished by L-BFGS).

    python scripts/known_answers.py [--out results/complexity/known_answers.csv] [--ranks 8 16 32 64] [--workers 2]

One row per (encoder, family); the page 04_complexity renders the file and checks every row of it.
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


def main(argv: list[str] | None = None) -> None:
    a = parse(argv)
    from binding_nb.complexity import known_jobs
    with mp.get_context("spawn").Pool(a.workers) as pool:
        rows = pd.concat(pool.map(run, known_jobs(a.ranks), chunksize=1), ignore_index=True)
    rows.to_csv(a.out, index=False)
    print(f"wrote {len(rows)} rows to {a.out}")


if __name__ == "__main__":
    main()
