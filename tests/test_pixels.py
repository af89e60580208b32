"""Tests of 07_pixels beyond the page's own: the renderer's labels on many scenes, a resumed pixel run, overfitting, parameters checked first."""
import dataclasses, hashlib, json, subprocess, sys
from pathlib import Path

import numpy as np
import pytest
import torch

from binding_nb.models import DualEncoder, batch_loss
from binding_nb.pixels import LEVELS, PixelConfig, PixelSceneTower, SquareRenderer, largest_apart_square, palette, rendered_table
from binding_nb.scenes import ConceptSpace
from binding_nb.tokens import BatchSettings, make_batch
from binding_nb.checkpoints import load_checkpoint
from binding_nb.train import train_run
from binding_nb.config import check_device, run_config

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


def test_a_pixel_dual_encoder_overfits_a_fixed_batch():
    "One square that fills its whole image (one position, no noise): the contrastive loss of a fixed batch falls close to zero."
    cfg = run_config(C=2, V=4, max_objects=1, d_model=32, n_layers=1, inputs="pixels", input_settings=dict(image_size=8, square=8, patch=4), device="cpu")
    torch.manual_seed(0)
    model = DualEncoder(cfg.model)
    space = ConceptSpace([4, 4])
    batch = make_batch(space, torch.arange(16), BatchSettings(32, max_objects=1), generator=torch.Generator().manual_seed(0))
    opt = torch.optim.AdamW(model.parameters(), 3e-3)
    first = None
    for _ in range(300):
        loss, _ = batch_loss(model, batch)
        opt.zero_grad(); loss.backward(); opt.step()
        first = first or loss.item()
    assert loss.item() < 0.2 * first, (first, loss.item())


def test_a_resumed_pixel_run_renders_what_it_would_have(tmp_path, uninterrupted):
    "Stopped after 20 steps and resumed: the same result as the uninterrupted run, since the rendering count travels in the checkpoint."
    cfg = run_config(C=2, V=4, coverage=0.75, steps=40, batch_size=32, d_model=32, n_layers=1, eval_every=10, ckpt_every=10, n_val_scenes=32,
                    n_test_scenes=64, device="cpu", inputs="pixels", input_settings=dict(level=2))
    whole, _ = uninterrupted(cfg)
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
    (dict(square=12), "the largest square that always fits twice at levels 1-2 is 11"),
    (dict(levels="[3]", square=12), "the largest square that always fits twice at levels 1-2 is 11"),   # CLIP's level 1 still needs two apart
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
              "-p", "probe_steps", "40", "-p", "output_dir", str(out)]
    cmd = [sys.executable, "-m", "papermill", str(NB), str(tmp_path / "out.ipynb"), "--cwd", str(NB.parent), *params]
    assert (run := subprocess.run(cmd, capture_output=True, text=True, timeout=900)).returncode == 0, run.stderr[-2000:]
    for name in ("pixel_runs.csv", "binding_study.csv", "binding_table.csv", "beside_clip.csv", "fig6_pixels.png"): assert (out / name).stat().st_size > 0
    import pandas as pd
    assert len(pd.read_csv(out / "pixel_runs.csv")) == 6 and set(pd.read_csv(out / "binding_study.csv").encoder) == {"pixels, level 1", "pixels, level 3", "tokens"}
    stamp = (out / "models" / "coverage_results.csv").stat().st_mtime_ns
    assert subprocess.run(cmd, capture_output=True, text=True, timeout=900).returncode == 0
    assert (out / "models" / "coverage_results.csv").stat().st_mtime_ns == stamp


def _tries_apart(r, scenes, seed):
    "The renderer's random placement alone (as before any fallback): first corners, the second's first try apart, and whether one was."
    g = torch.Generator().manual_seed(seed)
    candidates = torch.randint(0, r.size - r.square + 1, (len(scenes), 2, r.tries, 2), generator=g)
    first, second = candidates[:, 0, 0], candidates[:, 1]
    apart = ((second - first[:, None]).abs() >= r.square).any(-1) | ~(scenes >= 0).all(-1).all(1)[:, None]
    return first, second[torch.arange(len(scenes)), apart.int().argmax(1)], apart.any(1)


def _apart(corner, scenes, square):
    return (((corner[:, 0] - corner[:, 1]).abs() >= square).any(-1) | ~(scenes >= 0).all(-1).all(1)).all()


@pytest.mark.parametrize("size, square, fits", [(32, 12, 11), (32, 11, 11), (30, 11, 10), (14, 6, 5)])
def test_two_squares_that_cannot_always_be_apart_are_refused_naming_the_largest_that_fits(size, square, fits):
    "A first square near the middle leaves a second no corner apart when size < 3 * square - 1: refused when the run is configured, not at a random step."
    assert largest_apart_square(size) == fits
    message = f"the largest square that always fits twice at levels 1-2 is {fits}: use square <= {fits}"
    cfg = dict(C=2, V=6, inputs="pixels", device="cpu")
    px = lambda **more: dict(input_settings=dict(image_size=size, square=square, patch=2, **more))
    if square > fits:
        for level in (1, 2):
            with pytest.raises(ValueError, match=message): check_device(run_config(**cfg, **px(level=level)))
            with pytest.raises(ValueError, match=message): SquareRenderer(V=6, size=size, square=square, level=level).render(_scenes(8, 6, seed=0, one_object_share=0))
    else: check_device(run_config(**cfg, **px()))
    check_device(run_config(**cfg, **px(level=3))); check_device(run_config(**cfg, **px(), max_objects=1))          # overlap allowed, or one square: nothing to keep apart
    SquareRenderer(V=6, size=size, square=square).render(_scenes(64, 6, seed=0, one_object_share=1.0))  # one-square scenes render at any size


def test_no_square_fits_twice_on_a_small_image():
    with pytest.raises(ValueError, match="largest square that always fits twice at levels 1-2 is 4: use an image of side >= 29"):
        check_device(run_config(C=2, V=6, inputs="pixels", device="cpu", input_settings=dict(image_size=12, patch=4)))


def test_a_batch_whose_random_tries_all_fail_still_places_its_squares_apart():
    "Image 30, square 10: one batch of 128 two-square scenes in about 180 had no try apart for some scene and stopped training; now that scene gets a corner apart."
    r, scenes = SquareRenderer(V=10, size=30, square=10), torch.randint(0, 10, (128, 2, 2), generator=torch.Generator().manual_seed(0))
    check_device(run_config(C=2, V=10, inputs="pixels", device="cpu", input_settings=PixelConfig(image_size=30, square=10, patch=2)))
    first, tried, found = _tries_apart(r, scenes, seed=20)
    assert (~found).sum() == 1                                                                   # the random tries alone fail here
    for level in (1, 2):
        img, corner = SquareRenderer(V=10, size=30, square=10, level=level).render(scenes, seed=20)
        assert _apart(corner, scenes, 10) and corner.min() >= 0 and corner.max() <= 20
        assert torch.equal(corner[:, 0], first) and torch.equal(corner[found, 1], tried[found])  # every other scene as drawn
        assert (img.sum(1) > 0).sum((1, 2)).eq(2 * 10 ** 2).all() if level == 1 else True      # two whole squares painted


@pytest.mark.parametrize("size, square", [(32, 10), (24, 7), (64, 16), (31, 10)])
def test_placement_for_sizes_that_work_is_unchanged(size, square):
    "Where a random try is apart, the renderer keeps it: the corners are the first try apart, as before the fallback existed."
    scenes = _scenes(4096, 10, seed=1)
    for level in (1, 2):
        r = SquareRenderer(V=10, size=size, square=square, level=level)
        first, tried, found = _tries_apart(r, scenes, seed=4)
        corner = r.render(scenes, seed=4)[1]
        assert found.all() and torch.equal(corner, torch.stack([first, tried], 1))


def test_the_default_renderer_renders_as_before():
    "A fixed seed of the committed run's renderer (32 x 32, square 10, V = 10): corners and clean images as captured before the fallback was added."
    scenes = _scenes(4096, 10, seed=0)
    h = hashlib.sha256()
    for level in LEVELS: h.update(SquareRenderer(V=10, level=level).render(scenes, seed=11)[1].numpy().tobytes())
    assert h.hexdigest()[:16] == "ae5e7de2d1cc29a7"
    assert hashlib.sha256(SquareRenderer(V=10).render(scenes, seed=11)[0].numpy().tobytes()).hexdigest()[:16] == "615f3a792df90e80"
    for level in LEVELS: check_device(run_config(C=2, V=10, inputs="pixels", device="cpu", input_settings=dict(level=level)))


@pytest.mark.parametrize("scenes, got", [
    (np.array([[[0, 1]], [[2, 3]]]), "got shape (2, 1, 2)"),
    (np.array([[[0, 1], [-1, -1]], [[2, 3], [1, 1]]]), "got 1 of 2 scenes with an empty slot"),
    (np.array([[0, 1], [2, 3]]), "got shape (2, 2)"),
    (np.zeros((0, 2, 2), int), "got shape (0, 2, 2)"),
])
def test_rendered_table_takes_two_object_scenes_only(scenes, got):
    "One-object scenes have no binding for §5.1's approximators: refused before anything is embedded, not a traceback later."
    embedded = []
    encoder = lambda ims: embedded.append(len(ims)) or np.zeros((len(ims), 3), np.float32)
    with pytest.raises(ValueError, match="two objects in every one") as e: rendered_table(encoder, SquareRenderer(V=4), scenes, "x", progress=False)
    assert got in str(e.value) and not embedded


def test_rendered_table_refuses_squares_that_cannot_be_apart():
    with pytest.raises(ValueError, match="is 11: use square <= 11"):
        rendered_table(lambda ims: np.zeros((len(ims), 3), np.float32), SquareRenderer(V=4, size=32, square=12), np.array([[[0, 1], [2, 3]]]), "x", progress=False)


@pytest.mark.parametrize("n", [True, False, np.bool_(True)])
def test_palette_refuses_bools(n):
    "palette(True) was V=1: a bool is no palette size."
    with pytest.raises(ValueError, match="a whole number"): palette(n)
    with pytest.raises(ValueError, match="V="): SquareRenderer(V=n)


def test_palette_refuses_too_few_levels_and_bool_levels():
    with pytest.raises(ValueError, match="holds only 7 colours .* fewer than V=10"): palette(10, levels=2)
    with pytest.raises(ValueError, match="levels must be a whole number"): palette(4, levels=True)
    assert len(palette(7, levels=2)) == 7


def test_pixels_are_an_input_kind_loaded_by_name(tmp_path):
    "Training never imports the pixel page; a pixel checkpoint loads by its config's name alone, the pixel module imported on first use."
    cfg = run_config(C=2, V=4, steps=2, batch_size=8, d_model=16, n_layers=1, eval_every=2, ckpt_every=2, n_val_scenes=8, n_test_scenes=8,
                    device="cpu", inputs="pixels", input_settings=PixelConfig(level=2, image_size=16, square=5))
    train_run(cfg, tmp_path / "px.pt", progress=False)
    code = f"""import sys
import binding_nb.checkpoints as checkpoints, binding_nb.train
assert "binding_nb.pixels" not in sys.modules, "training (train, checkpoints) imports the pixel page"
model, cfg = checkpoints.load_model({str(tmp_path / 'px.pt')!r}, device="cpu")
assert "binding_nb.pixels" in sys.modules and type(model.scene_encoder).__name__ == "PixelSceneTower"
assert cfg.settings()["input_settings"] == dict(level=2, image_size=16, square=5), cfg.settings()
print(model.config.input_settings)"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "PixelConfig(level=2, image_size=16, square=5" in out.stdout
    for module in ("train.py", "evaluation.py"):
        src = (Path(__file__).parents[1] / "binding_nb" / module).read_text()
        assert "pixel" not in src.lower(), f"{module} names an input kind"


def test_the_pixel_settings_are_written_once():
    "A RunConfig holds a PixelConfig once, in its model config; its settings (what a checkpoint stores) hold what differs from the defaults."
    cfg = run_config(C=2, V=6, inputs="pixels", input_settings=PixelConfig(level=3))
    assert cfg.settings()["input_settings"] == dict(level=3)                  # where it differs from the defaults
    assert run_config(**cfg.settings()) == cfg
    assert cfg.input_settings is cfg.model.input_settings and cfg.model.input_settings == PixelConfig(level=3)
    assert cfg.model_key() == run_config(C=2, V=6, inputs="pixels", input_settings=dict(level=3)).model_key()
    with pytest.raises(ValueError, match="no settings \\['levle'\\]"): run_config(C=2, V=6, inputs="pixels", input_settings=dict(levle=3, level=1)).model
