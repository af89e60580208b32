"""Tests of 06_learned_binding beyond the notebook's own: agreement with §5.2's evaluation, resume after a failure, parameters checked first."""
import json, subprocess, sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

import binding_nb.learned as learned
import binding_nb.study as study
import binding_nb.sweeps as sweeps
from binding_nb.sweeps import Cell
from binding_nb.learned import LEARNED_RESULTS, fit_binding, known_binding, learned_binding
from binding_nb.study import binding_study
from binding_nb.scenes import ConceptSpace
from binding_nb.checkpoints import load_model
from binding_nb.train import train_run
from binding_nb.evaluation import evaluate
from binding_nb.config import run_config, with_architecture

torch.set_num_threads(1)   # two threads stall on a busy 2-core machine
NB = Path(__file__).resolve().parents[1] / "nbs" / "06_learned_binding.ipynb"


pytestmark = pytest.mark.xdist_group("learned")   # its module fixture is built once, on one worker

@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    path = tmp_path_factory.mktemp("model") / "tiny.pt"
    cfg = with_architecture(run_config(C=2, V=6, coverage=0.5, steps=200, eval_every=100, ckpt_every=200, n_test_scenes=128, device="cpu"),
                            "product-independent")
    train_run(cfg, path, progress=False)
    return path


def test_query_probes_agree_with_the_training_evaluation(tiny_model):
    "The model's own recognition read through its binding function equals §5.2's exhaustive evaluation of the same scenes."
    lb = learned_binding(tiny_model, device="cpu")
    model, cfg = load_model(tiny_model, "cpu")
    rows = np.flatnonzero(np.isin(lb.table.ids, lb.model_heldout).all(1))
    ours = lb.probes.accuracy(lb.table.emb[rows], lb.table.values[rows])
    theirs = evaluate(model, cfg.space, torch.as_tensor(lb.table.values[rows]), max_objects=2, hard=False)
    assert len(rows) > 50
    np.testing.assert_allclose([ours["concept"], ours["object"]], [theirs["concept_acc"], theirs["object_acc"]], atol=1e-6)


def test_a_failed_fit_loses_nothing_and_resumes(tmp_path, monkeypatch):
    "A fit that raises part-way leaves the finished rows on disk; the rerun fits only what is missing."
    lb = known_binding(ConceptSpace([8, 8]), "bag", rank=16)
    cells = [Cell("additive", 8, 1e-2), Cell("global_product", 8, 1e-2), Cell("mlp", 16, 1e-2)]
    real, calls = sweeps.fit_approximator, []
    def flaky(name, *args, **kw):
        calls.append(name)
        if len(calls) == 2: raise RuntimeError("killed")
        return real(name, *args, **kw)
    monkeypatch.setattr(sweeps, "fit_approximator", flaky)
    with pytest.raises(RuntimeError, match="killed"): fit_binding(lb, cells, [0.5], [0], tmp_path, steps=20, eval_every=10, device="cpu", progress=False)
    assert list(LEARNED_RESULTS.read(LEARNED_RESULTS.path(tmp_path)).family) == ["additive"]
    rows = fit_binding(lb, cells, [0.5], [0], tmp_path, steps=20, eval_every=10, device="cpu", progress=False)
    assert calls == ["additive", "global_product", "global_product", "mlp"] and sorted(rows.family) == ["additive", "global_product", "mlp"]


def test_a_hand_edited_or_repeated_row_is_set_aside(tmp_path):
    "A row whose settings no longer match its cell key, and a repeated row, are set aside (the file kept) with a warning; the good row stands."
    lb = known_binding(ConceptSpace([8, 8]), "bag", rank=16)
    cells = [Cell("additive", 8, 1e-2)]
    first = fit_binding(lb, cells, [0.5], [0], tmp_path, steps=20, eval_every=10, device="cpu", progress=False)
    path = LEARNED_RESULTS.path(tmp_path)
    table = LEARNED_RESULTS.read(path)
    LEARNED_RESULTS.write(pd.concat([table.assign(coverage=0.7), table, table], ignore_index=True), path)   # a copy edited, one repeated
    with pytest.warns(UserWarning, match=r"line 2: a coverage other than the one its cell key was made for; line 4: a repeat of line 3"):
        again = fit_binding(lb, cells, [0.5], [0], tmp_path, steps=20, eval_every=10, device="cpu", progress=False)
    assert len(again) == 1 and again.coverage.tolist() == [0.5] and len(list(tmp_path.glob("learned_results.csv.bad-*"))) == 1
    pd.testing.assert_frame_equal(again, first)                                                  # the untouched row stands


def _papermill(tmp_path, *params, timeout=600):
    cmd = [sys.executable, "-m", "papermill", str(NB), str(tmp_path / "out.ipynb"), "--cwd", str(NB.parent), *params]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def test_a_bad_parameter_stops_the_page_under_papermill(tmp_path):
    "Under papermill's kernel a bad parameter fails the run with the check's message, before anything is trained or written (the other cases run in process below)."
    run = _papermill(tmp_path, "-p", "fraction", "1.5", "-p", "output_dir", str(tmp_path / "out"), timeout=180)
    assert run.returncode != 0 and "fraction must be in (0, 1)" in run.stderr, run.stderr[-1500:]
    assert not (tmp_path / "out").exists()                       # nothing trained, nothing written


@pytest.mark.slow
def test_one_study_by_papermill(tmp_path):
    "A small study from an empty folder: the known answers, two models, every figure and table; a rerun fits nothing."
    out = tmp_path / "results"
    params = ["-p", "V", "6", "-p", "architectures", '["product-shared", "product-independent"]', "-p", "coverages", "[0.5]",
              "-p", "train_steps", "200", "-p", "n_scenes", "None", "-p", "widths", "[16]", "-p", "forms", '["global_product"]', "-p", "probe_steps", "40",
              "-p", "output_dir", str(out), "-p", "cache_dir", str(tmp_path / "cache")]
    run = _papermill(tmp_path, *params, timeout=900)
    assert run.returncode == 0, run.stderr[-2000:]
    table = LEARNED_RESULTS.read(out / "learned_results.csv")
    assert len(table) == 2 * (1 + 1) and set(table.family) == {"mlp", "global_product"}   # per model: an MLP, the global product (one random start, 06's default)
    for name in ("fig7_complexity", "fig8_forms", "fig9_form_vs_generalisation"):
        for ext in ("png", "pdf"): assert (out / f"{name}.{ext}").stat().st_size > 0
    assert "Traceback" not in json.dumps([c.get("outputs", []) for c in json.loads((tmp_path / "out.ipynb").read_text())["cells"]])
    assert _papermill(tmp_path, *params, timeout=900).returncode == 0
    assert len(LEARNED_RESULTS.read(out / "learned_results.csv")) == 4


@pytest.mark.parametrize("params, message", [
    (dict(fraction=1.5), "fraction must be in (0, 1)"),
    (dict(n_scenes=0), "n_scenes"),
    (dict(model_dirs='["/nonexistent/coverage"]'), "holds no coverage_results.csv"),
    (dict(architectures='["mlp"]'), "architecture must be one of"),
    (dict(V=10, fraction=0.999), "leaves none of the 100 objects"),
    (dict(probe_lr=0), "probe_lr must be in (0, inf), got 0"),
    (dict(threads=2.5), "threads must be a whole number, got 2.5"),
    (dict(widths='[32, "a"]'), "widths[1] must be a whole number"),
    (dict(ranks="[0]"), "rank of additive must be >= 1"),
    (dict(init_means="[]"), "inits and init_means must each hold a value"),
    (dict(architectures="[]", model_dirs="[]"), "no model to study"),
    (dict(val_fraction=0), "val_fraction must be in (0, 1), got 0"),
    (dict(seeds="[]"), "seeds holds no approximator split"),
    (dict(paper_objects=2), "paper_objects (the objects the authors' protocol reads) must be >= 4, got 2"),
    (dict(paper_objects=400, paper_forms='["mlp"]'), "the authors' protocol fits form probes; ['mlp'] are none"),
    (dict(paper_steps=0), "paper_steps must be >= 1, got 0"),
    (dict(paper_objects=16, paper_forms="[]"), "paper_forms is empty"),
    (dict(forms="[]", mlps="[]"), "no approximator family given"),
    (dict(controls='["mlp"]'), "controls ['mlp'] are not form probes"),
    (dict(moment="yes"), "moment must be True or False"),
])
def test_every_parameter_is_checked_in_process(tmp_path, params, message):
    "The cheap cases of the parameter check, run as papermill would run it, without a kernel: refused before anything is written."
    from conftest import run_parameter_check
    with pytest.raises((ValueError, TypeError, FileNotFoundError)) as e: run_parameter_check(NB, output_dir=str(tmp_path / "out"), **params)
    assert message in str(e.value), str(e.value)
    assert not (tmp_path / "out").exists()


def test_a_probe_that_can_memorise_is_warned_before_any_training(tmp_path):
    "At V = 6 and a fraction of 0.5, rank 64 reaches the 16 objects a probe is fitted on: the parameter check warns, names the form and the count."
    from conftest import run_parameter_check
    with pytest.warns(UserWarning, match=r"per_object_product rank 64, C=2, V=6, fraction 0.5: 16 fit objects"):
        run_parameter_check(NB, output_dir=str(tmp_path / "out"), V=6, forms='["per_object_product"]', ranks="[64]")


def test_a_moved_or_touched_checkpoint_is_not_fitted_again(tiny_model, tmp_path, monkeypatch):
    "The fit key names the checkpoint's contents (its digest), not where it lies or when it was touched: moving a finished study refits nothing and adds no row."
    import os, shutil
    cells = [Cell("additive", 8, 1e-2)]
    first = fit_binding(learned_binding(tiny_model, device="cpu"), cells, [0.5], [0], tmp_path / "out", steps=20, eval_every=10, device="cpu", progress=False)
    moved = tmp_path / "elsewhere" / "renamed.pt"; moved.parent.mkdir(); shutil.copy(tiny_model, moved); os.utime(moved, (1, 1))
    monkeypatch.setattr(sweeps, "fit_approximator", lambda *a, **k: pytest.fail("a finished fit was fitted again"))
    again = fit_binding(learned_binding(moved, name=first.run.iloc[0], device="cpu"), cells, [0.5], [0], tmp_path / "out", steps=20, eval_every=10,
                        device="cpu", progress=False)
    assert len(again) == 1 and len(LEARNED_RESULTS.read(LEARNED_RESULTS.path(tmp_path / "out"))) == 1


def test_one_run_name_holds_one_binding_function(tmp_path):
    "Two different binding functions under one run name are refused, not mixed in one table; the same one again fits nothing."
    space, cells = ConceptSpace([8, 8]), [Cell("additive", 8, 1e-2)]
    fit_binding(known_binding(space, "bag", rank=16), cells, [0.5], [0], tmp_path, steps=20, eval_every=10, device="cpu", progress=False)
    other = known_binding(space, "bag", rank=16, seed=1)                # same name, other embeddings
    with pytest.raises(ValueError, match="one run name must name one"):
        fit_binding(other, cells, [0.5], [0], tmp_path, steps=20, eval_every=10, device="cpu", progress=False)
    again = fit_binding(known_binding(space, "bag", rank=16), cells, [0.5], [0], tmp_path, steps=20, eval_every=10, device="cpu", progress=False)
    assert len(again) == 1 and len(LEARNED_RESULTS.read(LEARNED_RESULTS.path(tmp_path))) == 1


@pytest.mark.parametrize("embed, values, objects, message", [
    (lambda s: np.zeros(len(s), np.float32), np.zeros((16, 4)), np.zeros((64, 4)), r"shape \(4096,\) for 4096 scenes"),
    (lambda s: np.zeros((len(s), 4), np.float32), np.zeros((16, 5)), np.zeros((64, 4)), r"need \{'values': \(16, 4\)"),
    (lambda s: np.zeros((len(s), 4), np.float32), np.zeros((16, 4)), np.zeros((60, 4)), r"got \{'values': \(16, 4\), 'objects': \(60, 4\)\}"),
])
def test_a_binding_function_of_the_wrong_shape_is_refused_clearly(embed, values, objects, message):
    with pytest.raises(ValueError, match=message): learned.binding_of("mine", ConceptSpace([8, 8]), embed, values, objects, "k")


def _nothing_trained(monkeypatch):
    monkeypatch.setattr(study, "run_one", lambda *a, **k: pytest.fail("a model was trained before the study's settings were checked"))


@pytest.mark.parametrize("configs, options, message", [
    ([run_config(C=2, V=6)], dict(device="cuda"), "asks for CUDA but none is available"),
    ([run_config(C=2, V=6)], dict(val_fraction=0), "val_fraction must be in (0, 1)"),
    ([run_config(C=2, V=32)], dict(n_scenes=None), "pass n_scenes"),
    ([run_config(C=2, V=6), run_config(C=2, V=6, max_objects=1)], {}, "two-object scenes"),
    ([run_config(C=2, V=6)], dict(fractions=[0.999]), "leaves no test scene"),
])
def test_a_study_refuses_before_the_first_training(tmp_path, monkeypatch, configs, options, message):
    "binding_study checks the device, every config and every model's approximator splits before it trains the first model."
    if options.get("device") == "cuda" and torch.cuda.is_available(): pytest.skip("this machine has CUDA")
    _nothing_trained(monkeypatch)
    with pytest.raises(ValueError) as e:
        study.binding_study(configs, [Cell("additive", 8, 1e-2)], output_dir=tmp_path / "out", **options)
    assert message in str(e.value), str(e.value)
    assert not (tmp_path / "out").exists()


def test_a_space_too_large_to_enumerate_is_refused_by_the_parameter_check(tmp_path):
    from conftest import run_parameter_check
    with pytest.raises(ValueError, match="pass n_scenes"): run_parameter_check(NB, output_dir=str(tmp_path / "out"), V=32, n_scenes=None)
    assert not (tmp_path / "out").exists()


def test_binding_study_refuses_bad_input_before_training(monkeypatch):
    "A model that is not one, no cells, a cell that is not a Cell, or the authors' protocol with no form: refused before any model trains."
    monkeypatch.setattr(study, "run_one", lambda *a, **k: pytest.fail("a model was trained"))
    cfg = run_config(C=2, V=6, steps=5)
    for args, kw, message in ((["a checkpoint.pt"], {}, "models are RunConfigs to train or TrainedModels"), ([cfg], dict(cells=[]), "no approximator to fit"),
                              ([cfg], dict(cells=[("mlp", 8)]), "cells are Cells"),
                              ([cfg], dict(paper_objects=16, paper_forms=[]), "paper_forms is empty")):
        with pytest.raises((ValueError, TypeError), match=message):
            binding_study(args, kw.pop("cells", [Cell("mlp", 8, 1e-2)]), **kw)


def test_every_input_kind_names_itself_in_the_tables(monkeypatch):
    "model_label asks the input kind for its label: 07's pixels give their level, a kind registered from outside its name (it used to assume a level, and crashed 06 after its fits)."
    import dataclasses
    from binding_nb import inputs
    from binding_nb.study import model_label
    @dataclasses.dataclass(frozen=True)
    class Mine:
        width: int = 3
    monkeypatch.setitem(inputs._INPUT_KINDS, "mine", inputs.InputKind("mine", inputs.input_kind("tokens").towers, Mine))
    cfg = run_config(C=2, V=6)
    assert model_label(cfg) == "transformer"
    assert model_label(cfg.replace(inputs="pixels", input_settings=dict(level=2))) == "pixels L2, transformer"
    assert model_label(with_architecture(cfg, "product-shared").replace(inputs="mine")) == "mine, product-shared"


@pytest.mark.parametrize("params, message", [
    (dict(study_dir="/nowhere/study"), "is not a folder"),
    (dict(n_boot=10), "n_boot must be a whole number of at least 100"),
    (dict(n_boot="many"), "n_boot must be a whole number"),
])
def test_the_fig9_page_checks_its_parameters(tmp_path, params, message):
    "06b's parameter check refuses a study folder that is not one, or holds no points, and a bootstrap too small, before anything is read."
    from conftest import run_parameter_check
    fig9 = Path(__file__).parents[1] / "nbs" / "06b_fig9.ipynb"
    with pytest.raises((ValueError, FileNotFoundError)) as e: run_parameter_check(fig9, **params)
    assert message in str(e.value), str(e.value)
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="holds no fig9_points.csv"): run_parameter_check(fig9, study_dir=str(tmp_path / "empty"))
    (tmp_path / "empty" / "fig9_points.csv").write_text("")                                   # a points file cut to nothing
    with pytest.raises(ValueError, match="fig9_points.csv cannot be read as a CSV table"): run_parameter_check(fig9, study_dir=str(tmp_path / "empty"))
    (tmp_path / "empty" / "fig9_points.csv").write_text("a,b\n1,2\n")                          # a table of something else
    with pytest.raises(ValueError, match="lacks the columns"): run_parameter_check(fig9, study_dir=str(tmp_path / "empty"))


def test_fig9_statistics_of_one_architecture_say_there_is_no_cluster_interval():
    "Models of one architecture: the cluster interval is left empty with a warning, not filled with the plain bootstrap's."
    from binding_nb.fig9 import fig9_statistics
    rng = np.random.default_rng(0)
    own = rng.uniform(0, 1, 12)
    pts = pd.DataFrame(dict(form="global_product", architecture="transformer", model_object_acc=own, object_acc=own + rng.normal(0, 0.1, 12)))
    with pytest.warns(UserWarning, match="of 1 architecture"):
        t = fig9_statistics({"ours": pts}, n_boot=200).iloc[0]
    assert np.isnan(t.r_low_cluster) and np.isnan(t.r_high_cluster) and t.r_low < t.r < t.r_high and t.n_groups == 1
    two = pts.assign(architecture=np.where(np.arange(12) < 6, "transformer", "product-shared"))
    assert np.isfinite(fig9_statistics({"ours": two}, n_boot=200).iloc[0].r_low_cluster)
