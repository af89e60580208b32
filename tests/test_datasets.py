"""Tests of `binding_nb.datasets`: counts, shapes, captions, determinism, render cache, PUG:SPARE loader.

Run `pytest tests/test_datasets.py` (about a minute on 2 CPU cores); `--runslow` adds the full 224 px 3D build.
"""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from binding_nb import datasets as D
import binding_nb.datasets.clevr  # noqa: F401  (D.clevr: the module whose renderer a test replaces)
from binding_nb.scenes import ConceptSpace


pytestmark = pytest.mark.xdist_group("datasets")   # its module fixture is built once, on one worker

@pytest.fixture(scope="module")
def c2d():
    return D.clevr2d(64)


def test_clevr2d_bad_input():
    with pytest.raises(ValueError, match="size"): D.clevr2d(4)
    with pytest.raises(ValueError, match="object_size"): D.clevr2d(64, object_size=0.9)


def test_subset_and_getitem(c2d):
    item = c2d[3]
    assert item.caption == c2d.captions[3] and (item.objects == c2d.objects[3]).all() and item.item is c2d.items[3]
    singles = c2d[c2d.sizes == 1]
    assert len(singles) == 24 and singles.fingerprint != c2d.fingerprint and singles.space == c2d.space
    assert c2d[:10].captions == c2d.captions[:10] and c2d.subset([5, 1]).captions == [c2d.captions[5], c2d.captions[1]]
    with pytest.raises(ValueError, match="mask"): c2d.subset(np.ones(3, bool))
    with pytest.raises(ValueError, match="out of range"): c2d.subset([600])


def test_scene_dataset_validates():
    sp = ConceptSpace([2, 2])
    with pytest.raises(ValueError, match="one entry per scene"):
        D.SceneDataset("x", ["a"], np.zeros((2, 1, 2), int), sp, ["a", "b"])
    with pytest.raises(ValueError):
        D.SceneDataset("x", ["a"], np.array([[[0, 5]]]), sp, ["a"])


def test_clevr3d_small_renders(tmp_path):
    sp = D.clevr_space()
    objs = np.asarray(sp.object_values(np.array([[15, 1], [2, -1]])))
    ds = D.clevr3d(32, 4, objects=objs, cache_dir=tmp_path, progress=False)
    assert len(ds) == 2 and ds.captions == ["a purple cube and a gray sphere", "a gray cylinder"]
    assert ds.items[0].size == (32, 32)
    files = list(tmp_path.rglob("*.png"))
    assert len(files) == 2
    fresh = D.clevr3d(32, 4, objects=objs, cache_dir=None, progress=False)
    assert all((np.asarray(a) == np.asarray(b)).all() for a, b in zip(ds.items, fresh.items))   # deterministic
    files[0].write_bytes(files[0].read_bytes()[:50])                                            # truncate one
    with pytest.warns(UserWarning, match="re-rendering"):
        again = D.clevr3d(32, 4, objects=objs, cache_dir=tmp_path, progress=False)
    assert again.fingerprint == ds.fingerprint


def test_clevr3d_bad_input():
    with pytest.raises(ValueError, match="occlusion"): D.clevr3d(32, 4, n_objects=2, occlusion=True)
    with pytest.raises(ValueError, match="n_objects"): D.clevr3d(32, 4, n_objects=4, cache_dir=None)


@pytest.mark.slow
def test_clevr3d_full_build(tmp_path):
    ds = D.clevr3d(cache_dir=tmp_path)
    assert len(ds) == 600 and ds.items[0].size == (224, 224)


def test_patterned_scenes():
    p = D.patterned_scenes(48, seed=0)
    assert len(p) == 625 and p.objects.shape == (625, 2, 2) and p.space.values_per_concept == (5, 5)
    ids = p.object_ids()
    assert (ids == np.stack(np.meshgrid(np.arange(25), np.arange(25), indexing="ij"), -1).reshape(-1, 2)).all()
    assert p.captions[1] == "a plain circle and a plain square" and p.captions[-1] == "a wavy ring and a wavy ring"
    again = D.patterned_scenes(48, seed=0)
    assert all((np.asarray(a) == np.asarray(b)).all() for a, b in zip(p.items[::50], again.items[::50]))
    assert again.fingerprint == p.fingerprint != D.patterned_scenes(48, seed=1).fingerprint
    # jitter: two scenes with the same objects still differ; every half holds an object
    px = np.stack([np.asarray(im) for im in p.items]).astype(float)
    assert len({im.tobytes() for im in p.items}) == 625
    assert px[:, :, :24].std((1, 2)).max(1).min() > 5 and px[:, :, 24:].std((1, 2)).max(1).min() > 5
    s = D.patterned_scenes(32, singles=True)
    assert len(s) == 650 and (s.sizes[625:] == 1).all()
    with pytest.raises(ValueError, match="size"): D.patterned_scenes(8)


def _fake_pug(root: Path, rows):
    import pandas as pd
    for i, r in enumerate(rows): Image.new("RGB", (20, 16), (40 * i, 10, 200)).save(root / r[0])
    pd.DataFrame(rows, columns=list(D.PUG_COLUMNS.values())).to_csv(root / "labels.csv", index=False)


def test_pug_spare_missing(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist.*PUG"): D.pug_spare(tmp_path / "nope")
    with pytest.raises(FileNotFoundError, match="labels.csv"): D.pug_spare(tmp_path)


def test_pug_spare_fake_folder(tmp_path):
    rows = [("x1.png", "Dog", "Red", "Cat", "Blue"), ("x2.png", "", "", "Bird", "Red"),
            ("x3.png", "Cat", "Blue", "Dog", "Red"), ("x4.png", "blank", "Default", "blank", "Default")]
    _fake_pug(tmp_path, rows)
    ds = D.pug_spare(tmp_path, size=None)
    assert len(ds) == 3 and isinstance(ds.items, D.ImageFiles)
    assert ds.space.names == ("color", "animal") and ds.space.value_names == (("Blue", "Red"), ("Bird", "Cat", "Dog"))
    assert ds.captions == ["a Red Dog and a Blue Cat", "a Red Bird", "a Blue Cat and a Red Dog"]
    assert (ds.objects[1] == [[1, 0], [-1, -1]]).all()
    assert ds[0].item.size == (20, 16) and np.asarray(ds[1].item)[0, 0].tolist() == [40, 10, 200]
    sub = ds[[2, 0]]
    assert isinstance(sub.items, D.ImageFiles) and sub.captions == [ds.captions[2], ds.captions[0]]
    assert D.pug_spare(tmp_path, size=None).fingerprint == ds.fingerprint
    assert D.pug_spare(tmp_path, size=8)[0].item.size == (8, 8)
    renamed = tmp_path / "labels2.csv"
    import pandas as pd
    pd.read_csv(tmp_path / "labels.csv").rename(columns={"filename": "image"}).to_csv(renamed, index=False)
    with pytest.raises(ValueError, match="column"): D.pug_spare(tmp_path, csv="labels2.csv")
    assert len(D.pug_spare(tmp_path, csv="labels2.csv", columns=dict(path="image"))) == 3
    (tmp_path / "x3.png").unlink()
    with pytest.raises(FileNotFoundError, match="1 of 3"): D.pug_spare(tmp_path)


# Fingerprints key users' embedding caches and 3D render caches (hours to rebuild): these values were computed with the
# library before its hashes moved onto `binding_nb.utils.fingerprint`, and must never change for the same inputs.
PINNED = dict(text50="0e4056452b5da930", text50_seed3_pairs_only="e464b629254e2326", clevr2d32="1db820c84794d582",
              clevr2d32_singles="215007e8ae3212ca", clevr2d32_subset_5_1="ccc71a0de3d1367c",
              clevr2d32_first10="90e0f371bbae302f", patterned32="30e4b759cd0f2b26")


def test_fingerprints_pinned():
    assert D.text_captions(n_pairs=50).fingerprint == PINNED["text50"]
    assert D.text_captions(n_pairs=50, seed=3, singles=False).fingerprint == PINNED["text50_seed3_pairs_only"]
    c = D.clevr2d(32)
    assert c.fingerprint == PINNED["clevr2d32"]
    assert c[c.sizes == 1].fingerprint == PINNED["clevr2d32_singles"]
    assert c.subset([5, 1]).fingerprint == PINNED["clevr2d32_subset_5_1"]
    assert c[:10].fingerprint == PINNED["clevr2d32_first10"]
    assert D.patterned_scenes(32).fingerprint == PINNED["patterned32"]


def test_render_cache_folder_pinned(tmp_path):
    import mitsuba
    if mitsuba.__version__ != "3.9.1":   # the renderer version is part of the key: other versions get other folders
        pytest.skip(f"values pinned with mitsuba 3.9.1, installed {mitsuba.__version__}")
    objs = np.asarray(D.clevr_space().object_values(np.array([[15, 1], [2, -1]])))
    ds = D.clevr3d(16, 1, objects=objs, cache_dir=tmp_path, progress=False)
    assert [p.name for p in tmp_path.iterdir()] == ["clevr3d-v1-c2995bc467d6"]
    assert sorted(p.name for p in (tmp_path / "clevr3d-v1-c2995bc467d6").iterdir()) == ["02.png", "15-01.png"]
    assert ds.params["scenes"] == "912944afd7ae"


def test_pug_fingerprints_pinned(tmp_path):
    import pandas as pd
    rows = [("a.png", "Dog", "Red", "Cat", "Blue"), ("b.png", "blank", "", "Cat", "Red")]
    for i, r in enumerate(rows):   # the loader hashes file names, sizes and modification times, not pixels
        (tmp_path / r[0]).write_bytes(bytes(10 + i))
        os.utime(tmp_path / r[0], ns=(1_700_000_000_000_000_000, 1_700_000_000_000_000_000 + i))
    pd.DataFrame(rows, columns=list(D.PUG_COLUMNS.values())).to_csv(tmp_path / "labels.csv", index=False)
    p = D.pug_spare(tmp_path, size=8)
    assert p.items.stat_fingerprint() == "a2e7a794024583c8" and p.params["files"] == "a2e7a794024583c8"
    assert p.fingerprint == "10f8bf42f4eb5d36" and p[[1]].fingerprint == "beb8b9871107bd7a"


# --- bad input and faults -----------------------------------------------------------------------------------------------

PUG_HEADER = ",".join(D.PUG_COLUMNS.values())
GOOD_ROWS = ["a.png,Dog,Red,Cat,Blue", "b.png,Cat,Blue,Dog,Red"]


def _pug_folder(root: Path, *lines: str) -> Path:
    "A fake PUG:SPARE folder: labels.csv of the header and `lines` (written verbatim), and an image for every name."
    for name in ("a.png", "b.png", "c.png", "d.png"): Image.new("RGB", (8, 8), (10, 20, 30)).save(root / name)
    (root / "labels.csv").write_text("\n".join([PUG_HEADER, *lines]) + "\n")
    return root


@pytest.mark.parametrize("bad, expected", [
    ("c.png,Dog,Red", "labels.csv line 4: has 3 fields, expected 5 as in the header"),            # was a 1-object scene
    ("c.png,Dog,Red,Cat,Blue,x", "labels.csv line 4: has 6 fields, expected 5 as in the header"),  # was a ParserError
    ("c.png,Cat,,Dog,Red", "labels.csv line 4: color1 (column character_texture) is empty; "
                           "expected one of the 2 colours in labels.csv (Blue, Red)"),              # was 'a  Cat'
    ("c.png,Cat,Red,Dog,blank", "labels.csv line 4: color2 (column character2_texture) is 'blank', a placeholder"),
    ("c.png,Cat,None,Dog,Red", "labels.csv line 4: color1 (column character_texture) is 'None', a placeholder"),
    ("c.png,Cat,Red,Dog, NaN ", "labels.csv line 4: color2 (column character2_texture) is 'NaN', a placeholder"),
    ("b.png,Cat,Red,Dog,Blue", "labels.csv line 4: filename 'b.png' is also on line 3; expected each image once"),
    (",Cat,Red,Dog,Blue", "labels.csv line 4: filename is empty"),
])
def test_pug_spare_rejects_bad_rows(tmp_path, bad, expected):
    _pug_folder(tmp_path, *GOOD_ROWS, bad)
    with pytest.raises(ValueError) as e: D.pug_spare(tmp_path, size=None)
    msg = str(e.value)
    assert expected in msg and str(tmp_path / "labels.csv") in msg and "nothing was loaded" in msg, msg


def test_pug_spare_extra_field_in_first_row_is_not_shifted(tmp_path):
    # pandas took the first column of such a file as its index: every column moved left, then all images were "missing"
    _pug_folder(tmp_path, "a.png,Dog,Red,Cat,Blue,x", GOOD_ROWS[1])
    with pytest.raises(ValueError, match="labels.csv line 2: has 6 fields, expected 5"): D.pug_spare(tmp_path)


def test_pug_spare_stray_quote(tmp_path):
    # a lenient CSV reader lets an unclosed quote swallow the following lines into one value
    _pug_folder(tmp_path, GOOD_ROWS[0], 'b.png,Cat,"Blue,Dog,Red', "c.png,Cat,Red,Dog,Blue")
    with pytest.raises(ValueError, match=r"labels.csv line 3: not valid CSV \(unexpected end of data\)"): D.pug_spare(tmp_path)


def test_pug_spare_lists_every_bad_line(tmp_path):
    _pug_folder(tmp_path, *GOOD_ROWS, '"c.png",Cat,"Red\nRed",Dog,Blue', "d.png,Cat,,Dog,blank", "x.png,Dog")
    with pytest.raises(ValueError) as e: D.pug_spare(tmp_path)
    assert "labels.csv line 7: has 2 fields" in str(e.value)          # the quoted line break in row c.png counts as a line
    (tmp_path / "labels.csv").write_text("\n".join([PUG_HEADER, *GOOD_ROWS, "c.png,Cat,,Dog,blank", "d.png,Cat,Red,Dog,"]))
    with pytest.raises(ValueError) as e: D.pug_spare(tmp_path)
    lines = str(e.value).splitlines()
    assert "3 label problems" in lines[0] and [l.split(":")[0] for l in lines[1:]] == ["labels.csv line 4", "labels.csv line 4", "labels.csv line 5"]
    assert "color1" in lines[1] and "color2" in lines[2] and "color2" in lines[3]


def test_pug_spare_names_ignore_case_and_spaces(tmp_path):
    _pug_folder(tmp_path, *GOOD_ROWS, "c.png, cat ,RED,dog,blue", "d.png,blank,,CAT,Red")
    ds = D.pug_spare(tmp_path, size=None)
    assert ds.space.value_names == (("Blue", "Red"), ("Cat", "Dog"))      # never two cats: first spelling found names it
    assert ds.captions[2:] == ["a Red Cat and a Blue Dog", "a Red Cat"]
    assert ds.space.n_objects == 4 and ds.object_ids()[2:].tolist() == [[2, 1], [2, -1]]   # red cat, blue dog; red cat
    given = D.pug_spare(tmp_path, size=None, animals=["dog", "cat"], colors=["red", "blue"])
    assert given.captions[0] == "a red dog and a blue cat"
    with pytest.raises(ValueError, match=r"hold \['Cat', 'CAT'\]: .* a name twice"):
        D.pug_spare(tmp_path, animals=["Cat", "CAT", "Dog"])
    with pytest.raises(ValueError, match=r"hold \['blank'\]: a placeholder"): D.pug_spare(tmp_path, colors=["Red", "Blue", "blank"])
    with pytest.raises(ValueError, match="line 3: color1 .* is 'Blue', which is not in the given colours list; expected one "
                                         r"of the 2 colours given \(Red, Green\)"):
        D.pug_spare(tmp_path, colors=["Red", "Green"])


def test_patterned_scenes_progress_bar(capsys):
    D.patterned_scenes(16, chunk=500)
    err = capsys.readouterr().err
    assert "patterned scenes: 100%" in err and "1250/1250" in err, err
    D.patterned_scenes(16, progress=False)
    assert capsys.readouterr().err == ""


def test_progress_bars_are_plain_tqdm(monkeypatch, capsys):
    # tqdm.auto picks the notebook bar, which warns "IProgress not found" without ipywidgets; the bars must not use it
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)                # any import of tqdm.auto now fails
    D.render_cached(["a"], lambda i: np.zeros((4, 4, 3), np.uint8), (4, 4, 3), None, desc="fake renders")
    D.patterned_scenes(16, chunk=500)
    err = capsys.readouterr().err
    assert "fake renders: 100%" in err and "patterned scenes: 100%" in err


def _counting_renderer():
    calls = []
    return calls, lambda i: (calls.append(i), np.full((4, 4, 3), i, np.uint8))[1]


@pytest.mark.parametrize("kind", ["folder", "broken link"])
def test_render_cache_refuses_what_it_did_not_write(tmp_path, kind):
    calls, render = _counting_renderer()
    D.render_cached(["a"], render, (4, 4, 3), tmp_path, progress=False)
    if kind == "folder": (tmp_path / "b.png").mkdir(); (tmp_path / "b.png" / "keep.txt").write_text("mine")
    else: (tmp_path / "b.png").symlink_to(tmp_path / "nowhere.png")
    with pytest.raises(FileExistsError) as e: D.render_cached(["a", "b", "c"], render, (4, 4, 3), tmp_path, progress=False)
    msg = str(e.value)
    assert f"{tmp_path / 'b.png'} is a {kind if kind == 'folder' else 'broken symbolic link'}" in msg, msg
    assert "remove or rename it yourself" in msg and "nothing was rendered" in msg
    assert calls == [0] and sorted(os.listdir(tmp_path)) == ["a.png", "b.png"]    # nothing rendered, moved or added
    if kind == "folder": assert (tmp_path / "b.png" / "keep.txt").read_text() == "mine"


def test_render_cache_folder_is_a_file(tmp_path, monkeypatch):
    renders = []
    monkeypatch.setattr(D.clevr, "render_clevr3d", lambda *a, **k: renders.append(a) or np.zeros((16, 16, 3), np.uint8))
    objs = np.asarray(D.clevr_space().object_values(np.array([[15, 1]])))
    (tmp_path / "cache").write_text("a file")
    with pytest.raises(NotADirectoryError, match=r"cannot be created: .*cache is a file: pass another cache_dir"):
        D.clevr3d(16, 1, objects=objs, cache_dir=tmp_path / "cache", progress=False)
    calls, render = _counting_renderer()
    with pytest.raises(NotADirectoryError, match=r"render cache folder .*cache is a file, not a folder: pass another cache_dir"):
        D.render_cached(["a"], render, (4, 4, 3), tmp_path / "cache", progress=False)
    assert renders == [] and calls == [] and (tmp_path / "cache").read_text() == "a file"
    D.clevr3d(16, 1, objects=objs, cache_dir=tmp_path / "elsewhere", progress=False)   # the same call works elsewhere
    assert len(renders) == 1


def _writable(folder: Path) -> bool:
    try: (folder / ".probe").write_bytes(b""); (folder / ".probe").unlink(); return True
    except OSError: return False


@pytest.fixture
def lock_read_only():
    "Make a folder read-only: chmod, or (for root, whom chmod does not stop) chattr +i; skip when neither works."
    locked = []
    def lock(folder: Path) -> Path:
        folder.chmod(0o555); locked.append(folder)
        if _writable(folder) and shutil.which("chattr"):
            subprocess.run(["chattr", "+i", str(folder)], capture_output=True)
        if _writable(folder): pytest.skip("cannot make a folder read-only here")
        return folder
    yield lock
    for folder in locked:
        if shutil.which("chattr"): subprocess.run(["chattr", "-i", str(folder)], capture_output=True)
        folder.chmod(0o755)


def test_render_cache_read_only(tmp_path, lock_read_only):
    calls, render = _counting_renderer()
    full = D.render_cached(["a", "b"], render, (4, 4, 3), tmp_path / "full", progress=False)
    lock_read_only(tmp_path / "full")
    assert (D.render_cached(["b", "a"], render, (4, 4, 3), tmp_path / "full", progress=False) == full[::-1]).all()
    with pytest.raises(PermissionError) as e: D.render_cached(["a", "c"], render, (4, 4, 3), tmp_path / "full", progress=False)
    msg = str(e.value)
    assert "is not writable" in msg and "lacks 1 of 2 renders (missing or damaged: c.png)" in msg and "nothing was rendered" in msg
    (tmp_path / "empty").mkdir(); lock_read_only(tmp_path / "empty")
    with pytest.raises(PermissionError, match=r"is not writable .* lacks 2 of 2 renders \(missing or damaged: x.png, y.png\)"):
        D.render_cached(["x", "y"], render, (4, 4, 3), tmp_path / "empty", progress=False)
    with pytest.raises(PermissionError, match=r"render cache folder .*empty/sub is not writable"):
        D.render_cached(["x"], render, (4, 4, 3), tmp_path / "empty" / "sub", progress=False)
    assert calls == [0, 1]                                            # only the first, writable build rendered


@pytest.mark.parametrize("params, message", [
    (dict(image_size=8), "image_size must be >= 16"),
    (dict(render_3d_spp=2.5), "render_3d_spp must be a whole number, got 2.5"),
    (dict(render_3d_size="96"), "render_3d_size must be a whole number"),
])
def test_every_parameter_is_checked_before_any_work(tmp_path, params, message):
    from conftest import run_parameter_check
    page = Path(__file__).resolve().parents[1] / "nbs" / "01b_clevr.ipynb"
    with pytest.raises(ValueError, match=re.escape(message)): run_parameter_check(page, output_dir=str(tmp_path / "out"), **params)
    assert not (tmp_path / "out").exists()
