"""Tests of utils beyond the notebook's own: worker processes that outlive their parent, folders that are not given."""
import os, signal, subprocess, sys, textwrap, time
from pathlib import Path

import pytest

from binding_nb.utils import writable_folder


def _alive(pid: int) -> bool:
    "Whether `pid` runs (a zombie waiting for its reaper has ended)."
    try: return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError: return False


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc")
def test_workers_end_when_their_parent_is_killed(tmp_path):
    "Forked workers whose parent is killed exit within seconds instead of working through the queue and idling for ever."
    script = textwrap.dedent(f"""
        import os, time
        from binding_nb.utils import in_processes
        def job(k):
            open(os.path.join({str(tmp_path)!r}, f"{{os.getpid()}}.pid"), "w").close()
            time.sleep(60)
        in_processes(job, [(k,) for k in range(6)], 2, "jobs", progress=False)
    """)
    parent = subprocess.Popen([sys.executable, "-c", script])
    try:
        for _ in range(300):
            pids = [int(p.stem) for p in tmp_path.glob("*.pid")]
            if len(pids) == 2: break
            time.sleep(0.1)
        assert len(pids) == 2, "the workers did not start"
        parent.send_signal(signal.SIGKILL); parent.wait()
        for _ in range(100):
            if not any(_alive(p) for p in pids): break
            time.sleep(0.1)
        assert not any(_alive(p) for p in pids), "a worker outlived its killed parent"
        assert len(list(tmp_path.glob("*.pid"))) == 2                 # and took no further job from the queue
    finally:
        for p in [int(p.stem) for p in tmp_path.glob("*.pid")]:
            if _alive(p): os.kill(p, signal.SIGKILL)


def _slow_or_failing(k: int) -> int:
    "Job 1 fails at once; the others sleep for 20 seconds (idle: a worker left finishing one costs no CPU)."
    if k == 1: raise ValueError("job 1 failed")
    time.sleep(20)
    return k


def test_a_failing_job_stops_the_queue_at_once():
    """The first error reaches the caller as it happens, not after the jobs before it in the queue; the jobs not yet
    started never start."""
    from binding_nb.utils import in_processes
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match="job 1 failed"):
        in_processes(_slow_or_failing, [(k,) for k in range(8)], 2, "jobs", progress=False)
    assert time.perf_counter() - t0 < 15                           # job 0's 20 seconds not waited for, nor jobs 2-7'


@pytest.mark.parametrize("folder", [None, ""])
def test_a_folder_that_is_not_given_is_refused(folder, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=rf"output_dir is {folder!r}: name a folder"): writable_folder(folder, "output_dir", "pass a folder")
    assert not list(tmp_path.iterdir())


def test_fit_binding_without_an_output_dir_says_so():
    from binding_nb.sweeps import Cell
    from binding_nb.learned import fit_binding, known_binding
    from binding_nb.scenes import ConceptSpace
    with pytest.raises(ValueError, match="output_dir is None: name a folder"):
        fit_binding(known_binding(ConceptSpace([8, 8]), "bag", rank=16), [Cell("additive", 8, 1e-2)], device="cpu", progress=False)



@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc")
@pytest.mark.parametrize("how", ["error", "interrupt"])
def test_a_failing_job_or_an_interrupt_ends_the_process_at_once(how, tmp_path):
    """A worker's error, or SIGINT to the parent, ends the whole process within seconds, not when the other jobs under way
    finish (here 60 s of sleep); the error names the job that failed."""
    script = textwrap.dedent(f"""
        import os, time
        from binding_nb.utils import in_processes
        def job(k):
            open(os.path.join({str(tmp_path)!r}, f"{{k}}.started"), "w").close()
            if k == 1 and {how!r} == "error": time.sleep(1); raise ValueError("job 1 failed")
            time.sleep(60)
        in_processes(job, [(k,) for k in range(4)], 2, "jobs", progress=False, label=lambda job: f"job number {{job[0]}}")
    """)
    t0 = time.monotonic()
    parent = subprocess.Popen([sys.executable, "-c", script], stderr=subprocess.PIPE, text=True)
    try:
        if how == "interrupt":
            for _ in range(600):
                if len(list(tmp_path.glob("*.started"))) == 2: break
                time.sleep(0.1)
            parent.send_signal(signal.SIGINT)
        _, err = parent.communicate(timeout=50)
    finally:
        parent.kill()
    assert time.monotonic() - t0 < 45 and parent.returncode != 0
    started = {p.stem for p in tmp_path.glob("*.started")}
    assert {"0", "1"} <= started and "3" not in started        # (the pool may hand job 2 to the freed worker before it stops)
    if how == "error": assert "job 1 failed" in err and "jobs: the job that failed was job number 1" in err
    else: assert "KeyboardInterrupt" in err
