"""Copy a Fig. 9 study run of 06 into results/learned/fig9_study, and write the study's README from its files.

06 run with the study's parameters writes, into its output_dir, the points and statistics of every protocol it ran
(`fig9_points*.csv`, `fig9_correlation*.csv`), every fit (`binding_study.csv`), the fits' results table (`learned_results.csv`)
and its models' (`models/coverage_results.csv`). This copies them into the committed study folder. A protocol the run did not
fit (the authors', with `paper_objects 0`) keeps its committed files, and its rows of `binding_study.csv` are kept beside the
run's. The two results tables are copied as they are, so that a later run can read every finished fit back.

The README is then written from the folder's files: its hand-written provenance (`provenance.md`), the files and their rows,
Fig. 9's statistics for the global product and the additive probe under every protocol (computed as 06b computes them:
`fig9_statistics`, 10,000 resamples, seed 0), and what they support. The `regime` of the authors' fits is read again with
today's memorisation rule (`memorises`, their probe as wide as the embedding).

    python scripts/collect_fig9_study.py [--run outputs/06_fig9_study81] [--into results/learned/fig9_study]
    python scripts/collect_fig9_study.py --readme-only [--into results/learned/fig9_study]
"""
import argparse, shutil
from pathlib import Path

import numpy as np
import pandas as pd

from binding_nb.approximators import memorises
from binding_nb.association import BINDS, association, by_group
from binding_nb.fig9 import FIG9_FILE, FIG9_NAMES, FIG9_PROTOCOLS, accuracy_span, fig9_statistics, seed_spread
from binding_nb.learned import PAPER_OBJECTS
from binding_nb.reports import markdown_table
from binding_nb.utils import atomic_file, read_csv_named, writable_folder

N_BOOT = 10_000   # as 06b: bootstrap resamples and permutations, seed 0
FILES = {   # what each file of the study holds
    "fig9_points.csv": "per model and form, our protocol: the model's own held-out object recognition "
                       "(`model_object_acc`, exhaustive, validation-selected checkpoint) and the form's (`object_acc`, "
                       "exhaustive, setting chosen on validation)",
    "fig9_points_in_batch.csv": "the same with our checkpoints and fits scored in-batch: the model's best in-batch step on "
                                "the authors' fresh test samples, the form's best step and setting on test",
    "fig9_points_paper_protocol.csv": "the authors' protocol: the model's in-batch number at its step best on test, and the "
                                      "global product fitted in their setting to the test-best weights' binding function "
                                      "on every ordered pair of the objects read, at its step best on test",
    "fig9_correlation.csv": "`association` per form under our protocol: Pearson r, its 95% bootstrap interval and the spread "
                            "of its ends over five bootstrap seeds, Spearman's rho, a permutation p, r among the models "
                            "whose own recognition is above 0.8",
    "fig9_correlation_in_batch.csv": "the same, scored in-batch",
    "fig9_correlation_paper_protocol.csv": "the same, under the authors' protocol",
    "known_answers_paper_protocol_300_400.csv": "the authors' setting on 06's known shared code at 300 and 400 objects, from "
                                                "their N(0, 1) start and our N(1, 0.3^2): the kept weights' numbers and the "
                                                "last weights' (`*_last`)",
    "binding_study.csv": "every fit (`protocol` ours or paper)",
    "learned_results.csv": "the run's results table of fits",
    "coverage_results.csv": "the run's results table of models",
}


def read(folder: Path, name: str) -> pd.DataFrame:
    return read_csv_named(folder / name, "restore the study folder from git, or collect the run again")


def files_table(folder: Path) -> str:
    "The study's files, each with its rows and what it holds."
    rows = []
    for name, what in FILES.items():
        if not (folder / name).is_file(): continue
        d = read(folder, name)
        n = f"{len(d):,}" + (" (" + ", ".join(f"{k} {v}" for k, v in d.protocol.value_counts().sort_index().items()) + ")"
                             if "protocol" in d else "")
        rows.append(dict(file=f"`{name}`", rows=n, holds=what))
    return markdown_table(pd.DataFrame(rows))


def study_points(folder: Path) -> dict[str, pd.DataFrame]:
    "Fig. 9's points of every protocol the folder holds."
    return {p: read(folder, f"fig9_points{FIG9_FILE[p]}.csv") for p in FIG9_PROTOCOLS
            if (folder / f"fig9_points{FIG9_FILE[p]}.csv").is_file()}


def statistics(points: dict[str, pd.DataFrame]) -> pd.DataFrame:
    "06b's statistics per protocol, for the global product and, where fitted, the additive probe."
    return pd.concat([fig9_statistics({p: d for p, d in points.items() if (d.form == form).any()}, form=form, n_boot=N_BOOT)
                      for form in ("global_product", "additive")], ignore_index=True)


def statistics_table(stats: pd.DataFrame) -> str:
    f = lambda v: f"{v:.2f}"
    return markdown_table(pd.DataFrame({
        "protocol": stats.protocol.map(FIG9_NAMES), "form": stats.form.str.replace("_", " "), "models": stats.n_models,
        "r": stats.r.map(f), "95% interval": [f"[{a:.2f}, {b:.2f}]" for a, b in zip(stats.r_low, stats.r_high)],
        "resampling the architectures": [f"[{a:.2f}, {b:.2f}]" for a, b in zip(stats.r_low_cluster, stats.r_high_cluster)],
        "r within an architecture": [f"{a:.2f} to {b:.2f}" for a, b in zip(stats.r_within_min, stats.r_within_max)],
        "leaving one out": [f"{a:.2f} to {b:.2f}" for a, b in zip(stats.r_without_min, stats.r_without_max)],
        "Spearman": stats.spearman.map(f), "permutation p": stats.p_permutation.map(lambda v: f"{v:.4f}"),
        "r among the models that bind": [f"{r:.2f} ({int(n)})" for r, n in zip(stats.r_binders, stats.n_binders)]}))


def paper_regime(fits: pd.DataFrame) -> pd.Series:
    "Today's memorisation rule on the authors' fits: their probe is as wide as the embedding it fits."
    return pd.Series(["memorises" if memorises(f.family, f.capacity, f.fit_objects, [f.V] * f.C, f.capacity) else "ok"
                      for f in fits.itertuples()], index=fits.index)


def reading(folder: Path, points: dict[str, pd.DataFrame], stats: pd.DataFrame) -> str:
    "What the statistics support, in words, every number read from the folder's files."
    fits = read(folder, "binding_study.csv")
    st = stats.set_index(["protocol", "form"])
    ours = points["ours"].query("form == 'global_product'")
    binds = sorted(ours.architecture[ours.model_object_acc > BINDS].unique())
    g, a = st.loc[("ours", "global_product")], st.loc[("ours", "additive")]
    additive = points["ours"].query("form == 'additive'")
    within = {f: by_group(d.model_object_acc, d.object_acc, d.architecture).set_index("group").r_within
              for f, d in (("global", ours), ("additive", additive))}
    spread = seed_spread(points["ours"])
    out = [f"- **Ours.** Over {int(g.n_models)} models the global product gives r = {g.r:.2f} [{g.r_low:.2f}, {g.r_high:.2f}] "
           f"(resampling the architectures, [{g.r_low_cluster:.2f}, {g.r_high_cluster:.2f}]), and r = {g.r_binders:.2f} among "
           f"the {int(g.n_binders)} models that bind; the additive probe, beside it, r = {a.r:.2f} [{a.r_low:.2f}, {a.r_high:.2f}] "
           f"and {a.r_binders:.2f} among them. Within an architecture, r is "
           + "; ".join(f"{within['global'][k]:.2f} for the global product and {within['additive'][k]:.2f} for the additive "
                       f"probe on the {k} models" for k in within["global"].index)
           + ". So the association is that of the "
           "architectures that bind against those that do not, and of coverage within each, not a graded relation among the "
           "models that bind."]
    if binds and all(b.startswith("product") for b in binds):
        tr = ours[ours.architecture == "transformer"].model_object_acc
        out.append(f"- **What it tests.** Every model that binds (own held-out recognition above {BINDS:g}) is a product "
                   f"encoder ({', '.join(binds)}), a second architecture of this repository's whose multiplicative form is "
                   f"built in; no transformer binds (their own {accuracy_span(tr)}, the bag of concepts "
                   f"{fits.model_bag_of_concepts_acc.mean():.2f}). Fig. 9 here tests the probes and the product encoders, not "
                   "the paper's claim about transformers.")
    out.append(f"- **Seed to seed** ({int(spread.seeds.min())} seeds at each architecture and coverage): a model's own "
               f"held-out recognition moves by a median of {spread.own_range.median():.2f} (at most "
               f"{spread.own_range.max():.2f}), the global product's by a median of {spread.form_range.median():.2f} (at most "
               f"{spread.form_range.max():.2f}).")
    if ("paper", "global_product") in st.index:
        t, pf = st.loc[("paper", "global_product")], fits[fits.protocol == "paper"]
        known = read(folder, "known_answers_paper_protocol_300_400.csv")
        n_read = int(known[known.fit_objects == pf.fit_objects.iloc[0]].paper_objects.iloc[0])
        k = known[known.paper_objects == n_read].sort_values("init_mean")
        both = lambda col: " and ".join(f"{v:,.0f}" if abs(v) >= 10 else f"{v:.2f}" for v in col)
        x, y = FIG9_PROTOCOLS["paper"]
        pts = points["paper"].query("form == 'global_product'")
        sound = sorted(pf.architecture[pf.groupby("architecture").r2.transform("min") >= 0.8].unique())
        kept = pts[pts.architecture.isin(sound)]
        held = association(kept[x], kept[y], N_BOOT) if len(kept) >= 3 else None
        out.append(
            f"- **The authors' protocol** is read on {int(t.n_models)} models of seed {', '.join(map(str, sorted(pf.model_seed.unique())))} "
            f"only, each on every pair of {n_read} objects where the authors read up to {PAPER_OBJECTS}: r = {t.r:.2f} "
            f"[{t.r_low:.2f}, {t.r_high:.2f}] (resampling the architectures, [{t.r_low_cluster:.2f}, {t.r_high_cluster:.2f}]). "
            f"Today's memorisation rule flags {int((pf.regime == 'memorises').sum())} of its {len(pf)} fits. On the known "
            f"shared code (its own held-out recognition {k.ceiling_object_acc.iloc[0]:.2f}) read the same way, the last "
            f"weights fit the training scenes to R^2 {both(k.train_r2_last)} and recover {both(k.object_acc_last)} of its "
            f"held-out objects (held-out R^2 {both(k.r2_last)}), from the authors' start and from ours."
            + "".join(f" At {n} objects the last weights still fit {both(d.sort_values('init_mean').train_r2_last)} and recover "
                      f"{both(d.sort_values('init_mean').object_acc_last)}: the setting is not identified by the objects it reads."
                      for n, d in known[known.paper_objects > n_read].groupby("paper_objects"))
            + (f" Over the {len(kept)} models whose fits hold (held-out R^2 at least 0.80: the {', '.join(sound)} models), a "
               f"subset chosen after seeing the fits, r = {held['r']:.2f} [{held['r_low']:.2f}, {held['r_high']:.2f}]."
               if held else "") + at_400(folder))
    return "\n".join(out)


def at_400(folder: Path) -> str:
    "The authors' protocol at their 400 objects over the models studied again (`controls_paper400/`), where it was run."
    path = folder / "controls_paper400" / "fig9_statistics.csv"
    if not path.is_file(): return ""
    t = pd.read_csv(path).set_index(["protocol", "form"]).loc[("paper", "global_product")]
    return (f" At their {PAPER_OBJECTS} objects, on the {int(t.n_models)} models studied again with controls "
            f"(`controls_paper400/`): r = {t.r:.2f} [{t.r_low:.2f}, {t.r_high:.2f}] (resampling the architectures, "
            f"[{t.r_low_cluster:.2f}, {t.r_high_cluster:.2f}]).")


def study_readme(folder: Path) -> str:
    "The study folder's README, from its files and its hand-written `provenance.md`."
    points = study_points(folder)
    stats = statistics(points)
    n = int(stats.set_index(["protocol", "form"]).n_models[("ours", "global_product")])
    return "\n\n".join([
        f"# results/learned/fig9_study: Fig. 9 on {n} models",
        (folder / "provenance.md").read_text().strip(),
        "## Files\n\n" + files_table(folder),
        "## Fig. 9's statistics\n\nPer protocol and form, computed from the points here as 06b computes them (" + f"{N_BOOT:,}"
        + " bootstrap resamples and permutations, seed 0); 06b renders the same numbers.\n\n" + statistics_table(stats),
        "## What they support\n\n" + reading(folder, points, stats)]) + "\n"


def write_readme(folder: Path) -> None:
    "Read the authors' fits' regime again with today's rule, and write the README."
    fits = read(folder, "binding_study.csv")
    paper = fits.protocol == "paper"
    if paper.any() and (fits.loc[paper, "regime"] != (now := paper_regime(fits[paper]))).any():
        fits.loc[paper, "regime"] = now
        with atomic_file(folder / "binding_study.csv") as f: fits.to_csv(f, index=False)
    with atomic_file(folder / "README.md") as f: f.write(study_readme(folder).encode())


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run", default="outputs/06_fig9_study81", help="the output_dir of 06's study run")
    p.add_argument("--into", default="results/learned/fig9_study", help="the committed study folder")
    p.add_argument("--readme-only", action="store_true", help="write the README from the folder's files, copying no run")
    a = p.parse_args(argv)
    if a.readme_only:
        into = Path(a.into)
        if not (into / "fig9_points.csv").is_file(): p.error(f"{into} holds no fig9_points.csv: pass the committed study folder")
        if not (into / "provenance.md").is_file(): p.error(f"{into} holds no provenance.md: write how the study was made there first")
        write_readme(into)
        print(f"wrote {into / 'README.md'}")
        return
    run = Path(a.run)
    if not (run / "binding_study.csv").is_file(): p.error(f"{run} holds no binding_study.csv: run 06 into it first, to its end")
    try:
        new = read_csv_named(run / "binding_study.csv", "run 06 into that folder again, to its end")
        into = writable_folder(a.into, "--into", "pass the committed study folder")
        old = read_csv_named(into / "binding_study.csv") if (into / "binding_study.csv").is_file() else new.iloc[:0]
    except (OSError, ValueError) as e: p.error(str(e))
    for name, table in (("the run's", new), ("the committed", old)):
        if "protocol" not in table: p.error(f"{name} binding_study.csv has no protocol column: it is not 06's study table")
    if not (into / "provenance.md").is_file(): p.error(f"{into} holds no provenance.md: write how the study was made there first")
    made = sorted(run.glob("fig9_points*.csv")) + sorted(run.glob("fig9_correlation*.csv"))
    for f in made: shutil.copy(f, into / f.name)
    kept = old[~old.protocol.isin(set(new.protocol))]                       # the protocols this run did not fit
    with atomic_file(into / "binding_study.csv") as f: pd.concat([new, kept], ignore_index=True).to_csv(f, index=False)
    shutil.copy(run / "learned_results.csv", into / "learned_results.csv")
    shutil.copy(run / "models" / "coverage_results.csv", into / "coverage_results.csv")
    write_readme(into)
    print(f"copied {len(made)} point and statistics files; binding_study.csv: {len(new)} rows of this run "
          f"({', '.join(sorted(set(new.protocol)))}) and {len(kept)} kept ({', '.join(sorted(set(kept.protocol))) or 'none'}); "
          f"wrote {into / 'README.md'}")


if __name__ == "__main__":
    main()
