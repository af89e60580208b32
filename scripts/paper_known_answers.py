"""The authors' setting on 06's known shared code at 300 and 400 objects: train R^2 of the kept and the last weights, beside the validation objects.

`paper_known_answers` (06) at each number of objects: every ordered pair of `paper_object_sample`'s objects, the global product as
wide as the embedding, 4,000 full-batch Adam steps from the authors' N(0, 1) start and from our N(1, 0.3^2), the weights of the
lowest validation loss kept (validation: `PAPER_VAL_FRACTION` of the fit objects). One table of both runs, with `paper_objects` and
the number of validation objects the kept weights were chosen on (`val_objects`).

    python scripts/paper_known_answers.py [--out results/learned/fig9_study/known_answers_paper_protocol_300_400.csv] [--work outputs]
                                          [--objects 300 400]      # about 10 minutes of one core
"""
import argparse
import numpy as np, pandas as pd, torch
from binding_nb.utils import arg_type, atomic_file, out_csv, whole_number, writable_folder


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    "The command line, checked before anything is fitted."
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="results/learned/fig9_study/known_answers_paper_protocol_300_400.csv")
    p.add_argument("--work", default="outputs", help="the folder of each run's results table (paper_known_answers_N inside)")
    p.add_argument("--objects", nargs="+", type=arg_type(whole_number, low=4), default=[300, 400],
                   help="the authors' sample sizes, each a run (at most 900: the 30 x 30 space)")
    a = p.parse_args(argv)
    if max(a.objects) > 900: p.error(f"--objects must be at most 900 (the 30 x 30 space's objects), got {max(a.objects)}")
    a.out = out_csv(p, a.out)
    try: a.work = writable_folder(a.work, "--work", "pass a folder you can write to")
    except (OSError, ValueError) as e: p.error(str(e))
    return a


def main(argv: list[str] | None = None) -> None:
    a = parse(argv)
    torch.set_num_threads(1)
    from binding_nb.learned import paper_known_answers, known_binding, paper_object_sample, approximator_seed, PAPER_VAL_FRACTION
    from binding_nb.scenes import ConceptSpace
    from binding_nb.sweeps import holdout_split
    space, rows = ConceptSpace([30, 30]), []
    for n in dict.fromkeys(a.objects):
        d = paper_known_answers(space, n, output_dir=a.work / f"paper_known_answers_{n}", workers=1)
        lb = known_binding(space, "shared_product", 32, among=paper_object_sample(space, n))
        sp = holdout_split(lb.table, 0.5, approximator_seed(0), PAPER_VAL_FRACTION)
        ids = lambda r: set(np.unique(lb.table.ids[r]))
        rows.append(d.assign(paper_objects=n, val_objects=len(ids(sp.val) - ids(sp.train))))
        with atomic_file(a.out) as f: pd.concat(rows).to_csv(f, index=False)     # written whole after each size
        print(d[["run", "init", "init_mean", "object_acc", "object_acc_test_selected", "ceiling_object_acc", "train_r2", "train_r2_last",
                 "r2", "best_step", "fit_objects"]].to_string(), flush=True)


if __name__ == "__main__":
    main()
