"""The Fig. 9 study again, with a control beside every form probe and the authors' protocol at their 400 objects, resumable:
each model is trained, studied under both protocols and their controls, and then its rows are appended to a committed
table, so that an interrupted run loses at most the models in hand and the next run, on any machine, goes on from it.

The models are 06's Fig. 9 study's (`results/learned/fig9_study/provenance.md`): the three architectures at coverages 0.1 to
0.9, three seeds each, C = 2, V = 30, 1,500 training steps. Each is trained again (into `--work`, which also keeps the fits
so far, for a run resumed on the same machine), and `binding_study` fits to it:
- ours: the study's approximators (an MLP of width 32; the additive probe and the global product of rank 64, the
  moment start and N(0, 0.3^2) and N(1, 0.3^2) starts, each finished by 200 L-BFGS iterations; 20,000 sampled scenes,
  half the objects, 1,500 Adam steps);
- the authors': the global product in their setting (`paper_cells`: as wide as the embedding, one N(0, 1) start, 4,000
  full-batch Adam steps) on every ordered pair of `--objects` objects of the test-best weights;
- and each form probe of `--controls` to the binding function's control task (`control_binding`), under both.
A model's rows (with its own numbers from this training) join `--into`'s `learned_results.csv` only when they are all
there, in place of any it held; a model with both protocols' controls there is not studied again.

    python scripts/paper_protocol_study.py [--objects 400] [--workers 2] [--limit N] [--controls additive global_product]
        [--into results/learned/fig9_study/controls_paper400] [--work outputs/06_fig9_paper400]
"""
import argparse, time
from pathlib import Path

import pandas as pd
from filelock import FileLock

from binding_nb.config import RunConfig, run_config, with_architecture
from binding_nb.coverage import sweep_configs
from binding_nb.learned import AUTHORS_READING, LEARNED_RESULTS, PAPER_OBJECTS, PAPER_STEPS
from binding_nb.study import binding_study
from binding_nb.sweeps import grid
from binding_nb.utils import arg_type, atomic_file, in_processes, read_csv_named, whole_number, writable_folder

STUDY_ORDER = ["product-shared", "product-independent", "transformer"]   # the architectures, in the order studied
COVERAGES = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]
SEEDS = [0, 1, 2]
C, V, TRAIN_STEPS = 2, 30, 1500        # 06's models
LR, EVAL_EVERY, FRACTION = 1e-2, 100, 0.5   # 06's probe learning rate, validation cadence and fit share
OURS = dict(n_scenes=20_000, steps=1500, val_fraction=0.1)   # the study's settings of our protocol
FORMS = {"ours": ["additive", "global_product"], "paper": ["global_product"]}   # the form probes of each protocol
OURS_CELLS = grid(["mlp"], [32], [LR]) + grid(["additive", "global_product"], ranks=[64], lrs=[LR], inits=[0.3],
                                              init_means=[0.0, 1.0], moment=True, finish=200)


def study_configs() -> list[RunConfig]:
    "The Fig. 9 study's 81 models, in 06's order (architecture, then coverage, then seed)."
    base = run_config(C=C, V=V, steps=TRAIN_STEPS)
    return [c for a in STUDY_ORDER for c in sweep_configs(with_architecture(base, a), [[C, V]], COVERAGES, SEEDS)]


def read_table(into: Path) -> pd.DataFrame:
    "The committed table as written (its text columns too: a results table reads only its own as text); empty if none."
    path = LEARNED_RESULTS.path(into)
    return read_csv_named(path, "restore it from git, or move it away to start again") if path.is_file() else pd.DataFrame()


def done_runs(into: Path, controls: list[str], objects: int) -> set[str]:
    """The runs whose rows the committed table holds under both protocols (the authors' at `objects`), each form probe
    of `controls` with its control."""
    fits = read_table(into)
    if not len(fits): return set()
    model = fits.run.str.removesuffix(AUTHORS_READING)
    have = fits.assign(model=model, control=fits.control_object_acc.notna() if "control_object_acc" in fits else False)
    have = have[(have.protocol == "ours") | (have.paper_objects == objects)]
    need = [("ours", f) for f in FORMS["ours"] if f in controls] + [("paper", f) for f in FORMS["paper"] if f in controls]
    done = set(have.model[have.protocol == "ours"]) & set(have.model[have.protocol == "paper"])
    for protocol, form in need:
        done &= set(have.model[(have.protocol == protocol) & (have.family == form) & have.control])
    return done


def store(into: Path, rows: pd.DataFrame) -> None:
    "Put a model's rows into the committed table, in place of any it held of the same fits."
    with FileLock(str(into / "study.lock")):
        old = read_table(into)
        if len(old): old = old[~old.run.isin(rows.run)]
        with atomic_file(LEARNED_RESULTS.path(into)) as f:
            (pd.concat([old, rows], ignore_index=True) if len(old) else rows).to_csv(f, index=False)


def study_one(cfg: RunConfig, work: Path, into: Path, objects: int, steps: int, controls: list[str]) -> int:
    "Train one model, fit it under the authors' protocol and its control, and store its rows; how many."
    t0 = time.time()
    fits, _ = binding_study([cfg], OURS_CELLS, [FRACTION], [0], work / "fits", models_dir=work / "models",
                            eval_every=EVAL_EVERY, device="cpu", workers=1, progress=False, paper_objects=objects,
                            paper_steps=steps, paper_lr=LR, controls=controls, **OURS)
    if fits.empty:                                  # a run that diverged: nothing to study (its row says so in --work)
        print(f"{cfg.run_name()}: diverged, nothing studied", flush=True); return 0
    store(into, fits.assign(paper_objects=objects))
    paper = fits[fits.protocol == "paper"]
    print(f"{cfg.run_name()}: {len(fits)} fits; the authors' protocol: held-out recognition "
          f"{', '.join(f'{v:.3f}' for v in paper.object_acc_test_selected)}"
          + (f", control {', '.join(f'{v:.3f}' for v in paper.control_object_acc_test_selected)}" if controls else "")
          + f"; {time.time() - t0:.0f} s", flush=True)
    return len(fits)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--objects", type=arg_type(whole_number, low=4), default=PAPER_OBJECTS,
                   help="objects read per model (the authors: 400)")
    p.add_argument("--steps", type=arg_type(whole_number, low=1), default=PAPER_STEPS,
                   help="full-batch Adam steps per fit (the authors: 4,000)")
    p.add_argument("--into", default="results/learned/fig9_study/controls_paper400", help="the committed folder")
    p.add_argument("--work", default="outputs/06_fig9_paper400", help="where models and fits in progress live")
    p.add_argument("--workers", type=arg_type(whole_number, low=1), default=2, help="models side by side, one process and torch thread each")
    p.add_argument("--limit", type=arg_type(whole_number, low=1), default=None, help="study at most this many models not yet done, then stop")
    p.add_argument("--controls", nargs="*", default=["additive", "global_product"],
                   help="form probes fitted to the control task too")
    a = p.parse_args(argv)
    if bad := [f for f in a.controls if f not in ("additive", "global_product")]:
        p.error(f"--controls {bad}: the study fits the additive probe and the global product, and only those have controls")
    into = writable_folder(a.into, "--into", "pass a folder you can write to")
    work = writable_folder(a.work, "--work", "pass a folder you can write to")
    done = done_runs(into, a.controls, a.objects)
    todo = [c for c in study_configs() if c.run_name() not in done][:a.limit]
    print(f"{len(todo)} model(s) to study, {len(done)} done in {into}", flush=True)
    in_processes(study_one, [(c, work, into, a.objects, a.steps, a.controls) for c in todo], a.workers, "models",
                 progress=False, label=lambda job: f"the study of {job[0].run_name()}")
    print(f"{len(done_runs(into, a.controls, a.objects))} of {len(study_configs())} models done", flush=True)


if __name__ == "__main__":
    main()
