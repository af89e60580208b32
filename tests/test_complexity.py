"""Tests of 04_complexity beyond the notebook's own: the known-answer controls, resume, bad input, one papermill run."""
import json, subprocess, sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from binding_nb.approximators import FAMILIES, fit_approximator, form_embeddings, form_queries, held_out_reference, score_approximator
from binding_nb.complexity import COMPLEXITY_RESULTS, sweep
from binding_nb.sweeps import Cell, fit_cell, grid, holdout_split
from binding_nb.datasets import all_pairs, clevr_space
from binding_nb.geometry import fit_probes, probe_split, scene_table
from binding_nb.scenes import ConceptSpace
from binding_nb.toys import toy_embeddings

torch.set_num_threads(1)   # two threads stall on a busy 2-core machine
NB = Path(__file__).resolve().parents[1] / "nbs" / "04_complexity.ipynb"
SPACE = clevr_space()
GRID = all_pairs(SPACE)


def _pairs(space: ConceptSpace, n: int | None = None) -> np.ndarray:
    pairs = all_pairs(space)
    pairs = pairs[(pairs[..., 0] >= 0).all(1)]
    return pairs if n is None else pairs[np.sort(np.random.default_rng(0).choice(len(pairs), n, replace=False))]


KNOWN_SPACE = ConceptSpace([30, 30])


def _known_scenes(n: int) -> np.ndarray:
    return _pairs(KNOWN_SPACE, n)


def _known_table(form: str, rank: int, n: int, dim: int = 64):
    """A random encoder of exactly `form` (zero-mean tables, rank `rank`) on `n` sampled scenes, its own queries (as 04's
    known answers read a code: exhaustive over the 900 objects), and its split by half the objects."""
    from binding_nb.learned import QueryProbes
    scenes = _known_scenes(n)
    t = scene_table(form_embeddings(KNOWN_SPACE, scenes, form, rank, dim, seed=1), (scenes, KNOWN_SPACE), name=form)
    queries = QueryProbes(KNOWN_SPACE, *(torch.as_tensor(q) for q in form_queries(KNOWN_SPACE, form, rank, dim, seed=1)))
    return t, queries, holdout_split(t, 0.5, seed=1)


def _own_probe(form: str, rank: int, n: int = 20_000, dim: int = 64, init_mean: float = 0.0) -> dict:
    "A random encoder of exactly `form` fitted on the scenes of half its objects by its own probe at its rank, read by its own queries."
    t, probes, sp = _known_table(form, rank, n, dim)
    return fit_cell(t, sp, Cell(form, rank, 1e-2, 0.3, init_mean), probes, 1500, None, 100, "cpu")


@pytest.mark.parametrize("form, rank, n", [("per_object_product_shared", 16, 20_000), ("per_object_product_shared_nosum", 8, 20_000),
                                           ("additive_shared", 16, 20_000)])
def test_each_form_recovers_a_random_encoder_of_its_own_form(form, rank, n):
    "Known answers beyond the page's: the forms without a sum block and with tables shared by the slots, where half the objects determine them."
    r = _own_probe(form, rank, n=n)
    assert r["r2"] > 0.95, r
    assert abs(r["object_acc"] - r["ceiling_object_acc"]) <= 0.05, r


@pytest.mark.slow   # 3 minutes: 12 fits on 20,000 scenes; 04's known answers recover the global product at every rank from the moment start
@pytest.mark.parametrize("form", ["global_product", "global_product_nosum"])
def test_the_global_product_is_recovered_from_enough_scenes_with_its_rank_and_start_chosen_on_validation(form):
    "A product of four zero-mean factors: from 100,000 sampled scenes (20,000 fit scenes), its probe at ranks 8, 16 and 32 from two starts, at learning rate 0.03, chosen by its R^2 on validation objects, recovers a rank-8 encoder; no single rank and start does reliably (results/complexity/form_recovery.csv)."
    t, probes, sp = _known_table(form, 8, 100_000)
    fits = [(rank, start, fit_approximator(form, KNOWN_SPACE, t.values[sp.train], t.emb[sp.train], t.values[sp.val], t.emb[sp.val], capacity=rank,
                                           lr=3e-2, steps=1000, batch_size=None, eval_every=100, seed=start, device="cpu", init=0.3,
                                           init_mean=0.0)) for rank in (8, 16, 32) for start in (0, 1)]
    val = [score_approximator(app, t, sp.val, probes)["r2"] for *_, app in fits]     # validation R^2 chooses
    rank, start, best = fits[int(np.argmax(val))]
    r, ceiling = score_approximator(best, t, sp.test, probes), held_out_reference(t, sp.test, probes)["ceiling_object_acc"]
    assert r["r2"] > 0.95, (rank, start, r, val)
    assert abs(r["object_acc"] - ceiling) <= 0.05, (r, ceiling)


def test_the_additive_probe_reads_a_product_code_as_a_bag_of_concepts():
    t, probes, sp = _known_table("per_object_product_shared", 16, 20_000, 64)
    r = fit_cell(t, sp, Cell("additive", 16, 1e-2, 0.3), probes, 300, None, 100, "cpu")   # from its moment start, the least-squares fit
    assert r["r2"] < 0.9 and r["object_acc"] <= r["bag_of_concepts_acc"], r


@pytest.mark.slow   # a minute: 04a fits every form to a structureless table in seconds, and reads back these fits at 06's sizes
def test_nothing_recovers_a_table():
    scenes = _known_scenes(20_000)
    t = scene_table(toy_embeddings(KNOWN_SPACE, scenes, "table", dim=64, seed=1), (scenes, KNOWN_SPACE), name="table")
    probes = fit_probes(t, *probe_split(t.n, 0.4, 1), device="cpu")
    sp = holdout_split(t, 0.5, seed=1)
    for name in ("per_object_product", "global_product"):
        r = fit_cell(t, sp, Cell(name, 64, 1e-2, 0.3), probes, 1500, None, 100, "cpu")
        assert r["object_acc"] < 0.05 and r["r2"] < 0.05, (name, r)                       # nothing held out is predicted


def test_memorising_fits_are_named_and_warned(tmp_path):
    "A probe that can fit any table of the embeddings' width on the objects it is fitted on (`memorises`: here its free directions per slot, rank and the sum block's sum V_k - C + 1, reach their number) is warned about and marked in the table."
    scenes = all_pairs(SPACE)
    t = scene_table(toy_embeddings(SPACE, scenes, "objects", dim=8), (scenes, SPACE), n_objects=2)
    with pytest.warns(UserWarning, match="can memorise"):
        rows = sweep(t, "toy", [Cell("per_object_product", 1, 1e-2, 0.3), Cell("per_object_product_nosum", 4, 1e-2, 0.3)], [0.5], [0], tmp_path,
                     steps=10, device="cpu", progress=False)
    assert rows.set_index("family").regime.to_dict() == {"per_object_product_nosum": "ok", "per_object_product": "memorises"}   # 4 < 11; 1 + (8 + 3 - 1) = 11
    assert (rows.fit_objects == 11).all()


def test_rows_of_an_earlier_probe_form_are_set_aside_and_refitted(tmp_path):
    "A row written by the probes before they took the paper's form (no form recorded) is never served: set aside, and the setting fitted again."
    scenes = all_pairs(SPACE)
    t = scene_table(toy_embeddings(SPACE, scenes, "objects", dim=8), (scenes, SPACE), n_objects=2)
    cells = [Cell("global_product", 4, 1e-2, 0.3)]
    first = sweep(t, "toy", cells, [0.5], [0], tmp_path, steps=10, device="cpu", progress=False)
    path = COMPLEXITY_RESULTS.path(tmp_path)
    old = COMPLEXITY_RESULTS.read(path).drop(columns=["init", "init_mean", "form", "train_r2", "fit_objects", "regime"])
    old.to_csv(path, index=False)                                    # as the earlier probes wrote it: no form, no initialisation
    with pytest.raises(ValueError, match="lacks the columns init, init_mean, form.*convert_old_runs.py"):
        sweep(t, "toy", cells, [0.5], [0], tmp_path, steps=10, device="cpu", progress=False)
    convert = subprocess.run([sys.executable, str(Path(__file__).parents[1] / "scripts" / "convert_old_runs.py"), str(path)],
                             capture_output=True, text=True, timeout=300)
    assert convert.returncode == 0 and "added init, init_mean, form" in convert.stdout, convert.stderr[-2000:]
    with pytest.warns(UserWarning, match="a form probe of an earlier form"): again = sweep(t, "toy", cells, [0.5], [0], tmp_path, steps=10, device="cpu", progress=False)
    assert len(again) == 1 and again.form.iloc[0] == FAMILIES["global_product"].form.formula
    assert len(list(tmp_path.glob("complexity_results.csv.bad-*"))) == 2              # the old table and the old row kept, beside the table


def test_sweep_resumes_and_trains_nothing_twice(tmp_path, monkeypatch):
    t = scene_table(toy_embeddings(SPACE, GRID, "concepts", dim=16), (GRID, SPACE), n_objects=2, name="toy")
    cells = grid(["mlp", "forest"], widths=[16], lrs=[1e-2], depths=[2])
    first = sweep(t, "toy", cells[:1], [0.5], [0], tmp_path, steps=50, device="cpu", progress=False)   # stopped after one setting
    both = sweep(t, "toy", cells, [0.5], [0], tmp_path, steps=50, device="cpu", progress=False)
    pd.testing.assert_frame_equal(both[both.family == "mlp"].reset_index(drop=True), first, check_dtype=False)
    import binding_nb.sweeps as runner
    monkeypatch.setattr(runner, "fit_approximator", lambda *a, **k: pytest.fail("a finished setting was fitted again"))
    again = sweep(t, "toy", cells, [0.5], [0], tmp_path, steps=50, device="cpu", progress=False)
    pd.testing.assert_frame_equal(again, both)
    assert len(COMPLEXITY_RESULTS.read(tmp_path / "complexity_results.csv")) == 2


def test_bad_input_is_refused_before_any_fit(tmp_path):
    t = scene_table(toy_embeddings(SPACE, GRID, "concepts", dim=8), (GRID, SPACE), n_objects=2)
    cells = grid(["mlp"], widths=[8], lrs=[1e-2])
    with pytest.raises(ValueError, match="leaves no test scene"): sweep(t, "toy", cells, [0.5, 1.0], [0], tmp_path, device="cpu")
    with pytest.raises(ValueError, match="unknown approximator family 'svm'"): sweep(t, "toy", [Cell("svm", 8, 0.1)], [0.5], [0], tmp_path)
    with pytest.raises(ValueError, match="unknown approximator family"): grid(["mlp", "svm"])
    with pytest.raises(ValueError, match="got 599 embeddings for 600 scenes"): scene_table(np.zeros((599, 4)), (GRID, SPACE))
    bad = np.zeros((600, 4)); bad[7, 1] = np.nan
    with pytest.raises(ValueError, match="hold NaN or inf"): scene_table(bad, (GRID, SPACE))
    with pytest.raises(ValueError, match="coverage must be in"): holdout_split(t, 0.0)
    assert not (tmp_path / "complexity_results.csv").exists()            # nothing was fitted or written


def papermill(tmp_path: Path, *params: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "papermill", str(NB), str(tmp_path / "out.ipynb"), "--cwd", str(NB.parent), *params]
    return subprocess.run(cmd, check=True, capture_output=True, text=True)


@pytest.mark.slow
def test_one_run_by_papermill(tmp_path):
    "One small run: the results table, the summary, Fig. 4 as PNG and PDF; a second run fits nothing."
    out = tmp_path / "results"
    params = ["-p", "encoder", "st:all-MiniLM-L6-v2", "-p", "pretrained", "default", "-p", "dataset", "text:4",
              "-p", "coverages", "[0.5]", "-p", "families", '["mlp", "forest"]', "-p", "widths", "[16]", "-p", "lrs", "[0.01]",
              "-p", "depths", "[2]", "-p", "steps", "30", "-p", "output_dir", str(out), "-p", "cache_dir", str(tmp_path / "cache")]
    papermill(tmp_path, *params)
    table = COMPLEXITY_RESULTS.read(out / "complexity_results.csv")
    assert len(table) == 2 and set(table.family) == {"mlp", "forest"} and (table.status == "ok").all()
    assert table[["concept_acc", "object_acc"]].stack().between(0, 1).all()
    for ext in ("png", "pdf"): assert (out / f"fig4_complexity.{ext}").stat().st_size > 0
    assert len(pd.read_csv(out / "complexity_summary.csv")) == 2
    outputs = json.dumps([c.get("outputs", []) for c in json.loads((tmp_path / "out.ipynb").read_text())["cells"]])
    assert "Traceback" not in outputs
    papermill(tmp_path, *params)
    pd.testing.assert_frame_equal(COMPLEXITY_RESULTS.read(out / "complexity_results.csv"), table)


def test_known_codes_script(tmp_path):
    "The form-probe study on known codes, shrunk: one code, every probe, a few steps; a rerun skips the finished rows."
    import subprocess, sys
    out = tmp_path / "known.csv"
    cmd = [sys.executable, str(Path(__file__).parents[1] / "scripts" / "probe_known_codes.py"), "--out", str(out), "--workers", "1",
           "--V", "6", "--n_scenes", "400", "--codes", "zero-mean v, rank 8", "--max_steps", "20"]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    rows = pd.read_csv(out)
    assert len(rows) == 7 and set(rows.family) == {"additive", "mlp", "per_object_product", "per_object_product_shared", "global_product"}   # 8 probes, 2 alike at 20 steps
    assert rows[["concept_acc", "object_acc", "ceiling_object_acc"]].apply(lambda c: c.between(0, 1)).all().all()
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and again.stdout == "" and len(pd.read_csv(out)) == 7


def test_sweep_key_ignores_fitted_numbers(tmp_path):
    "A resumed sweep refits nothing when the probes differ only in their fitted weights (other threads, another device)."
    space = clevr_space()
    scenes = all_pairs(space)
    table = scene_table(toy_embeddings(space, scenes, "objects"), (scenes, space))
    probes = fit_probes(table, *probe_split(table.n, 0.4, 0), device="cpu")
    cells = [Cell("additive", 8, 1e-2)]
    first = sweep(table, "toy", cells, [0.5], [0], tmp_path, probes, steps=20, device="cpu", progress=False)
    nudged = fit_probes(table, *probe_split(table.n, 0.4, 0), device="cpu")
    nudged.weight = nudged.weight * (1 + 1e-6)                     # the same probes, fitted numbers a little apart
    again = sweep(table, "toy", cells, [0.5], [0], tmp_path, nudged, steps=20, device="cpu", progress=False)
    assert len(first) == len(again) == 1 and len(COMPLEXITY_RESULTS.read(COMPLEXITY_RESULTS.path(tmp_path))) == 1
    other = fit_probes(table, *probe_split(table.n, 0.5, 0), device="cpu")   # probes fitted on other scenes: a new row
    sweep(table, "toy", cells, [0.5], [0], tmp_path, other, steps=20, device="cpu", progress=False)
    assert len(COMPLEXITY_RESULTS.read(COMPLEXITY_RESULTS.path(tmp_path))) == 2


@pytest.mark.parametrize("params, message", [
    (dict(coverages="[1.5]"), "coverages[0] must be in (0, 1), got 1.5"),
    (dict(coverages='[0.1, "a"]'), "coverages[1] must be a finite number, got 'a'"),
    (dict(steps=0), "steps must be >= 1"),
    (dict(val_fraction=1.5), "val_fraction must be in (0, 1)"),
    (dict(seeds="[0, -1]"), "seeds[1] must be >= 0"),
    (dict(families="mlp"), """-p families '["mlp"]'"""),
    (dict(threads=2.5), "threads must be a whole number, got 2.5"),
    (dict(dataset="text"), "dataset applies only to one run, named by encoder"),
    (dict(encoder="st:all-MiniLM-L6-v2", n_pairs=2), "n_pairs must be >= 4"),
    (dict(n_pairs=100), "n_pairs applies only to one run, named by encoder"),
    (dict(clip_weights="opneai"), "has no pretrained tag 'opneai'; tags: ['openai',"),
])
def test_every_parameter_is_checked_before_any_work(tmp_path, params, message):
    from conftest import run_parameter_check
    out = tmp_path / "out"
    with pytest.raises((ValueError, TypeError)) as e: run_parameter_check(NB, output_dir=str(out), **params)
    assert message in str(e.value), str(e.value)
    assert not out.exists()                                            # refused before anything was written
    ok = run_parameter_check(NB, output_dir=str(out), cache_dir=str(tmp_path / "cache"), coverages="[0.5]", seeds="[1]", threads=1)
    assert ok["coverages"] == [0.5] and ok["seeds"] == [1] and out.is_dir()


def test_form_recovery_script(tmp_path):
    "The recovery map, shrunk: one form, one rank, one sample, a few steps; a rerun skips the finished rows, also those written before the probe-rank and start columns."
    out = tmp_path / "recovery.csv"
    cmd = [sys.executable, str(Path(__file__).parents[1] / "scripts" / "form_recovery.py"), "--out", str(out), "--workers", "1",
           "--forms", "per_object_product", "--ranks", "8", "--dims", "16", "--scenes", "3000", "--max_steps", "20"]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    rows = pd.read_csv(out)
    assert len(rows) == 1 and rows.steps.iloc[0] == 20 and rows.train_r2.iloc[0] <= 1 and rows.probe_rank.iloc[0] == 8
    rows.drop(columns=["lr", "probe_rank", "start", "val_r2"]).to_csv(out, index=False)       # as the first version of the script wrote it
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and again.stdout == "" and len(pd.read_csv(out)) == 1
    more = subprocess.run(cmd + ["--probe_ranks", "8", "16", "--starts", "0", "1"], capture_output=True, text=True, timeout=300)
    rows = pd.read_csv(out)
    assert more.returncode == 0 and len(rows) == 4 and set(zip(rows.probe_rank, rows.start)) == {(8, 0), (8, 1), (16, 0), (16, 1)}, rows
    assert rows.test_object_acc.notna().all() and rows.ceiling_object_acc.between(0, 1).all(), rows
    rows.drop(columns=["test_object_acc", "ceiling_object_acc", "bag_of_concepts_acc"]).to_csv(out, index=False)   # before recognition was read
    assert subprocess.run(cmd, capture_output=True, text=True, timeout=300).stdout == ""                            # kept as they are
    again = subprocess.run(cmd + ["--recognition"], capture_output=True, text=True, timeout=300)
    rows = pd.read_csv(out)
    assert again.returncode == 0 and len(rows) == 4 and rows.test_object_acc.notna().sum() == 1, rows     # the one row asked for, replaced


def test_known_answers_script_checks_its_command_line_before_any_fit(tmp_path, capsys):
    "`scripts/known_answers.py`: each rank once (--ranks 8 8 fits rank 8 once); an --out that is a folder or sits under a file, --ranks 0 and --workers 0 refused in one line (exit 2) before any fit."
    import importlib.util
    spec = importlib.util.spec_from_file_location("known_answers_script", Path(__file__).parents[1] / "scripts" / "known_answers.py")
    script = importlib.util.module_from_spec(spec); spec.loader.exec_module(script)
    assert script.parse(["--ranks", "16", "8", "8", "--out", str(tmp_path / "k.csv")]).ranks == [8, 16]
    (tmp_path / "a_file").write_text("x")
    for out, message in ((tmp_path, "is a folder: name the CSV file"), (tmp_path / "a_file" / "k.csv", "a_file is a file")):
        with pytest.raises(SystemExit) as e: script.parse(["--out", str(out)])
        assert e.value.code == 2 and message in capsys.readouterr().err
    for args, message in ((["--ranks", "0"], "--ranks must be >= 1, got 0"), (["--workers", "0"], "--workers must be >= 1, got 0")):
        with pytest.raises(SystemExit) as e: script.parse(args + ["--out", str(tmp_path / "k.csv")])
        assert e.value.code == 2 and message in capsys.readouterr().err


def _known_answers_script():
    import importlib.util
    spec = importlib.util.spec_from_file_location("known_answers_script", Path(__file__).parents[1] / "scripts" / "known_answers.py")
    script = importlib.util.module_from_spec(spec); spec.loader.exec_module(script)
    return script


def _known_row(code, rank, family, finish=500, **more) -> dict:
    "A known-answers row with its identity and every metric (0.5)."
    return dict(encoder=f"{code}, rank {rank}" if code else "table", family=family, code=code or "table", code_rank=rank, steps=300,
                finish=finish, status="ok", **{m: 0.5 for m in ("train_r2", "val_r2", "r2", "concept_acc", "object_acc",
                                                               "ceiling_object_acc", "bag_of_concepts_acc")},
                **{c: 1 for c in ("scenes", "capacity", "starts", "seed", "n_train", "n_val", "n_test", "fit_objects")}, **more)


class _FakePool:
    "Fits nothing: records the jobs it is given and answers each with rows of full metrics; `stop_after` jobs, an interrupt."
    def __init__(self, fitted: list, stop_after: int | None = None): self.fitted, self.stop_after = fitted, stop_after
    def __call__(self, *a): return self
    def __enter__(self): return self
    def __exit__(self, *a): return False
    def imap_unordered(self, f, jobs, chunksize=1):
        for i, (c, r, fams) in enumerate(jobs):
            if i == self.stop_after: raise KeyboardInterrupt
            self.fitted.append((c, r, fams)); yield pd.DataFrame([_known_row(c, r, x) for x in fams])


def test_known_answers_script_keeps_the_rows_it_has(tmp_path, monkeypatch, capsys):
    "`scripts/known_answers.py --ranks 8` onto a file of other ranks keeps them and fits only rank 8's jobs; rows fitted otherwise (another finish) are fitted again."
    from binding_nb.complexity import known_jobs
    script = _known_answers_script()
    have = pd.DataFrame([_known_row(c, r, f) for c, r, fams in known_jobs([16, 32]) for f in fams])
    assert script.todo(known_jobs([16, 32]), have) == []                                     # all there: nothing to fit
    assert script.todo(known_jobs([8, 16]), have) == known_jobs([8])                          # rank 8 only
    from binding_nb.complexity import code_solver                                            # each code's own finish: the separated code's 2,000
    at64 = pd.DataFrame([_known_row(c, r, f, finish=code_solver(c)["finish"]) for c, r, fams in known_jobs([64]) for f in fams])
    assert script.todo(known_jobs([64]), at64) == [] and ("separated_global_product", 64) in [j[:2] for j in known_jobs([64])]
    assert [j[0] for j in script.todo(known_jobs([64]), at64.assign(finish=500))] == ["separated_global_product"]
    stale = have.assign(finish=np.where(have.code == "additive", 50, 500))                    # the additive code's rows fitted with another finish
    assert [j[0] for j in script.todo(known_jobs([16]), stale)] == ["additive"]
    out = tmp_path / "k.csv"; script.KNOWN_ANSWERS.write(have, out)
    fitted = []
    monkeypatch.setattr(script.mp, "get_context", lambda *_: type("Ctx", (), {"Pool": _FakePool(fitted)})())
    script.main(["--ranks", "8", "16", "32", "--out", str(out), "--workers", "1"])
    assert fitted == known_jobs([8])
    got = pd.read_csv(out)
    assert len(got) == len(have) + sum(len(f) for *_, f in known_jobs([8])) and not got.duplicated(["encoder", "code_rank", "family"]).any()
    script.KNOWN_ANSWERS.write(stale, out); fitted.clear()                                            # a job fitted again replaces its rows
    script.main(["--ranks", "16", "--out", str(out), "--workers", "1"])
    got = pd.read_csv(out)
    assert [j[0] for j in fitted] == ["additive"] and len(got) == len(stale) and (got[got.code_rank == 16].finish == 500).all()


def test_known_answers_script_keeps_finished_jobs_and_refits_a_cut_row(tmp_path, monkeypatch):
    "Interrupted after 3 jobs, --out holds those jobs' rows; a row cut after its key columns is set aside and its job fitted again."
    from binding_nb.complexity import known_jobs
    script, out, fitted = _known_answers_script(), tmp_path / "k.csv", []
    monkeypatch.setattr(script.mp, "get_context", lambda *_: type("Ctx", (), {"Pool": _FakePool(fitted, stop_after=3)})())
    with pytest.raises(KeyboardInterrupt): script.main(["--ranks", "8", "--out", str(out), "--workers", "1"])
    got = pd.read_csv(out)
    assert len(fitted) == 3 and len(got) == sum(len(f) for *_, f in fitted)
    text = out.read_text().splitlines()
    cut = text[1].split(",")
    out.write_text("\n".join([text[0], ",".join(cut[:6])] + text[2:]) + "\n")                 # the first row cut after its key columns
    first = pd.read_csv(out).iloc[0]
    fitted.clear()
    monkeypatch.setattr(script.mp, "get_context", lambda *_: type("Ctx", (), {"Pool": _FakePool(fitted)})())
    with pytest.warns(UserWarning, match="damaged"):
        script.main(["--ranks", "8", "--out", str(out), "--workers", "1"])
    assert (first.encoder, first.family) in {(f"{c}, rank {r}" if c else "table", x) for c, r, fams in fitted for x in fams}
    got = pd.read_csv(out)
    assert len(got) == sum(len(f) for *_, f in known_jobs([8])) and got[list(script.METRICS)].notna().all().all()


def test_structureless_script_appends_as_fits_finish_and_refits_a_cut_row(tmp_path, monkeypatch):
    "`scripts/structureless_tables.py`: interrupted after 2 fits, --out holds their 2 rows; a row cut short is set aside and fitted again; bad arguments are refused before any fit."
    import importlib.util
    spec = importlib.util.spec_from_file_location("structureless_script", Path(__file__).parents[1] / "scripts" / "structureless_tables.py")
    script = importlib.util.module_from_spec(spec); spec.loader.exec_module(script)
    out, fitted = tmp_path / "s.csv", []
    row = lambda job: dict(zip(script.KEY, job), rank=64, dim=64, starts=1, moment=False, finish=0, fit_objects=10, n_train=100,
                           train_r2=0.5, val_r2=0.1, test_r2=0.0, free_directions=5, flagged=np.False_, flagged_by_directions=False, wall_s=1.0)
    class Pool:
        def __init__(self, stop_after=None): self.stop_after = stop_after
        def __call__(self, *a): return self
        def __enter__(self): return self
        def __exit__(self, *a): return False
        def imap_unordered(self, f, jobs):
            for i, job in enumerate(jobs):
                if i == self.stop_after: raise KeyboardInterrupt
                fitted.append(job); yield row(job)
    argv = ["--out", str(out), "--forms", "additive", "global_product", "--settings", "ours", "authors", "--paper_objects", "300"]
    monkeypatch.setattr(script.mp, "get_context", lambda *_: type("Ctx", (), {"Pool": Pool(stop_after=2)})())
    with pytest.raises(KeyboardInterrupt): script.main(argv)
    assert len(pd.read_csv(out)) == 2 == len(fitted)
    lines = out.read_text().splitlines()
    out.write_text("\n".join(lines[:2] + [lines[2][:12]]) + "\n")          # the second row cut after its first columns
    fitted.clear()
    monkeypatch.setattr(script.mp, "get_context", lambda *_: type("Ctx", (), {"Pool": Pool()})())
    with pytest.warns(UserWarning, match="damaged"): script.main(argv)
    got = pd.read_csv(out)
    assert len(fitted) == 3 and len(got) == 4 and got.train_r2.notna().all() and set(got.flagged) == {False}
    for bad, message in ((["--workers", "0"], "--workers must be >= 1"), (["--paper_objects", "2"], "--paper_objects must be >= 4"),
                         (["--out", str(tmp_path)], "is a folder")):
        with pytest.raises(SystemExit) as e: script.parse(bad)
        assert e.value.code == 2
