"""Tests of 05_coverage beyond the notebook's own: papermill runs and bad input."""
import json, math, re, subprocess, sys, textwrap, time
import warnings
from pathlib import Path

import pandas as pd
import papermill as pm
import pytest
import torch

from binding_nb.train import train_run
from binding_nb.evaluation import COVERAGE_RESULTS, diverged_row, METRICS, SPLIT_METRICS
from binding_nb.coverage import check_eval_memory, eval_memory, run_sweep, summarize_coverage
from binding_nb.loop import TrainingDiverged
from binding_nb.config import run_config

torch.set_num_threads(1)   # two threads stall on a busy 2-core machine
NB = Path(__file__).resolve().parents[1] / "nbs" / "05_coverage.ipynb"
TINY = dict(V=6, C=2, steps=150, coverages=[0.3, 0.9], seeds=[0])


PLATEAU = NB.parent / "05a_plateau.ipynb"


def papermill(tmp_path: Path, nb: Path = NB, **params) -> Path:
    out = tmp_path / "out.ipynb"
    pm.execute_notebook(str(nb), str(out), parameters=params, cwd=str(nb.parent), kernel_name="python3", progress_bar=False)
    return out


def check_cell(nb: Path) -> int:
    "The index, in papermill's output, of the cell right after the parameters (papermill inserts its own cell between)."
    cells = json.loads(nb.read_text())["cells"]
    return next(i for i, c in enumerate(cells) if "parameters" in c["metadata"].get("tags", [])) + 2


def test_tiny_papermill_run(tmp_path):
    out_dir = tmp_path / "results"
    t0 = time.perf_counter()
    # the command line, verbatim: `-p` hands lists over as text, which the notebook must parse
    cmd = [sys.executable, "-m", "papermill", str(NB), str(tmp_path / "out.ipynb"), "-p", "V", "6", "-p", "C", "2",
           "-p", "steps", "150", "-p", "coverages", "[0.3, 0.9]", "-p", "seeds", "[0]", "-p", "output_dir", str(out_dir)]
    subprocess.run(cmd, check=True, cwd=tmp_path, capture_output=True)
    print(f"tiny papermill run: {time.perf_counter() - t0:.0f} s")
    df = pd.read_csv(out_dir / "coverage_results.csv")
    assert set(COVERAGE_RESULTS.columns) <= set(df.columns)
    assert sorted(df.coverage) == [0.3] * 3 + [0.9] * 3 and (df.steps == 150).all() and (df.V == 6).all()
    assert df.model_key.nunique() == 3                                # the three architectures of Fig. 6, one setting each
    assert df[["concept_acc", "object_acc", "object_acc_hard", "bag_of_concepts_acc"]].apply(lambda c: c.between(0, 1)).all().all()
    for name in ("fig6_coverage.png", "fig6_coverage.pdf", "coverage_summary.csv"):
        assert (out_dir / name).stat().st_size > 0, name
    assert len(list((out_dir / "checkpoints").glob("*.pt"))) == 6
    text = (tmp_path / "out.ipynb").read_text()
    assert "IProgress" not in text and "\\u001b[A" not in text       # plain progress bars: no widget warning, no nested-bar escapes



def test_finished_and_diverged_rows_have_the_table_columns(tmp_path):
    "A finished run's row and a diverged run's: exactly the table's columns (a run's row, then the swap breakdown), in its order."
    cfg = run_config(V=4, steps=20, batch_size=32, d_model=16, n_layers=1, eval_every=10, ckpt_every=10, n_val_scenes=32, n_test_scenes=64,
                    device="cpu")
    columns = list(COVERAGE_RESULTS.columns)                      # a run's row, then its swap breakdown
    rows = [train_run(c, progress=False) for c in (cfg, cfg.replace(coverage=1.0))]   # coverage 1: no swap measured
    rows.append(diverged_row(cfg.replace(seed=1), TrainingDiverged(3, float("nan"))))
    for row, status in zip(rows, ["ok", "ok", "diverged"]):
        assert list(row) == columns and row["status"] == status
    assert not math.isnan(rows[0]["seen_swap_frac"]) and all(math.isnan(rows[1][m]) for m in SPLIT_METRICS)
    assert all(math.isnan(rows[2][m]) for m in METRICS + SPLIT_METRICS + ["train_seconds", "val_object_acc", "val_concept_acc"])
    for row in rows: COVERAGE_RESULTS.append(tmp_path / "coverage_results.csv", row)
    table = COVERAGE_RESULTS.read(tmp_path / "coverage_results.csv")
    assert list(table.columns) == columns and table.status.tolist() == ["ok", "ok", "diverged"]

@pytest.mark.slow
def test_finished_runs_are_not_retrained(tmp_path):
    out_dir = tmp_path / "results"
    papermill(tmp_path, output_dir=str(out_dir), **TINY)
    before = pd.read_csv(out_dir / "coverage_results.csv")
    stamps = {p: p.stat().st_mtime_ns for p in (out_dir / "checkpoints").glob("*.pt")}
    papermill(tmp_path, output_dir=str(out_dir), **TINY)
    pd.testing.assert_frame_equal(pd.read_csv(out_dir / "coverage_results.csv"), before)
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps


def _precious_output_dir(tmp_path: Path) -> Path:
    "An output folder that already holds a user's table."
    out_dir = tmp_path / "results"; out_dir.mkdir()
    (out_dir / "coverage_results.csv").write_text("precious,results\n1,2\n")
    return out_dir


def _untouched(out_dir: Path) -> bool:
    return sorted(p.name for p in out_dir.iterdir()) == ["coverage_results.csv"] and \
        (out_dir / "coverage_results.csv").read_text() == "precious,results\n1,2\n"


def test_bad_input_fails_at_once(tmp_path):
    "Under papermill's kernel a bad parameter fails the run in the check right after the parameters, and what the user had is untouched."
    out_dir = _precious_output_dir(tmp_path)
    with pytest.raises(pm.PapermillExecutionError) as e:
        papermill(tmp_path, output_dir=str(out_dir), **{**TINY, "V": 1})
    assert "V (values per concept) must be >= 2, got 1" in str(e.value)
    assert e.value.cell_index == check_cell(NB), e.value.cell_index   # the check right after the parameters: nothing trained
    assert _untouched(out_dir)


@pytest.mark.parametrize("params, message", [
    (dict(V=1), "V (values per concept) must be >= 2, got 1"),
    (dict(coverages=[0.5, 1.5]), "coverage must be in (0, 1]"),
    (dict(device="tpu7"), "pass 'auto', 'cpu', 'cuda'"),
    (dict(architectures=["transformer", "lstm"]), "architecture must be one of"),
    (dict(threads=2.5), "threads must be a whole number, got 2.5"),
    (dict(C=6, V=50), "GiB of memory, but"),                   # |O| = 50**6: about 100,000 GiB to evaluate, on any machine
])
def test_bad_input_leaves_what_the_user_had(tmp_path, params, message):
    "Each case of the check, run as papermill runs the page through its check cell: refused there, and a folder's table untouched."
    from conftest import run_parameter_check
    out_dir = _precious_output_dir(tmp_path)
    with pytest.raises((ValueError, TypeError)) as e: run_parameter_check(NB, output_dir=str(out_dir), **{**TINY, **params})
    assert message in str(e.value), str(e.value)
    assert _untouched(out_dir)


@pytest.mark.parametrize("params, message", [
    (dict(threads=-1), "threads must be >= 0, got -1"),
    (dict(lr="fast"), "lr must be a finite number, got 'fast'"),
    (dict(product_lr=0), "product_lr must be in (0, inf), got 0"),
    (dict(rank=0, architectures=["transformer"]), "rank must be >= 1, got 0"),
    (dict(spaces=[[2]]), "spaces[0] must be a pair [C, V]"),
    (dict(coverages=[True]), "coverages[0] must be a finite number, got True"),
    (dict(seeds=[0.5]), "seeds[0] must be a whole number, got 0.5"),
    (dict(n_test_scenes=0), "n_test_scenes must be >= 1, got 0"),
    (dict(slurm_partition=5), "slurm_partition must be text, got 5"),
    (dict(executor="pbs"), "executor must be one of none, local, slurm, got 'pbs'"),
])
def test_every_parameter_is_checked_in_the_check_cell(tmp_path, params, message):
    "The other cases of the check, run as papermill runs it (the cells through the one after the parameters) without a kernel."
    from conftest import run_parameter_check
    out_dir = tmp_path / "results"
    with pytest.raises((ValueError, TypeError)) as e: run_parameter_check(NB, output_dir=str(out_dir), **{**TINY, **params})
    assert message in str(e.value), str(e.value)
    assert not out_dir.exists()                                # nothing written


def test_an_empty_output_dir_is_refused_before_anything_is_written(tmp_path, monkeypatch):
    "-p output_dir '' would write the table, checkpoints and figures into the working directory."
    from conftest import run_parameter_check
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="output_dir is empty"): run_parameter_check(NB, output_dir="", **TINY)
    assert list(tmp_path.iterdir()) == []


def test_an_output_dir_below_a_file_is_refused_before_anything_is_written(tmp_path):
    "-p output_dir <file>/sub used to pass the check, then fail in mkdir with a raw traceback once the sweep began."
    from conftest import run_parameter_check
    f = tmp_path / "results.txt"; f.write_text("keep me")
    for out in (f / "sub", f / "sub" / "deeper"):
        with pytest.raises(ValueError, match=re.escape(f"{str(f)!r} on its path is a file, not a folder")):
            run_parameter_check(NB, output_dir=str(out), **TINY)
        with pytest.raises(ValueError, match="on its path is a file"): run_sweep(run_config(steps=10), [[2, 6]], [0.5], seeds=[0], output_dir=out)
    assert f.read_text() == "keep me" and list(tmp_path.iterdir()) == [f]


def test_eval_memory_estimate():
    "`evaluate` scores chunks of 512 scenes against all V**C objects: 13 bytes a (scene, object) pair, plus per-object arrays."
    main = run_config(C=2, V=50)                                # the main job: about 17 MB
    assert eval_memory(main) == 2500 * (512 * 13 + 4 * 64 + 40) and check_eval_memory([main], available=2 ** 30) == eval_memory(main)
    assert eval_memory(run_config(C=2, V=50, n_val_scenes=64, n_test_scenes=100)) == 2500 * (100 * 13 + 4 * 64 + 40)
    assert eval_memory(run_config(C=4, V=50)) == 50 ** 2 * eval_memory(main)                 # grows as V**C
    with pytest.raises(ValueError, match=r"would need about 40\.5 GiB of memory, but 16\.0 GiB is available.*lower V or C"):
        check_eval_memory([run_config(C=4, V=50)], available=16 * 2 ** 30)
    three = [run_config(C=3, V=50, seed=s) for s in range(3)]   # 0.8 GiB each
    assert check_eval_memory(three, available=2 ** 30) == eval_memory(three[0])           # in process: one run at a time
    with pytest.raises(ValueError, match=r"about 2\.4 GiB .* 3 runs at once.*one at a time"):
        check_eval_memory(three, available=2 ** 30, at_once=3)                          # local jobs: side by side
    with pytest.raises(ValueError, match=r"about 1\.6 GiB .* 2 runs at once.*workers 1"):
        check_eval_memory(three, available=2 ** 30, at_once=2)                          # two workers: the two largest


def test_a_sweep_too_large_to_evaluate_is_refused_in_the_check_cell(tmp_path):
    "-p C 4 -p V 50 used to run out of memory once training reached its first evaluation (6.25M objects scored per scene)."
    from conftest import run_parameter_check
    out_dir = tmp_path / "results"
    sixteen = lambda device: 16 * 2 ** 30                      # this machine's free memory, fixed so that the test holds anywhere
    with pytest.raises(ValueError, match=r"would need about 80\.9 GiB of memory, but 16\.0 GiB is available.*"
                                         r"40\.5 GiB per run, 2 runs at once"):                      # two workers
        run_parameter_check(NB, output_dir=str(out_dir), **{**TINY, "C": 4, "V": 50, "available_memory": sixteen})
    with pytest.raises(ValueError, match=r"would need about 40\.5 GiB of memory, but 16\.0 GiB is available"):
        run_parameter_check(NB, output_dir=str(out_dir), **{**TINY, "C": 4, "V": 50, "workers": 1,
                                                            "available_memory": sixteen})
    assert not out_dir.exists()
    ns = run_parameter_check(NB, output_dir=str(out_dir), available_memory=sixteen)   # the defaults: the committed main job
    assert (ns["C"], ns["V"], len(ns["configs"])) == (2, 50, 15) and not out_dir.exists()


@pytest.mark.parametrize("params, message", [
    (dict(threads=2.5), "threads must be a whole number, got 2.5"),
    (dict(threads="two"), "threads must be a whole number, got 'two'"),
    (dict(seeds=[0.5]), "seeds[0] must be a whole number, got 0.5"),
    (dict(seeds=[-1]), "seeds[0] must be >= 0, got -1"),
    (dict(seeds=[]), "seeds must list at least one seed"),
    (dict(steps=0), "steps must be >= 1, got 0"),
    (dict(concept_weights=[1, -0.5]), "concept_weights[1] must be in [0, inf), got -0.5"),
    (dict(concept_weights="[1, 'a']"), "concept_weights[1] must be a finite number, got 'a'"),
])
def test_plateau_bad_parameters_fail_at_once(tmp_path, params, message):
    "05a_plateau checks every parameter in the cell right after them, naming it, before it trains anything."
    from conftest import run_parameter_check
    with pytest.raises((ValueError, TypeError)) as e: run_parameter_check(PLATEAU, **{"steps": 20, **params})
    assert message in str(e.value), str(e.value)


def test_plateau_check_runs_first_under_papermill(tmp_path):
    with pytest.raises(pm.PapermillExecutionError) as e: papermill(tmp_path, PLATEAU, steps=0)
    assert "steps must be >= 1, got 0" in str(e.value) and e.value.cell_index == check_cell(PLATEAU), e.value.cell_index


@pytest.mark.parametrize("change, message", [
    (dict(C=0), "C (number of concepts) must be >= 1, got 0"),
    (dict(coverages=[0.0]), "coverage must be in (0, 1]"),
    (dict(steps=0), "steps must be >= 1, got 0"),
    (dict(V=2.5), "V (values per concept) must be a whole number, got 2.5"),
])
def test_bad_sweep_input_in_process(tmp_path, change, message):
    "The same checks without a kernel: `run_sweep` refuses before it creates or writes anything."
    args = {**dict(C=2, V=6, coverages=[0.5], steps=10), **change}
    with pytest.raises(ValueError, match=re.escape(message)):
        run_sweep(run_config(steps=args.pop("steps")), [[args["C"], args["V"]]], args["coverages"], seeds=[0], output_dir=tmp_path / "new")
    assert not (tmp_path / "new").exists()


def test_output_dir_that_is_a_file(tmp_path):
    from conftest import run_parameter_check
    f = tmp_path / "results.txt"; f.write_text("keep me")
    with pytest.raises(ValueError, match="is a file, not a folder"): run_parameter_check(NB, output_dir=str(f), **TINY)
    assert f.read_text() == "keep me"


def test_help_lists_every_parameter():
    "papermill --help-notebook used to omit spaces, device and threads (their comments held '=') and print 'Unable to parse line'."
    out = subprocess.run([sys.executable, "-m", "papermill", "--help-notebook", str(NB)], capture_output=True, text=True).stdout
    for name in ("V", "C", "spaces", "coverages", "seeds", "steps", "lr", "device", "threads", "output_dir", "executor", "wait",
                 "slurm_partition", "slurm_gpus", "slurm_time", "max_parallel", "slurm_options"):
        assert re.search(rf"^  {name}: ", out, re.M), (name, out)
    assert "Unable to parse" not in out and "Unknown type" not in out


def _tiny(**kw):
    return run_config(steps=20, batch_size=32, d_model=16, n_layers=1, eval_every=10, ckpt_every=10, n_val_scenes=32,
                     n_test_scenes=64, device="cpu", **kw)


def test_concurrent_sweeps_lose_no_row(tmp_path):
    "Two processes sweeping different coverages into one output_dir: every row of both ends up in the table."
    script = textwrap.dedent("""
        import sys, torch
        torch.set_num_threads(1)
        from binding_nb.coverage import run_sweep
        from binding_nb.config import run_config
        base = run_config(steps=40, batch_size=32, d_model=16, n_layers=1, eval_every=20, ckpt_every=20, n_val_scenes=32,
                         n_test_scenes=64, device="cpu")
        run_sweep(base, [[2, 4]], [float(c) for c in sys.argv[2:]], seeds=[0], output_dir=sys.argv[1], progress=False)
    """)
    procs = [subprocess.Popen([sys.executable, "-c", script, str(tmp_path), *covs]) for covs in (["0.25", "0.5"], ["0.75", "1.0"])]
    assert [p.wait(timeout=300) for p in procs] == [0, 0]
    table = COVERAGE_RESULTS.read(tmp_path / "coverage_results.csv")
    assert sorted(table.coverage) == [0.25, 0.5, 0.75, 1.0] and (table.status == "ok").all()


def test_truncated_table_never_yields_a_partial_row(tmp_path):
    "Cut a two-row table at every byte: what loads is always a prefix of the true rows, never a damaged one."
    runs = run_sweep(_tiny(), [[2, 4]], [0.5], seeds=[0, 1], output_dir=tmp_path / "sweep", progress=False)
    raw = (tmp_path / "sweep" / "coverage_results.csv").read_bytes()
    known = lambda r: {k: v for k, v in r.to_dict().items() if v == v}   # NaN != NaN: compare the known values
    truth = [known(r) for _, r in runs.iterrows()]
    for cut in range(len(raw) + 1):
        path = tmp_path / f"cut{cut}.csv"; path.write_bytes(raw[:cut])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try: df = COVERAGE_RESULTS.read(path)
            except ValueError as e:                            # cut inside the header: not recognisable, left untouched
                assert "is not a binding_nb results table" in str(e) and path.read_bytes() == raw[:cut]; continue
        rows = [known(r) for _, r in df.iterrows()]
        assert rows == truth[:len(rows)], cut
        assert summarize_coverage(df).n_seeds.sum() == len(rows)


def test_results_folder_is_never_renamed(tmp_path):
    "`COVERAGE_RESULTS.read(<the output folder>)` used to rename the whole folder, checkpoints included."
    out = tmp_path / "results"; (out / "checkpoints").mkdir(parents=True); (out / "checkpoints" / "run.pt").write_text("x")
    with pytest.raises(ValueError, match="is a folder"):
        COVERAGE_RESULTS.read(out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results"] and (out / "checkpoints" / "run.pt").exists()


@pytest.mark.parametrize("nb", sorted(NB.parent.glob("*.ipynb")), ids=lambda p: p.name)
def test_every_notebook_runs_with_papermill_as_is(nb, caplog):
    """Each notebook names its kernel (papermill needs no -k), and papermill reads every parameter, typed, as `--help-notebook`
    lists them (in process: papermill's own inference; test_help_lists_every_parameter runs the command itself)."""
    content = json.loads(nb.read_text())
    assert content["metadata"].get("kernelspec", {}).get("name") == "python3", nb.name
    if not any("parameters" in c["metadata"].get("tags", []) for c in content["cells"] if c["cell_type"] == "code"): return
    with caplog.at_level("WARNING", logger="papermill"):
        params = pm.inspect_notebook(str(nb))
    assert "Unable to parse" not in caplog.text, caplog.text
    assert params and not [n for n, p in params.items() if p["inferred_type_name"] == "None"], params   # 'Unknown type' in the help


def test_the_page_parameters_that_are_run_settings_default_to_the_config(tmp_path):
    "05's parameters that name a run setting are None (V aside, the main job's 50): the page declares no size of its own, its runs take the library's, and GPU_SCALE, which changes the sizes left at the config's defaults, scales the page's."
    from conftest import run_parameter_check
    from binding_nb.config import RUN_SETTINGS
    page, default = run_parameter_check(NB, output_dir=str(tmp_path / "out")), run_config()
    sizes = {"d_model", "n_layers", "n_heads", "d_out", "steps", "batch_size", "lr", "rank"}
    assert {k: page[k] for k in sizes} == dict.fromkeys(sizes)
    assert {k: getattr(page["base"], k) for k in sizes} == {k: getattr(default, k) for k in sizes}
    shared = sorted(set(page) & set(RUN_SETTINGS) - {"V"} - sizes)
    assert all(page[k] is None or page[k] == getattr(default, k) for k in shared), {k: page[k] for k in shared}
    assert page["V"] == 50 != default.V
    changed = run_parameter_check(NB, output_dir=str(tmp_path / "out"), d_model=32)["base"]
    assert changed.d_model == 32 and changed.n_layers == default.n_layers