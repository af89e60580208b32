"""Copy a Fig. 9 study run of 06 into results/learned/fig9_study: its points and statistics, its fits beside the committed authors' fits.

06 run with the study's parameters writes, into its output_dir, the points and statistics of every protocol it ran
(`fig9_points*.csv`, `fig9_correlation*.csv`), every fit (`binding_study.csv`), the fits' results table (`learned_results.csv`)
and its models' (`models/coverage_results.csv`). This copies them into the committed study folder. A protocol the run did not
fit (the authors', with `paper_objects 0`) keeps its committed files, and its rows of `binding_study.csv` are kept beside the
run's. The two results tables are copied as they are, so that a later run can read every finished fit back.

    python scripts/collect_fig9_study.py [--run outputs/06_fig9_study81] [--into results/learned/fig9_study]
"""
import argparse, shutil
from pathlib import Path

import pandas as pd

from binding_nb.utils import atomic_file, read_csv_named, writable_folder


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run", default="outputs/06_fig9_study81", help="the output_dir of 06's study run")
    p.add_argument("--into", default="results/learned/fig9_study", help="the committed study folder")
    a = p.parse_args(argv)
    run = Path(a.run)
    if not (run / "binding_study.csv").is_file(): p.error(f"{run} holds no binding_study.csv: run 06 into it first, to its end")
    try:
        new = read_csv_named(run / "binding_study.csv", "run 06 into that folder again, to its end")
        into = writable_folder(a.into, "--into", "pass the committed study folder")
        old = read_csv_named(into / "binding_study.csv") if (into / "binding_study.csv").is_file() else new.iloc[:0]
    except (OSError, ValueError) as e: p.error(str(e))
    for name, table in (("the run's", new), ("the committed", old)):
        if "protocol" not in table: p.error(f"{name} binding_study.csv has no protocol column: it is not 06's study table")
    made = sorted(run.glob("fig9_points*.csv")) + sorted(run.glob("fig9_correlation*.csv"))
    for f in made: shutil.copy(f, into / f.name)
    kept = old[~old.protocol.isin(set(new.protocol))]                       # the protocols this run did not fit
    with atomic_file(into / "binding_study.csv") as f: pd.concat([new, kept], ignore_index=True).to_csv(f, index=False)
    shutil.copy(run / "learned_results.csv", into / "learned_results.csv")
    shutil.copy(run / "models" / "coverage_results.csv", into / "coverage_results.csv")
    print(f"copied {len(made)} point and statistics files; binding_study.csv: {len(new)} rows of this run "
          f"({', '.join(sorted(set(new.protocol)))}) and {len(kept)} kept ({', '.join(sorted(set(kept.protocol))) or 'none'})")


if __name__ == "__main__":
    main()
