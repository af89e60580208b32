"""Tests of 05_coverage beyond the notebook's own: papermill runs and bad input."""
import re, subprocess, sys, time
from pathlib import Path

import pandas as pd
import papermill as pm
import pytest
import torch

from binding_nb.coverage import RESULT_COLUMNS, run_sweep
from binding_nb.train import RunConfig

torch.set_num_threads(1)   # two threads stall on a busy 2-core machine
NB = Path(__file__).resolve().parents[1] / "nbs" / "05_coverage.ipynb"
TINY = dict(V=6, C=2, steps=150, coverages=[0.3, 0.9], seeds=[0])


def papermill(tmp_path: Path, **params) -> Path:
    out = tmp_path / "out.ipynb"
    pm.execute_notebook(str(NB), str(out), parameters=params, cwd=str(NB.parent), kernel_name="python3", progress_bar=False)
    return out


def test_tiny_papermill_run(tmp_path):
    out_dir = tmp_path / "results"
    t0 = time.perf_counter()
    # the command line, verbatim: `-p` hands lists over as text, which the notebook must parse
    cmd = [sys.executable, "-m", "papermill", str(NB), str(tmp_path / "out.ipynb"), "-p", "V", "6", "-p", "C", "2",
           "-p", "steps", "150", "-p", "coverages", "[0.3, 0.9]", "-p", "seeds", "[0]", "-p", "output_dir", str(out_dir)]
    subprocess.run(cmd, check=True, cwd=tmp_path, capture_output=True)
    print(f"tiny papermill run: {time.perf_counter() - t0:.0f} s")
    df = pd.read_csv(out_dir / "coverage_results.csv")
    assert set(RESULT_COLUMNS) <= set(df.columns)
    assert sorted(df.coverage) == [0.3, 0.9] and (df.steps == 150).all() and (df.V == 6).all()
    assert df[["concept_acc", "object_acc", "object_acc_hard", "bag_of_concepts_acc"]].apply(lambda c: c.between(0, 1)).all().all()
    for name in ("fig6_coverage.png", "fig6_coverage.pdf", "coverage_summary.csv"):
        assert (out_dir / name).stat().st_size > 0, name
    assert len(list((out_dir / "checkpoints").glob("*.pt"))) == 2


@pytest.mark.slow
def test_finished_runs_are_not_retrained(tmp_path):
    out_dir = tmp_path / "results"
    papermill(tmp_path, output_dir=str(out_dir), **TINY)
    before = pd.read_csv(out_dir / "coverage_results.csv")
    stamps = {p: p.stat().st_mtime_ns for p in (out_dir / "checkpoints").glob("*.pt")}
    papermill(tmp_path, output_dir=str(out_dir), **TINY)
    pd.testing.assert_frame_equal(pd.read_csv(out_dir / "coverage_results.csv"), before)
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps


@pytest.mark.parametrize("params, message", [
    (dict(V=1), "V (values per concept) must be an integer >= 2"),
    (dict(coverages=[0.5, 1.5]), "coverage must be in (0, 1]"),
    (dict(device="tpu7"), "pass 'auto', 'cpu', 'cuda'"),
])
def test_bad_input_fails_at_once(tmp_path, params, message):
    out_dir = tmp_path / "results"; out_dir.mkdir()
    keep = out_dir / "coverage_results.csv"; keep.write_text("precious,results\n1,2\n")
    t0 = time.perf_counter()
    with pytest.raises(pm.PapermillExecutionError) as e:
        papermill(tmp_path, output_dir=str(out_dir), **{**TINY, **params})
    assert message in str(e.value)
    assert time.perf_counter() - t0 < 60                       # nothing was trained
    assert keep.read_text() == "precious,results\n1,2\n"       # nothing the user had was touched
    assert sorted(p.name for p in out_dir.iterdir()) == ["coverage_results.csv"]


@pytest.mark.parametrize("change, message", [
    (dict(C=0), "C (number of concepts) must be an integer >= 1"),
    (dict(coverages=[0.0]), "coverage must be in (0, 1]"),
    (dict(steps=0), "steps must be an integer >= 1"),
    (dict(V=2.5), "V (values per concept) must be an integer >= 2"),
])
def test_bad_sweep_input_in_process(tmp_path, change, message):
    "The same checks without a kernel: `run_sweep` refuses before it creates or writes anything."
    args = {**dict(C=2, V=6, coverages=[0.5], steps=10), **change}
    base = RunConfig(steps=args.pop("steps"))
    with pytest.raises(ValueError, match=re.escape(message)):
        run_sweep(base, [[args["C"], args["V"]]], args["coverages"], [0], tmp_path / "new")
    assert not (tmp_path / "new").exists()


def test_output_dir_that_is_a_file(tmp_path):
    f = tmp_path / "results.txt"; f.write_text("keep me")
    with pytest.raises(pm.PapermillExecutionError) as e:
        papermill(tmp_path, output_dir=str(f), **TINY)
    assert "is a file, not a folder" in str(e.value)
    assert f.read_text() == "keep me"
