"""Tests of the training loop (App. B.4) beyond the notebook's own: resuming after a real kill, corrupt checkpoints."""
import os, signal, subprocess, sys, textwrap, time

import pytest
import torch

from binding_nb.train import RunConfig, load_checkpoint, train_run

torch.set_num_threads(1)   # two threads stall on a busy 2-core machine

CFG = dict(V=5, steps=40, batch_size=32, d_model=32, n_layers=2, eval_every=10, ckpt_every=10, n_val_scenes=32,
           n_test_scenes=128, coverage=0.8, device="cpu")


def test_resume_after_kill(tmp_path):
    "A run killed with SIGKILL mid-way resumes from its last checkpoint and ends exactly where an uninterrupted run ends."
    cfg = RunConfig(**CFG)
    whole = train_run(cfg, tmp_path / "whole.pt", progress=False)
    ck = tmp_path / "killed.pt"
    script = textwrap.dedent(f"""
        import time, torch
        from binding_nb import train
        torch.set_num_threads(1)
        cfg = train.RunConfig(**{CFG!r})
        save = train.save_checkpoint
        def slow_save(*args):              # slow the run down after each checkpoint so the kill lands mid-way
            save(*args); time.sleep(0.5)
        train.save_checkpoint = slow_save
        train.train_run(cfg, {str(ck)!r}, progress=False)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], start_new_session=True)
    try:
        deadline = time.time() + 120
        while time.time() < deadline:
            if ck.exists() and torch.load(ck, weights_only=True)["step"] >= 20: break
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    step = torch.load(ck, weights_only=True)["step"]
    assert 20 <= step < cfg.steps, step
    resumed = train_run(cfg, ck, progress=False)
    drop = lambda r: {k: v for k, v in r.items() if k != "train_seconds"}
    assert drop(resumed) == drop(whole)


def test_corrupted_checkpoint_is_set_aside(tmp_path):
    ck = tmp_path / "run.pt"; ck.write_bytes(b"\x00garbage")
    with pytest.warns(UserWarning, match="could not be read"):
        assert load_checkpoint(ck, RunConfig(**CFG)) is None
    assert [p.name.startswith("run.pt.bad-") for p in tmp_path.iterdir()] == [True]
