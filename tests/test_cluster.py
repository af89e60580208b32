"""The coverage sweep as submitit jobs: local processes for real, Slurm through submitit's own mocks (there is no Slurm here)."""
import contextlib, json, os, signal, subprocess, sys, textwrap, time
from pathlib import Path

import pandas as pd
import pytest
import submitit
import torch
from submitit.core import submission
from submitit.core.utils import DelayedSubmission
from submitit.slurm.test_slurm import get_signal_handler, mock_requeue, mocked_slurm

from binding_nb.jobs import make_executor, run_states, submit_sweep, SweepJob
from binding_nb.coverage import run_sweep, sweep_configs
from binding_nb.evaluation import COVERAGE_RESULTS
from binding_nb import train
from binding_nb.checkpoints import load_checkpoint, read_checkpoint
from binding_nb.train import train_run
from binding_nb.config import run_config

torch.set_num_threads(1)   # two threads stall on a busy 2-core machine
TINY = dict(V=4, batch_size=32, d_model=16, n_layers=1, n_val_scenes=32, n_test_scenes=64, device="cpu")
SWEEP = dict(spaces=[[2, 4]], coverages=[0.5, 0.75], seeds=[0])


def same_table(a: pd.DataFrame, b: pd.DataFrame) -> None:
    "Equal but for the training time."
    pd.testing.assert_frame_equal(a.drop(columns="train_seconds"), b.drop(columns="train_seconds"))


def until(check, what: str, seconds: float = 180):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if (value := check()) is not None and value is not False: return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def children(pid: str) -> list[int]:
    "The processes whose parent is `pid` (Linux)."
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try: fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError: continue
        if fields[1] == pid: out.append(int(stat.parent.name))
    return out


@pytest.fixture
def one_thread_jobs(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")        # the jobs' torch, like this process's


HOLD = textwrap.dedent("""
    import os, time
    from pathlib import Path
    import binding_nb.checkpoints as checkpoints
    _save = checkpoints.save_checkpoint
    def _save_and_hold(path, cfg, model, opt, sched, generator, state, **kw):
        "Save, then hold the run at its first checkpoint after step 0 until the test releases it."
        _save(path, cfg, model, opt, sched, generator, state, **kw)
        gate = Path(os.environ["BINDING_NB_TEST_GATE"])
        if state.step == 0 or (gate / "release").exists(): return
        (gate / f"{Path(path).stem}.held").touch()
        while not (gate / "release").exists(): time.sleep(0.05)
    checkpoints.save_checkpoint = _save_and_hold
""")


def held_jobs_env(gate: Path) -> dict:
    """The environment of a process whose jobs stop at their first checkpoint until `gate`/release exists: a
    `sitecustomize` that each of their Python processes runs first. The test acts on them mid-run however fast the
    machine trains."""
    gate.mkdir(parents=True)
    (gate / "sitecustomize.py").write_text(HOLD)
    path = os.pathsep.join(filter(None, [str(gate), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, "BINDING_NB_TEST_GATE": str(gate)}


@pytest.mark.skipif(not Path("/proc/self").exists(), reason="finds the jobs' training processes through /proc")
def test_local_jobs_match_in_process_after_a_kill_and_a_preemption(tmp_path, one_thread_jobs):
    """Two local jobs at once, submitted by a script that then exits. Mid-run, one is killed and the other preempted (the
    signal Slurm sends): submitit requeues the preempted one, which resumes from its checkpoint. A rerun resubmits only the
    killed one, which resumes too, and the table equals the in-process sweep's."""
    base = run_config(steps=250, eval_every=50, ckpt_every=50, **TINY)
    cfgs = sweep_configs(base, **SWEEP)
    there = tmp_path / "there"
    script = textwrap.dedent(f"""
        from binding_nb.jobs import make_executor
        from binding_nb.jobs import submit_sweep
        from binding_nb.config import run_config
        ex = make_executor("local", {str(there / "jobs" / "submitit")!r}, gpus=0, time_min=10)
        rows = submit_sweep(run_config(steps=250, eval_every=50, ckpt_every=50, **{TINY!r}), **{SWEEP!r}, output_dir={str(there)!r},
                         executor=ex, wait=False, progress=False)
        assert rows.empty                      # returned at once
    """)
    gate = tmp_path / "gate"                # each job stops at its first checkpoint until the test releases it
    subprocess.run([sys.executable, "-W", "ignore", "-c", script], check=True, timeout=120, env=held_jobs_env(gate))
    states = run_states(cfgs, there)
    assert states.state.tolist() == ["in flight"] * 2, states            # jobs of another process, still running
    first, second = states.job_id
    cks = [there / "checkpoints" / f"{c.run_name()}.pt" for c in cfgs]
    try:
        until(lambda: all((gate / f"{ck.stem}.held").exists() for ck in cks), "each run to reach its first checkpoint")
        assert all(0 < read_checkpoint(ck)["step"] < base.steps for ck in cks)          # both mid-run
        for pid in children(first): os.kill(pid, signal.SIGKILL)            # as an out-of-memory killer would
        for pid in children(second): os.kill(pid, submitit.JobEnvironment._usr_sig())  # as Slurm does before preempting
        states = until(lambda: s if (s := run_states(cfgs, there)).state[0] != "in flight" else None,
                       "the killed job to end")
        second_log = Path(json.loads((there / "jobs" / f"{cfgs[1].run_name()}.json").read_text())["stdout"])
        until(lambda: "Calling checkpoint method" in second_log.read_text(), "the preempted job to checkpoint")
    finally: (gate / "release").touch()          # the requeued job trains on to the end; a failed test leaves none held
    assert read_checkpoint(cks[0])["step"] < base.steps
    assert states.state[0] == "failed" and "ended without a result" in states.reason[0], states
    assert Path(states.log[0]).exists() and states.job_id[0] == first

    here = run_sweep(base, **SWEEP, output_dir=tmp_path / "here", progress=False)

    with pytest.warns(UserWarning, match=f"resubmitting 1 run.*{cfgs[0].run_name()} \\(job {first}\\): the job ended without a result"):
        rows = submit_sweep(base, **SWEEP, output_dir=there, progress=False,
                         executor=make_executor("local", there / "jobs" / "submitit", gpus=0, time_min=10))
    same_table(rows, here)
    records = [json.loads((there / "jobs" / f"{c.run_name()}.json").read_text()) for c in cfgs]
    assert records[1]["job_id"] == second and records[1]["earlier"] == []         # requeued by submitit, not resubmitted
    log = Path(records[1]["stdout"]).read_text()
    assert "Calling checkpoint method" in log and f"Requeued job {second}" in log, log
    assert records[0]["job_id"] != first and records[0]["earlier"][0]["job_id"] == first
    assert "ended without a result" in records[0]["earlier"][0]["reason"]
    assert run_states(cfgs, there).state.tolist() == ["finished"] * 2


def gone(pid: int) -> bool:
    "Whether process `pid` has ended (a zombie no one reaps counts as ended)."
    try: return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError: return True


@pytest.mark.skipif(not Path("/proc/self").exists(), reason="finds the job's controller and worker through /proc")
def test_orphaned_worker_of_a_killed_controller_is_in_flight_and_not_resubmitted(tmp_path, one_thread_jobs):
    """A local job's controller is killed (with the kernel that started it) while its worker trains: the worker trains on as
    an orphan and holds the run's checkpoint lock. The run is in flight, and says why; a rerun resubmits nothing. Once the
    worker ends too, without a row, the run is failed."""
    base = run_config(steps=100_000, eval_every=10, ckpt_every=10, **TINY)          # far longer than the test
    cfgs = sweep_configs(base, [[2, 4]], [0.5], [0])
    out = tmp_path / "sweep"
    script = textwrap.dedent(f"""
        from binding_nb.jobs import make_executor, submit_sweep
        from binding_nb.config import run_config
        ex = make_executor("local", {str(out / "jobs" / "submitit")!r}, gpus=0, time_min=10)
        submit_sweep(run_config(steps=100_000, eval_every=10, ckpt_every=10, **{TINY!r}), [[2, 4]], [0.5], seeds=[0], output_dir={str(out)!r},
                     executor=ex, wait=False, progress=False)
    """)
    subprocess.run([sys.executable, "-W", "ignore", "-c", script], check=True, timeout=120)
    controller = run_states(cfgs, out).job_id[0]
    ck = out / "checkpoints" / f"{cfgs[0].run_name()}.pt"
    until(lambda: ck.exists(), "the job's first checkpoint", 120)                   # the worker holds the run's lock
    worker = until(lambda: children(controller), "the job's worker")[0]
    try:
        os.kill(int(controller), signal.SIGKILL)
        until(lambda: gone(int(controller)), "the controller to end", 30)
        assert not gone(worker)                                                    # an orphan, still training
        states = run_states(cfgs, out)
        assert states.state[0] == "in flight", states
        assert "checkpoint lock" in states.reason[0] and "not resubmitted" in states.reason[0], states.reason[0]
        with pytest.warns(UserWarning, match=rf"not resubmitting 1 run.*{cfgs[0].run_name()} \(job {controller}\).*checkpoint lock"):
            submit_sweep(base, [[2, 4]], [0.5], seeds=[0], output_dir=out, executor=make_executor("local", out / "jobs" / "submitit", gpus=0),
                         wait=False, progress=False)
        record = json.loads((out / "jobs" / f"{cfgs[0].run_name()}.json").read_text())
        assert record["job_id"] == controller and record["earlier"] == []          # nothing resubmitted
        assert children(controller) == [worker] or not children(controller)         # the worker's parent is gone
    finally:
        os.kill(worker, signal.SIGKILL)
    until(lambda: gone(worker), "the worker to end", 30)
    states = until(lambda: s if (s := run_states(cfgs, out)).state[0] == "failed" else None, "the lock to be released", 30)
    assert "ended without a result" in states.reason[0]


def test_run_another_process_trains_is_not_submitted(tmp_path):
    "A run with no job whose checkpoint lock another process holds (a notebook training it in-process) is in flight, not submitted."
    cfgs = sweep_configs(run_config(steps=20, eval_every=10, ckpt_every=10, **TINY), [[2, 4]], [0.5], [0])
    out = tmp_path / "sweep"; (out / "checkpoints").mkdir(parents=True)
    lock = out / "checkpoints" / f"{cfgs[0].run_name()}.pt.lock"
    holder = subprocess.Popen([sys.executable, "-c", f"from filelock import FileLock; import time\nwith FileLock({str(lock)!r}):"
                               " print('held', flush=True); time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        states = run_states(cfgs, out)
        assert states.state[0] == "in flight" and "another notebook or script" in states.reason[0], states.reason[0]
        with pytest.warns(UserWarning, match=rf"not resubmitting 1 run.*{cfgs[0].run_name()} \(job none\): a live process holds"):
            submit_sweep(cfgs[0], [[2, 4]], [0.5], seeds=[0], output_dir=out, executor=make_executor("local", out / "jobs" / "submitit", gpus=0),
                         wait=False, progress=False)
        assert not list((out / "jobs").glob("*.json"))                              # nothing submitted
    finally:
        holder.kill(); holder.wait()
    assert run_states(cfgs, out).state.tolist() == ["not submitted"]


@contextlib.contextmanager
def slurm_job_signals():
    "submitit's `process_job` installs a job's signal handlers; put this process's back afterwards."
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGCONT, signal.SIGUSR2)}
    try: yield
    finally:
        for s, h in saved.items(): signal.signal(s, h)


def run_on_slurm(mock, folder: Path, job_id: str) -> None:
    "Run a submitted job in this process as Slurm would on a node, with submitit's own machinery."
    with mock.job_context(job_id), slurm_job_signals(): submission.process_job(folder)


def test_slurm_job_array_dry_run(tmp_path):
    """The sbatch script submitit writes for a sweep (one job array with the partition, GPUs, time and parallelism asked
    for); a rerun submits nothing queued or running; a job Slurm lost is reported with its log and resubmitted."""
    base = run_config(steps=20, eval_every=10, ckpt_every=10, **TINY)
    cfgs = sweep_configs(base, **SWEEP)
    out = tmp_path / "sweep"
    with mocked_slurm() as mock:
        ex = make_executor("slurm", out / "jobs" / "submitit", partition="gpu", gpus=1, time_min=120, max_parallel=1,
                           options="{'account': 'lab', 'cpus_per_task': 4}")
        assert submit_sweep(base, **SWEEP, output_dir=out, executor=ex, wait=False, progress=False).empty
        sbatch = (out / "jobs" / "submitit" / "12_submission.sh").read_text().splitlines()
        for line in ("#SBATCH --partition=gpu", "#SBATCH --gpus-per-task=1", "#SBATCH --time=120", "#SBATCH --array=0-1%1",
                     "#SBATCH --account=lab", "#SBATCH --cpus-per-task=4", "#SBATCH --job-name=binding_nb",
                     "#SBATCH --signal=USR2@90"):
            assert line in sbatch, (line, sbatch)
        assert any("-m submitit.core._submit" in line for line in sbatch)
        states = run_states(cfgs, out)
        assert states.state.tolist() == ["in flight"] * 2 and states.job_id.tolist() == ["12_0", "12_1"]

        assert submit_sweep(base, **SWEEP, output_dir=out, executor=ex, wait=False, progress=False).empty
        assert mock.job_count == 13                                       # queued or running: nothing submitted again

        run_on_slurm(mock, ex.folder, "12_0")                              # task 0 runs; task 1's node dies
        mock.job_sacct = {"12": "JobID|State\n12_0|COMPLETED\n12_1|NODE_FAIL"}
        states = run_states(cfgs, out)
        assert states.state.tolist() == ["finished", "failed"], states
        assert "Slurm state NODE_FAIL" in states.reason[1] and states.log[1].endswith("12_1_0_log.err")
        with pytest.warns(UserWarning, match=r"resubmitting 1 run.*\(job 12_1\).*NODE_FAIL.*12_1_0_log.err"):
            rows = submit_sweep(base, **SWEEP, output_dir=out, executor=ex, wait=False, progress=False)
        assert len(rows) == 1 and mock.job_count == 14
        record = json.loads((out / "jobs" / f"{cfgs[1].run_name()}.json").read_text())
        assert record["job_id"] == "13" and record["earlier"][0]["job_id"] == "12_1"

        run_on_slurm(mock, ex.folder, "13")
        rows = submit_sweep(base, **SWEEP, output_dir=out, executor=ex, wait=False, progress=False)
        assert mock.job_count == 14
    same_table(rows, run_sweep(base, **SWEEP, output_dir=tmp_path / "here", progress=False))


def test_preempted_job_is_requeued_and_resumes(tmp_path, monkeypatch):
    """Slurm signals a job half-way: submitit calls `SweepJob.checkpoint()` and requeues the same run, which resumes from
    the run's checkpoint and ends where an uninterrupted run ends."""
    cfg = run_config(steps=40, eval_every=10, ckpt_every=10, coverage=0.5, C=2, **TINY)
    out = tmp_path / "sweep"
    with mocked_slurm() as mock:
        ex = make_executor("slurm", out / "jobs" / "submitit", time_min=60)
        submit_sweep(cfg, [[2, 4]], [0.5], seeds=[0], output_dir=out, executor=ex, wait=False, progress=False)
        job = submitit.SlurmJob(ex.folder, "12")
        ck = out / "checkpoints" / f"{cfg.run_name()}.pt"
        train_run(cfg, ck, stop_after=20, progress=False)                # what the job had done when the signal came
        with mock.job_context("12"), mock_requeue(called_with=3), pytest.raises(SystemExit):
            get_signal_handler(job).checkpoint_and_try_requeue(signal.SIGUSR2)   # preempted, not timed out: 3 requeues left
        requeued = DelayedSubmission.load(job.paths.submitted_pickle)
        assert isinstance(requeued.function, SweepJob) and requeued.function.cfg == cfg and requeued._timeout_countdown == 3
        assert read_checkpoint(ck)["step"] == 20
        resumed_at = []
        def spy(path, cfg=None):
            ck = load_checkpoint(path, cfg); resumed_at.append(ck and ck["step"]); return ck
        monkeypatch.setattr(train, "load_checkpoint", spy)
        run_on_slurm(mock, ex.folder, "12")                                # the requeued job
        assert resumed_at == [20]
    row = COVERAGE_RESULTS.read(out / "coverage_results.csv").iloc[0].to_dict()
    whole = train_run(cfg, tmp_path / "whole.pt", progress=False)
    assert {k: v for k, v in row.items() if k != "train_seconds"} == {k: v for k, v in whole.items() if k != "train_seconds"}


def test_failed_job_is_reported_with_its_error_and_log(tmp_path, one_thread_jobs):
    "A local job that raises leaves no row: the sweep names the run, its job, the error and the log, and keeps the user's file."
    base = run_config(steps=20, eval_every=10, ckpt_every=10, **TINY)
    cfgs = sweep_configs(base, [[2, 4]], [0.5], [0])
    out = tmp_path / "sweep"
    foreign = out / "checkpoints" / f"{cfgs[0].run_name()}.pt"
    foreign.parent.mkdir(parents=True); foreign.write_text("not a checkpoint")       # the job refuses to touch it
    ex = make_executor("local", out / "jobs" / "submitit", gpus=0, time_min=10)
    with pytest.warns(UserWarning, match=rf"1 of 1 runs failed and have no row: {cfgs[0].run_name()} \(job \d+\): "
                                         rf"ValueError: .*is not a checkpoint written by binding_nb.*\(log: .*_log.err\)"):
        assert submit_sweep(base, [[2, 4]], [0.5], seeds=[0], output_dir=out, executor=ex, progress=False).empty
    states = run_states(cfgs, out)
    assert states.state[0] == "failed" and "is not a checkpoint written by binding_nb" in Path(states.log[0]).read_text()
    assert foreign.read_text() == "not a checkpoint"


def test_executor_input_is_checked_before_anything_is_written(tmp_path):
    with pytest.raises(TypeError, match="make_executor builds one"):
        submit_sweep(run_config(**TINY), **SWEEP, output_dir=tmp_path / "new", executor="slurm")
    with pytest.raises(ValueError, match="executor must be one of none, local, slurm"):
        make_executor("sge", tmp_path / "logs")
    if submitit.SlurmExecutor.affinity() < 0:
        with pytest.raises(ValueError, match="no srun command here"):
            make_executor("slurm", tmp_path / "logs")
    assert not (tmp_path / "new").exists() and not (tmp_path / "logs").exists()


@pytest.mark.slow
def test_papermill_local_executor_then_collect(tmp_path, one_thread_jobs):
    """The coverage notebook with `-p executor local`: two local jobs, waited for with a progress bar; the table, summary and
    figure as usual. Run again with `-p wait false`, it submits nothing and draws the figure from the rows."""
    nb = Path(__file__).resolve().parents[1] / "nbs" / "05_coverage.ipynb"
    out_dir = tmp_path / "results"
    params = ["-p", "V", "4", "-p", "steps", "40", "-p", "coverages", "[0.5, 0.75]", "-p", "eval_every", "20", "-p", "ckpt_every",
              "20", "-p", "d_model", "16", "-p", "n_layers", "1", "-p", "n_test_scenes", "64", "-p", "executor", "local",
              "-p", "slurm_gpus", "0", "-p", "architectures", '["transformer"]', "-p", "output_dir", str(out_dir)]
    pm = lambda name, *more: subprocess.run([sys.executable, "-m", "papermill", str(nb), str(tmp_path / name), *params, *more],
                                            check=True, cwd=tmp_path, capture_output=True, text=True)
    first = pm("first.ipynb")
    text = (tmp_path / "first.ipynb").read_text()
    assert "2 runs as local jobs" in text and "jobs: 100%" in text and "KeyboardInterrupt" not in first.stderr
    table = COVERAGE_RESULTS.read(out_dir / "coverage_results.csv")
    assert sorted(table.coverage) == [0.5, 0.75] and (table.status == "ok").all()
    records = sorted((out_dir / "jobs").glob("*.json"))
    before = [r.read_text() for r in records]
    stamp = (out_dir / "coverage_results.csv").stat().st_mtime_ns
    (out_dir / "fig6_coverage.png").unlink()
    pm("again.ipynb", "-p", "wait", "false")
    assert [r.read_text() for r in records] == before and (out_dir / "coverage_results.csv").stat().st_mtime_ns == stamp
    assert (out_dir / "fig6_coverage.png").stat().st_size > 0
    assert "finished" in (tmp_path / "again.ipynb").read_text()          # the states table
