"""Tests of 07_pixels beyond the page's own: the renderer's labels on many scenes, a resumed pixel run, overfitting, parameters checked first."""
import json, subprocess, sys
from pathlib import Path

import numpy as np
import pytest
import torch

from binding_nb.models import DualEncoder, batch_loss
from binding_nb.pixels import LEVELS, PixelSceneTower, SquareRenderer, palette, pixel_towers
from binding_nb.scenes import ConceptSpace
from binding_nb.tokens import make_batch
from binding_nb.train import RunConfig, load_checkpoint, train_run

torch.set_num_threads(1)
NB = Path(__file__).resolve().parents[1] / "nbs" / "07_pixels.ipynb"


def _scenes(n, V, seed, one_object_share=0.25):
    g = torch.Generator().manual_seed(seed)
    scenes = torch.randint(0, V, (n, 2, 2), generator=g)
    scenes[torch.rand(n, generator=g) < one_object_share, 1] = -1
    return scenes


@pytest.mark.parametrize("level", list(LEVELS))
@pytest.mark.parametrize("size, square", [(32, 10), (24, 7), (64, 16)])
def test_colours_under_each_square_are_its_labels(level, size, square):
    "On 2,048 scenes: the top square's fill colour under its centre and border colour on its four edges; below level 3, the other's too."
    r = SquareRenderer(V=20, size=size, square=square, level=level, noise=0.0)
    scenes = _scenes(2048, 20, seed=level)
    img, corner = r.render(scenes, seed=level)
    pal, n = torch.as_tensor(palette(20)), torch.arange(len(scenes))
    slots = [1] if level == 3 else [0, 1]
    for s in slots:
        present = (scenes[:, s] >= 0).all(-1)
        y, x, mid, last = corner[:, s, 0], corner[:, s, 1], square // 2, square - 1
        checks = [(y + mid, x + mid, 0), (y, x + mid, 1), (y + last, x + mid, 1), (y + mid, x, 1), (y + mid, x + last, 1)]
        for yy, xx, concept in checks:
            seen = img[n, :, yy, xx]                                                       # [n, 3]
            assert torch.equal(seen[present], pal[scenes[present, s, concept]]), (s, concept)
    background = img.sum(1) == 0
    area = (scenes >= 0).all(-1).sum(1) * square ** 2                                       # painted pixels without overlap
    if level < 3: assert torch.equal((~background).sum((1, 2)), area)
    else: assert ((~background).sum((1, 2)) <= area).all() and ((~background).sum((1, 2)) < area).any()


def test_rendering_is_deterministic_and_seeded():
    scenes = _scenes(256, 10, seed=0)
    for level in LEVELS:
        r = SquareRenderer(V=10, level=level)
        a, b, c = r.render(scenes, seed=5)[0], r.render(scenes, seed=5)[0], r.render(scenes, seed=6)[0]
        assert torch.equal(a, b) and not torch.equal(a, c)


def test_a_pixel_dual_encoder_overfits_a_fixed_batch():
    "One square that fills its whole image (one position, no noise): the contrastive loss of a fixed batch falls close to zero."
    cfg = RunConfig(C=2, V=4, max_objects=1, d_model=32, n_layers=1, inputs="pixels", image_size=8, square=8, patch=4, device="cpu")
    torch.manual_seed(0)
    model = DualEncoder(cfg.model_config(), pixel_towers(cfg.model_config()))
    space = ConceptSpace([4, 4])
    batch = make_batch(space, torch.arange(16), 32, 1, torch.Generator().manual_seed(0))
    opt = torch.optim.AdamW(model.parameters(), 3e-3)
    first = None
    for _ in range(300):
        loss, _ = batch_loss(model, batch)
        opt.zero_grad(); loss.backward(); opt.step()
        first = first or loss.item()
    assert loss.item() < 0.2 * first, (first, loss.item())


def test_a_resumed_pixel_run_renders_what_it_would_have(tmp_path):
    "Stopped after 20 steps and resumed: the same result as the uninterrupted run, since the rendering count travels in the checkpoint."
    cfg = RunConfig(C=2, V=4, coverage=0.75, steps=40, batch_size=32, d_model=32, n_layers=1, eval_every=10, ckpt_every=10, n_val_scenes=32,
                    n_test_scenes=64, device="cpu", inputs="pixels", level=2)
    whole = train_run(cfg, tmp_path / "whole.pt", progress=False)
    train_run(cfg, tmp_path / "cut.pt", stop_after=20, progress=False)
    resumed = train_run(cfg, tmp_path / "cut.pt", progress=False)
    for k in ("concept_acc", "object_acc", "best_step", "val_object_acc"): assert whole[k] == resumed[k], k


@pytest.mark.parametrize("params, message", [
    (dict(levels="[4]"), "level must be one of"),
    (dict(levels="[]"), "levels is empty"),
    (dict(V=65), "use V <= 64"),
    (dict(patch=5), "not a multiple of the patch"),
    (dict(square=40), "does not fit"),
    (dict(query="mlp"), "query must be"),
    (dict(noise=-1), "noise"),
    (dict(coverages="[1.5]"), "coverage"),
    (dict(widths='[32, "a"]'), "widths[1]"),
])
def test_every_parameter_is_checked_in_process(tmp_path, params, message):
    "The parameter check, run as papermill would run it, without a kernel: refused before anything is written."
    from conftest import run_parameter_check
    with pytest.raises((ValueError, TypeError)) as e: run_parameter_check(NB, output_dir=str(tmp_path / "out"), **params)
    assert message in str(e.value), str(e.value)
    assert not (tmp_path / "out").exists()


def test_page_checks_its_parameters_first_under_papermill(tmp_path):
    run = subprocess.run([sys.executable, "-m", "papermill", str(NB), str(tmp_path / "out.ipynb"), "--cwd", str(NB.parent),
                          "-p", "levels", "[1, 4]", "-p", "output_dir", str(tmp_path / "out")], capture_output=True, text=True, timeout=300)
    assert run.returncode != 0 and "level must be one of" in run.stderr, run.stderr[-1500:]
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_small_pixel_study_by_papermill(tmp_path):
    "Two levels and the token transformer at two coverages (Fig. 6's panels), small, from an empty folder: every table and figure; a rerun trains and fits nothing."
    out = tmp_path / "results"
    params = ["-p", "V", "4", "-p", "levels", "[1, 3]", "-p", "coverages", "[0.5, 0.9]", "-p", "train_steps", "60", "-p", "widths", "[16]", "-p", "forms", '["global_product"]',
              "-p", "steps", "40", "-p", "output_dir", str(out)]
    cmd = [sys.executable, "-m", "papermill", str(NB), str(tmp_path / "out.ipynb"), "--cwd", str(NB.parent), *params]
    assert (run := subprocess.run(cmd, capture_output=True, text=True, timeout=900)).returncode == 0, run.stderr[-2000:]
    for name in ("pixel_runs.csv", "binding_study.csv", "binding_table.csv", "beside_clip.csv", "fig6_pixels.png"): assert (out / name).stat().st_size > 0
    import pandas as pd
    assert len(pd.read_csv(out / "pixel_runs.csv")) == 6 and set(pd.read_csv(out / "binding_study.csv").encoder) == {"pixels, level 1", "pixels, level 3", "tokens"}
    stamp = (out / "models" / "coverage_results.csv").stat().st_mtime_ns
    assert subprocess.run(cmd, capture_output=True, text=True, timeout=900).returncode == 0
    assert (out / "models" / "coverage_results.csv").stat().st_mtime_ns == stamp
