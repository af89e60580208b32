"""Read the Fig. 9 study run again with controls and the authors' protocol at 400 objects, and write its README.

`scripts/paper_protocol_study.py` appends each model's fits to `results/learned/fig9_study/controls_paper400/
learned_results.csv` as it finishes. This reads that table, however far the run has come, and writes beside it:

- `fig9_points_ours.csv`, `fig9_points_paper.csv`: Fig. 9's points under our protocol and the authors' (`form_vs_generalisation`);
- `fig9_statistics.csv`: 06b's statistics per protocol and form (`fig9_statistics`, 10,000 resamples, seed 0);
- `controls.csv`: every form-probe fit as Fig. 9 reads it (ours: the setting chosen on validation; the authors': their one
  setting, its held-out recognition at its step best on test) beside its control, read the same way: held-out object
  recognition of both, the selectivity, the training R^2 of both (of the weights kept on validation, under both
  protocols), the held-out R^2 of both (of the weights kept on validation, as the training R^2), and the memorisation rule's flag;
- `README.md`: how far the run has come, the statistics, the controls, where the memorisation rule and the controls agree,
  and the models' own numbers against those of the study in `../` (the same models trained again).

    python scripts/collect_controls_study.py [--folder results/learned/fig9_study/controls_paper400]
"""
import argparse, warnings
from pathlib import Path

import numpy as np
import pandas as pd

from binding_nb.fig9 import controls_summary, fig9_statistics, form_vs_generalisation, rule_beside_controls
from binding_nb.learned import AUTHORS_READING
from binding_nb.reports import markdown_table
from binding_nb.sweeps import select_on_validation
from binding_nb.utils import atomic_file, read_csv_named
from paper_protocol_study import FORMS      # the study's forms per protocol

N_BOOT = 10_000      # as 06b


def read(folder: Path) -> pd.DataFrame:
    return read_csv_named(folder / "learned_results.csv", "restore it from git, or run scripts/paper_protocol_study.py")


def as_read(fits: pd.DataFrame) -> pd.DataFrame:
    """Every form-probe fit as Fig. 9 reads it, with its control: ours chosen on validation; the authors' one setting,
    its numbers at the step best on test."""
    ours = select_on_validation(fits[(fits.protocol == "ours") & fits.family.isin(FORMS["ours"])])
    paper = fits[(fits.protocol == "paper") & fits.family.isin(FORMS["paper"])]
    paper = paper.assign(object_acc=paper.object_acc_test_selected, control_object_acc=paper.control_object_acc_test_selected)
    both = pd.concat([ours, paper], ignore_index=True)
    return both.assign(run=both.run.str.removesuffix(AUTHORS_READING), selectivity=both.object_acc - both.control_object_acc)[
        ["protocol", "family", "architecture", "model_coverage", "model_seed", "run", "object_acc", "control_object_acc",
         "train_r2", "control_train_r2", "r2", "control_r2", "selectivity", "regime"]].sort_values(
        ["protocol", "family", "architecture", "model_coverage", "model_seed"]).reset_index(drop=True)


def statistics(fits: pd.DataFrame) -> tuple[dict, pd.DataFrame]:
    points = {p: form_vs_generalisation(fits, FORMS[p], n_boot=N_BOOT, protocol=p)[0] for p in FORMS}
    with warnings.catch_warnings():      # models of one architecture so far: its plain interval stands alone, said below
        warnings.simplefilter("ignore")
        stats = pd.concat([fig9_statistics({p: pts for p, pts in points.items() if (pts.form == f).any()}, form=f, n_boot=N_BOOT)
                           for f in ("global_product", "additive")], ignore_index=True)
    return points, stats


def statistics_table(stats: pd.DataFrame) -> str:
    f = lambda v: f"{v:.2f}"
    stats = stats.reindex(columns=stats.columns.union(["r_low_cluster", "r_high_cluster", "r_without_min", "r_without_max"],
                                                      sort=False))   # models of one architecture: no cluster columns
    return markdown_table(pd.DataFrame({
        "protocol": stats.protocol, "form": stats.form.str.replace("_", " "), "models": stats.n_models, "r": stats.r.map(f),
        "95% interval": [f"[{a:.2f}, {b:.2f}]" for a, b in zip(stats.r_low, stats.r_high)],
        "resampling the architectures": [f"[{a:.2f}, {b:.2f}]" for a, b in zip(stats.r_low_cluster, stats.r_high_cluster)],
        "leaving one out": [f"{a:.2f} to {b:.2f}" for a, b in zip(stats.r_without_min, stats.r_without_max)],
        "r among the models that bind": [f"{r:.2f} ({int(n)})" for r, n in zip(stats.r_binders, stats.n_binders)]}))


def against_study(study: pd.DataFrame, fits: pd.DataFrame) -> str:
    """The models trained again, against the study's (`binding_study.csv`): their own numbers and our fits', where both
    hold a model."""
    key = ["run", "family", "init_mean"]
    ours = study[study.protocol == "ours"].merge(fits[fits.protocol == "ours"], on=key, suffixes=("_study", ""))
    if ours.empty: return "No model of the study has been studied again yet."
    d = lambda c: float(np.nanmax(np.abs(ours[c] - ours[f"{c}_study"])))
    n, whole = ours.run.nunique(), study.loc[study.protocol == "ours", "run"].nunique()
    return (f"The {n} models studied{' so far' if n < whole else ''}, trained again, against the study's (`../binding_study.csv`): "
            f"their own held-out object recognition differs by at most {d('model_object_acc'):.4f}, and our {len(ours)} fits' "
            f"held-out recognition by at most {d('object_acc'):.4f}.")


def finished(fits: pd.DataFrame) -> pd.DataFrame:
    """The rows of the models studied under both protocols with every form probe's control (a model's rows from before
    the controls are not yet replaced)."""
    if "control_object_acc" not in fits: return fits.iloc[:0]
    model = fits.run.str.removesuffix(AUTHORS_READING)
    done = set(model)
    for protocol, forms in FORMS.items():
        for form in forms:
            done &= set(model[(fits.protocol == protocol) & (fits.family == form) & fits.control_object_acc.notna()])
    return fits[model.isin(done)]


def write(folder: Path) -> str:
    fits = finished(read(folder))
    points, stats = statistics(fits)
    for p, pts in points.items(): pts.to_csv(folder / f"fig9_points_{p}.csv", index=False)
    stats.to_csv(folder / "fig9_statistics.csv", index=False)
    read_fits = as_read(fits)
    read_fits.to_csv(folder / "controls.csv", index=False)
    arch = fits[fits.protocol == "ours"].drop_duplicates("run").architecture.value_counts().sort_index()
    study = read_csv_named(folder.parent / "binding_study.csv", "restore the study folder from git")
    whole = study.loc[study.protocol == "ours", "run"].nunique()      # the models of the study, studied again here
    text = "\n\n".join([
        "# results/learned/fig9_study/controls_paper400: Fig. 9's study with controls and the authors' 400 objects",
        (folder / "provenance.md").read_text().strip(),
        f"## The models studied\n\n{int(arch.sum())} of {whole} models studied under both protocols ("
        + ", ".join(f"{a}: {n}" for a, n in arch.items()) + "). " + against_study(study, fits),
        "## Fig. 9's statistics\n\nPer protocol and form, as 06b computes them (" + f"{N_BOOT:,}"
        + f" resamples, seed 0), over the models studied{' so far' if arch.sum() < whole else ''}.\n\n"
        + statistics_table(stats),
        "## The controls\n\nEach form-probe fit beside the same probe fitted to its model's control task (`control_binding`), "
        "per protocol and form: the fits as Fig. 9 reads them (`controls.csv`).\n\n" + markdown_table(controls_summary(read_fits)),
        "## The memorisation rule beside the controls\n\nPer protocol, form and the rule's verdict (`memorises`): how many "
        "fits the control says could absorb a structureless target, and how many are selective.\n\n"
        + markdown_table(rule_beside_controls(read_fits))])
    with atomic_file(folder / "README.md") as f: f.write((text + "\n").encode())
    return text


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--folder", default="results/learned/fig9_study/controls_paper400", help="the study's committed folder")
    a = p.parse_args(argv)
    folder = Path(a.folder)
    if not (folder / "learned_results.csv").is_file(): p.error(f"{folder} holds no learned_results.csv: run scripts/paper_protocol_study.py")
    if not (folder / "provenance.md").is_file(): p.error(f"{folder} holds no provenance.md: write how the study was made there first")
    print(write(folder))


if __name__ == "__main__":
    main()
