"""The study scripts and the benchmarks refuse a bad command line in one line (exit 2) before any work: no fit, no file written."""
import subprocess, sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

CASES = [
    ("form_recovery.py", ["--workers", "0"], "argument --workers: it must be >= 1, got 0"),
    ("form_recovery.py", ["--lr", "nan"], "argument --lr: it must be a finite number"),
    ("probe_known_codes.py", ["--out", "{tmp}"], "is a folder: name the CSV file to write"),
    ("search_cpu_default.py", ["--only", "nosuch"], "argument --only: invalid choice: 'nosuch'"),
    ("search_binding_levers.py", ["--out", "{tmp}/empty.csv"], "empty.csv cannot be read as a CSV table"),
    ("gpu_coverage_run.py", ["--tiny", "--out", "{tmp}/g", "--budget", "0"], "argument --budget: it must be in (0, inf), got 0"),
    ("collect_fig9_study.py", ["--run", "{tmp}/run", "--into", "{tmp}/into"], "binding_study.csv cannot be read as a CSV table"),
    ("collect_fig9_study.py", ["--readme-only", "--into", "{tmp}/run"], "holds no fig9_points.csv: pass the committed study folder"),
    ("paper_known_answers.py", ["--objects", "1000"], "--objects must be at most 900"),
    ("paper_protocol_study.py", ["--objects", "3", "--into", "{tmp}/i", "--work", "{tmp}/w"], "argument --objects: it must be >= 4, got 3"),
    ("paper_protocol_study.py", ["--controls", "mlp", "--into", "{tmp}/i", "--work", "{tmp}/w"], "--controls ['mlp']: the study fits"),
    ("collect_controls_study.py", ["--folder", "{tmp}/run"], "holds no learned_results.csv"),
    ("form_als_trial.py", ["bogus", "8", "8", "100", "16"], "argument form: invalid choice: 'bogus'"),
    ("../benchmarks/bench_embed.py", ["--batch", "0"], "argument --batch: it must be >= 1, got 0"),
    ("../benchmarks/bench_scenes.py", ["--device", "bogus"], "unknown device 'bogus'"),
    ("../benchmarks/bench_train.py", ["--seconds", "-1"], "argument --seconds: it must be in (0, inf), got -1"),
]


@pytest.mark.parametrize("script, args, message", CASES, ids=[f"{s} {' '.join(a)}" for s, a, _ in CASES])
def test_a_script_refuses_a_bad_command_line_before_any_work(script, args, message, tmp_path):
    (tmp_path / "empty.csv").write_text("")
    (tmp_path / "run").mkdir(); (tmp_path / "run" / "binding_study.csv").write_bytes(b"")
    before = sorted(p.name for p in tmp_path.rglob("*"))
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / script), *(a.format(tmp=tmp_path) for a in args)],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr, out.stderr[-2000:]
    assert sorted(p.name for p in tmp_path.rglob("*")) == before                   # nothing written
