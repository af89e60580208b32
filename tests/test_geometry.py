"""Tests of 03_geometry beyond the notebook's own: papermill runs, bad input, invariances, other designs, any encoder."""
import json, subprocess, sys, time
from pathlib import Path

import numpy as np
import pandas as pd
import papermill as pm
import pytest
import torch

from binding_nb.datasets import all_pairs, clevr_space, text_captions
from binding_nb.encoders import as_encoder, embed
from binding_nb.geometry import (PAPER_NUMBERS, edit_cases, estimate, fit_additive, geometry_report, reconstruct_held_out,
                                 restrict_values, scene_table, split_scenes, toy_embeddings)
from binding_nb.scenes import ConceptSpace

torch.set_num_threads(1)   # two threads stall on a busy 2-core machine
NB = Path(__file__).resolve().parents[1] / "nbs" / "03_geometry.ipynb"
TINY = ["clevr2d:3 openclip:ViT-B-32 random", "text:4 st:all-MiniLM-L6-v2 pretrained", "text:4 openclip:ViT-B-32 pretrained"]
SPACE = clevr_space()
GRID = all_pairs(SPACE)


def papermill_cmd(tmp_path: Path, *params: str) -> list[str]:
    return [sys.executable, "-m", "papermill", str(NB), str(tmp_path / "out.ipynb"), "--cwd", str(NB.parent), *params]


def test_tiny_papermill_run(tmp_path):
    out, cache = tmp_path / "results", tmp_path / "cache"
    params = ["-p", "runs", json.dumps(TINY), "-p", "ks", "[0, 1]", "-p", "output_dir", str(out), "-p", "cache_dir", str(cache)]
    t0 = time.perf_counter()
    subprocess.run(papermill_cmd(tmp_path, *params), check=True, capture_output=True)
    first = time.perf_counter() - t0
    runs = pd.read_csv(out / "geometry_runs.csv")
    assert runs.status.tolist() == ["ok", "ok", "not run"]
    assert "cannot load pretrained weights" in runs.reason.iloc[2]
    results = pd.read_csv(out / "geometry_results.csv")
    assert set(results.run) == set(TINY[:2])
    assert {"probes", "T2 reconstruction", "T4 concepts vs objects", "T3 editing", "T5 attribution"} <= set(results.table)
    assert results[results.measure.str.startswith(("retrieval", "probe"))].value.dropna().between(0, 1).all()
    side = pd.read_csv(out / "paper_vs_ours.csv")
    assert len(side) == len(PAPER_NUMBERS) and (side.paper == PAPER_NUMBERS.paper).all()        # the paper's numbers, unchanged
    assert set(side.loc[side.model.eq("CLIP ViT-B/32 text") & side.weights.eq("pretrained"), "ours"]) == {"could not run"}
    for name in ("fig2_mds", "fig3_editing"):
        for ext in ("png", "pdf"): assert (out / f"{name}.{ext}").stat().st_size > 0
    for name in ("table2_reconstruction", "table3_editing", "table4_concepts_vs_objects", "table5_attribution"):
        assert len(pd.read_csv(out / f"{name}.csv")) > 0
    cached = {p: p.stat().st_mtime_ns for p in cache.glob("*.npz")}
    assert len(cached) == 2
    outputs = json.dumps([c.get("outputs", []) for c in json.loads((tmp_path / "out.ipynb").read_text())["cells"]])
    assert "IProgress not found" not in outputs and "Traceback" not in outputs       # plain bars, no widget warning

    t0 = time.perf_counter()                                     # a second run reads the embeddings back
    subprocess.run(papermill_cmd(tmp_path, *params), check=True, capture_output=True)
    second = time.perf_counter() - t0
    print(f"tiny papermill run: {first:.0f} s, again with the cache: {second:.0f} s")
    assert {p: p.stat().st_mtime_ns for p in cache.glob("*.npz")} == cached
    pd.testing.assert_frame_equal(pd.read_csv(out / "geometry_results.csv"), results)       # and measures the same


@pytest.mark.parametrize("params, message", [
    (["-p", "runs", '["clevr openclip:ViT-B-32 random"]'], "unknown dataset 'clevr'"),
    (["-p", "runs", '["text:4 clip random"]'], "unknown encoder 'clip'"),
    (["-p", "device", "tpu7"], "pass 'auto', 'cpu', 'cuda'"),
])
def test_bad_input_fails_at_once(tmp_path, params, message):
    out = tmp_path / "results"; out.mkdir()
    keep = out / "notes.txt"; keep.write_text("precious")
    t0 = time.perf_counter()
    with pytest.raises(subprocess.CalledProcessError) as e:
        subprocess.run(papermill_cmd(tmp_path, "-p", "output_dir", str(out), "-p", "cache_dir", str(tmp_path / "cache"), *params),
                       check=True, capture_output=True, text=True)
    assert message in e.value.stderr + e.value.stdout
    assert time.perf_counter() - t0 < 120                      # nothing was rendered or embedded
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"] and keep.read_text() == "precious"
    assert not (tmp_path / "cache").exists()


def _headline_numbers(rep) -> pd.DataFrame:
    t = rep.tidy()
    return t[t.table.isin(["T2 reconstruction", "T4 concepts vs objects", "T3 editing"]) & ~t.measure.str.startswith("probe")]


def test_invariant_to_rotation_and_scale():
    "R², retrieval and edits depend on the geometry only: an orthogonal map and a scale leave them unchanged."
    emb = toy_embeddings(SPACE, GRID, "objects", dim=32)
    q = np.linalg.qr(np.random.default_rng(1).normal(size=(32, 32)))[0]
    sections = ["reconstruction", "concepts_vs_objects", "editing"]
    a = _headline_numbers(geometry_report(emb, (GRID, SPACE), sections=sections, device="cpu"))
    b = _headline_numbers(geometry_report(3.0 * emb @ q, (GRID, SPACE), sections=sections, device="cpu"))
    np.testing.assert_allclose(a.value.to_numpy(float), b.value.to_numpy(float), atol=1e-5)


def test_scene_order_does_not_matter():
    "Shuffling the dataset's scenes (with their embeddings) changes no number that does not depend on the probes' seeded split."
    emb = toy_embeddings(SPACE, GRID, "positional", dim=32)
    perm = np.random.default_rng(2).permutation(len(GRID))
    kw = dict(sections=["reconstruction", "concepts_vs_objects"], max_queries=None, device="cpu")
    a, b = geometry_report(emb, (GRID, SPACE), **kw), geometry_report(emb[perm], (GRID[perm], SPACE), **kw)
    for col in ("r2", "r2_held_out", "retrieval", "retrieval_held_out", "retrieval_chance"):
        np.testing.assert_allclose(a.reconstruction[col], b.reconstruction[col], atol=1e-9)
    np.testing.assert_allclose(a.concepts_vs_objects.r2, b.concepts_vs_objects.r2, atol=1e-9)


def test_incomplete_design():
    "With scenes missing (some objects never in some slot), estimates skip what they cannot estimate, and least squares stays exact."
    keep = np.random.default_rng(3).random(len(GRID)) < 0.6
    keep[576:] = True
    emb = toy_embeddings(SPACE, GRID[keep], "objects", dim=16)
    rep = geometry_report(emb, (GRID[keep], SPACE), device="cpu")
    assert rep.reconstruction.r2.min() > 0.9 and np.isfinite(rep.reconstruction.r2_held_out).all()
    table = scene_table(emb, (GRID[keep], SPACE))
    for unit in ("object", "concept"):
        fit = fit_additive(table, unit, positional=True)
        X = fit.design(SPACE, table.values).toarray()
        X = np.concatenate([np.ones((len(X), 1)), X[:, X.any(0)]], 1)
        ref = X @ np.linalg.lstsq(X, table.emb.astype(np.float64), rcond=None)[0]
        np.testing.assert_allclose(fit.predict(SPACE, table.values), ref, atol=1e-6)


def test_three_object_scenes():
    "Everything runs on scenes of three objects; leaving a scene out also leaves out its five reorderings."
    space = ConceptSpace([3, 2], names=("color", "shape"))
    ids = np.stack(np.meshgrid(*[np.arange(6)] * 3, indexing="ij"), -1).reshape(-1, 3)
    scenes = np.concatenate([space.object_values(ids), np.stack([space.object_values(np.arange(6)), *[np.full((6, 2), -1)] * 2], 1)])
    emb = toy_embeddings(space, scenes, "objects", dim=24)
    rep = geometry_report(emb, (scenes, space), device="cpu")
    assert rep.table.m == 3 and rep.table.n == 216 and len(rep.table.single_ids) == 6
    assert rep.reconstruction.set_index("estimator").loc["AVG", "retrieval"] == 1.0
    table = rep.table
    loo = reconstruct_held_out(table, "avg")
    for r in (0, 7, 100):
        others = np.flatnonzero(table.keys() != table.keys()[r])
        again = estimate(table.subset(others), "object", "avg").reconstruct(space, table.values[r:r + 1])[0]
        np.testing.assert_allclose(loo[r], again, atol=1e-5)
    assert len(edit_cases(table, "shape")) > 0


def _bag_of_words(texts: list) -> np.ndarray:
    "A fixed random vector per word, summed: a bag of concepts by construction (word order is lost)."
    words = sorted({w for t in texts for w in t.split()})
    vec = {w: np.random.default_rng(sum(map(ord, w))).normal(size=48) for w in words}
    return np.stack([sum(vec[w] for w in t.split()) for t in texts]).astype(np.float32)


def _bound_words(texts: list) -> np.ndarray:
    "Each 'attribute noun' pair gets its own random vector: objects, with nothing shared between 'red cube' and 'red ball'."
    out = []
    for t in texts:
        phrases = [p.removeprefix("a ").strip() for p in t.replace(" and ", ", ").split(", ")]
        out.append(sum(np.random.default_rng(sum(map(ord, p)) * 7 + len(p)).normal(size=48) for p in phrases))
    return np.stack(out).astype(np.float32)


def test_any_callable_encoder_on_captions(tmp_path):
    "A plain function is an encoder: a bag of words reads as a bag of concepts, pair vectors as bound objects."
    grid = restrict_values(text_captions(), 5)
    bow = geometry_report(embed(as_encoder(_bag_of_words, name="bow"), grid, cache_dir=tmp_path, progress=False), grid, device="cpu")
    bound = geometry_report(embed(as_encoder(_bound_words, name="bound"), grid, progress=False), grid, device="cpu")
    held = lambda rep: rep.probes.set_index("scenes").loc["held-out"]
    assert held(bow).concept == 1.0 and held(bow).object <= held(bow).bag_of_concepts + 0.02
    assert held(bound).object > held(bound).bag_of_concepts + 0.2
    c4 = bow.concepts_vs_objects.set_index(["target", "predictors", "positional"]).r2
    assert c4[("scene", "concepts", False)] > 0.999                 # exactly a sum of word vectors
    a5 = bound.attribution.set_index("variant")
    assert a5.loc["concepts removed", "probe_object"] > 0.9 > 0.1 > a5.loc["objects removed", "probe_object"]


@pytest.mark.parametrize("bad, message", [
    (lambda: geometry_report(np.zeros((10, 4)), (GRID, SPACE)), "got 10 embeddings for 600 scenes"),
    (lambda: geometry_report(np.full((600, 4), np.inf), (GRID, SPACE)), "hold NaN or inf"),
    (lambda: geometry_report(np.zeros((600, 4), dtype=object), (GRID, SPACE)), "numeric array"),
    (lambda: geometry_report(np.zeros((600, 4)), (GRID[576:], SPACE)), "got 600 embeddings for 24 scenes"),
    (lambda: geometry_report(np.zeros((24, 4)), (GRID[576:], SPACE)), "only single-object scenes"),
    (lambda: geometry_report(np.zeros((600, 4)), (GRID, SPACE), edit_concept="size"), "unknown concept 'size'"),
    (lambda: geometry_report(np.zeros((600, 4)), (GRID, SPACE), edit_concept=2), "concept 2 out of range"),
    (lambda: geometry_report(np.zeros((600, 4)), (GRID, SPACE), train_fraction=0), "train_fraction must be in (0, 1)"),
    (lambda: geometry_report(np.zeros((600, 4)), (GRID, SPACE), device="tpu"), "unknown device"),
    (lambda: split_scenes(10, 1.5), "train_fraction must be in (0, 1)"),
    (lambda: restrict_values(text_captions(n_pairs=50, singles=False), 1), "keep must be >= 2"),
])
def test_bad_input(bad, message):
    with pytest.raises(ValueError, match=None) as e: bad()
    assert message in str(e.value)


@pytest.mark.gpu
def test_cuda_matches_cpu():
    emb = toy_embeddings(SPACE, GRID, "positional", dim=32)
    a, b = geometry_report(emb, (GRID, SPACE), device="cpu"), geometry_report(emb, (GRID, SPACE), device="cuda")
    ta, tb = a.tidy(), b.tidy()
    np.testing.assert_allclose(ta.value.to_numpy(float), tb.value.to_numpy(float), atol=0.02)
