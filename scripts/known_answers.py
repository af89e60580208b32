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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="results/complexity/known_answers.csv")
    p.add_argument("--ranks", nargs="+", type=int, default=[8, 16, 32, 64])
    p.add_argument("--workers", type=int, default=2)
    a = p.parse_args()
    from binding_nb.complexity import known_jobs
    with mp.get_context("spawn").Pool(a.workers) as pool:
        rows = pd.concat(pool.map(run, known_jobs(a.ranks), chunksize=1), ignore_index=True)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    rows.to_csv(a.out, index=False)
    print(f"wrote {len(rows)} rows to {a.out}")


if __name__ == "__main__":
    main()
