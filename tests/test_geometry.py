"""Tests of 03_geometry beyond the notebook's own: papermill runs, known answers, bad input, invariances, other designs, any encoder."""
import json, subprocess, sys, time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from binding_nb.datasets import all_pairs, clevr_space, text_captions
from binding_nb.encoders import as_encoder, embed
from binding_nb.geometry import geometry_report, probe_split, scene_table
from binding_nb.geometry.additive import estimate, fit_additive, reconstruct_held_out
from binding_nb.geometry.tables import edit_cases, editing_table, reconstruction_table
from binding_nb.paper import GEOMETRY_NUMBERS
from binding_nb.runs import RunSpec, dataset_by_name, restrict_values, run_geometry
from binding_nb.toys import toy_embeddings
from binding_nb.scenes import ConceptSpace

torch.set_num_threads(1)   # two threads stall on a busy 2-core machine
NB = Path(__file__).resolve().parents[1] / "nbs" / "03_geometry.ipynb"
SPACE = clevr_space()
GRID = all_pairs(SPACE)
ONE_RUN = ["-p", "encoder", "st:all-MiniLM-L6-v2", "-p", "pretrained", "default", "-p", "dataset", "text:4", "-p", "ks", "[0, 1]"]


def papermill(tmp_path: Path, *params: str, check: bool = True) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "papermill", str(NB), str(tmp_path / "out.ipynb"), "--cwd", str(NB.parent), *params]
    return subprocess.run(cmd, check=check, capture_output=True, text=True)


def test_one_run_by_papermill(tmp_path):
    "The single-run parameters: every table as CSV, the figures as PNG and PDF, and a second run reads the embeddings back."
    out, cache = tmp_path / "results", tmp_path / "cache"
    papermill(tmp_path, *ONE_RUN, "-p", "output_dir", str(out), "-p", "cache_dir", str(cache))
    runs = pd.read_csv(out / "geometry_runs.csv")
    test_run = RunSpec("text:4", "st:all-MiniLM-L6-v2", "default")
    assert runs.run.tolist() == [test_run.name] and runs.status.tolist() == ["ok"]
    for name in ("table1_estimators", "table2_reconstruction", "table3_editing", "table4_concepts_vs_objects", "table5_attribution",
                 "probes", "key_numbers"):
        assert len(pd.read_csv(out / f"{name}.csv")) > 0, name
    for name in ("fig2_mds", "fig3_editing"):
        for ext in ("png", "pdf"): assert (out / f"{name}.{ext}").stat().st_size > 0
    side = pd.read_csv(out / "paper_vs_ours.csv")
    assert (side.paper == GEOMETRY_NUMBERS.paper).all()                                   # the paper's numbers, unchanged
    t2 = pd.read_csv(out / "table2_reconstruction.csv")
    assert t2[["retrieval", "probe_concept", "probe_object"]].stack().between(0, 1).all()
    outputs = json.dumps([c.get("outputs", []) for c in json.loads((tmp_path / "out.ipynb").read_text())["cells"]])
    assert "IProgress not found" not in outputs and "Traceback" not in outputs
    cached = {p: p.stat().st_mtime_ns for p in cache.glob("*.npz")}
    assert len(cached) == 1

    status, reports = run_geometry([test_run], cache, device="cpu", progress=False, ks=[0, 1])   # again: a cache hit
    assert {p: p.stat().st_mtime_ns for p in cache.glob("*.npz")} == cached
    ours = pd.DataFrame([reports[test_run.name].key_numbers()])
    pd.testing.assert_frame_equal(ours, pd.read_csv(out / "key_numbers.csv")[ours.columns], check_dtype=False, atol=1e-6)


def test_bad_parameters_fail_at_once(tmp_path):
    "A bad parameter stops the notebook at its parameters, before anything is rendered, embedded or written."
    out = tmp_path / "results"; out.mkdir()
    (out / "notes.txt").write_text("precious")
    t0 = time.perf_counter()
    r = papermill(tmp_path, *ONE_RUN, "-p", "device", "tpu7", "-p", "output_dir", str(out), "-p", "cache_dir", str(tmp_path / "cache"),
                  check=False)
    assert r.returncode != 0 and "pass 'auto', 'cpu', 'cuda'" in r.stderr + r.stdout
    assert time.perf_counter() - t0 < 120
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"] and (out / "notes.txt").read_text() == "precious"
    assert not (tmp_path / "cache").exists()


@pytest.mark.parametrize("bad, message", [
    (lambda: RunSpec("clevr", "openclip:ViT-B-32"), "unknown dataset 'clevr'"),
    (lambda: RunSpec("text:4", "clip"), "unknown encoder 'clip'"),
    (lambda: RunSpec("text:4", "st:all-MiniLM-L6-v2", n_pairs=2), "n_pairs must be >= 4"),
    (lambda: dataset_by_name("pug_spare"), "needs the downloaded PUG:SPARE folder"),
    (lambda: geometry_report(np.zeros((10, 4)), (GRID, SPACE)), "got 10 embeddings for 600 scenes"),
    (lambda: geometry_report(np.full((600, 4), np.nan), (GRID, SPACE)), "hold NaN or inf"),
    (lambda: geometry_report(np.zeros((600, 4), dtype=object), (GRID, SPACE)), "numeric array"),
    (lambda: geometry_report(np.zeros((24, 4)), (GRID[576:], SPACE)), "no scene of two or more objects"),
    (lambda: geometry_report(np.zeros((600, 4)), (GRID, SPACE), edit_concept="size"), "unknown concept 'size'"),
    (lambda: geometry_report(np.zeros((600, 4)), (GRID, SPACE), edit_concept=2), "concept 2 out of range"),
    (lambda: geometry_report(np.zeros((600, 4)), (GRID, SPACE), train_fraction=0), "train_fraction must be in (0, 1)"),
    (lambda: geometry_report(np.zeros((600, 4)), (GRID, SPACE), estimators=["median"]), "unknown estimator 'median'"),
    (lambda: geometry_report(np.zeros((600, 4)), (GRID, SPACE), device="tpu"), "unknown device"),
    (lambda: probe_split(10, 1.5), "train_fraction must be in (0, 1)"),
    (lambda: restrict_values(text_captions(n_pairs=50, singles=False), 1), "n must be >= 2"),
])
def test_bad_input(bad, message):
    with pytest.raises((ValueError, FileNotFoundError)) as e: bad()
    assert message in str(e.value)


def test_known_answers():
    "Exactly additive: R² 1, retrieval 1, edits 1. Noise: R² about 0 and retrieval at chance. A large slot-specific object term: AVG far below the bound."
    exact = scene_table(toy_embeddings(SPACE, GRID, "objects", noise=0), (GRID, SPACE))
    t2 = reconstruction_table(exact, device="cpu").set_index("estimator")
    np.testing.assert_allclose(t2.r2, 1, atol=1e-5)
    assert (t2.retrieval == 1).all() and (t2.retrieval_held_out.drop("LSQ") == 1).all()
    t3 = editing_table(exact, edit_cases(exact, "color"), device="cpu").query("k == 1")
    assert (t3.retrieval == 1).all()

    noise = scene_table(toy_embeddings(SPACE, GRID, "noise"), (GRID, SPACE))
    n2 = reconstruction_table(noise, device="cpu").set_index("estimator").drop(["SINGLE", "LSQ"])
    assert (n2.r2_held_out.abs() < 0.1).all() and (n2.r2 < 2 * n2.r2_shuffled + 0.02).all()
    assert (n2.retrieval_held_out <= 3 * n2.retrieval_chance).all()

    for binding in (1.5, 3.0):
        big = scene_table(toy_embeddings(SPACE, GRID, "positional", binding=binding), (GRID, SPACE))
        b2 = reconstruction_table(big, device="cpu").set_index("estimator").r2
        assert b2["AVG"] < b2["LSQ"] - 0.3 and b2["AVG+POS"] > b2["LSQ"] - 1e-4


def _headline(rep) -> np.ndarray:
    kn = rep.key_numbers()
    return np.array([v for k, v in kn.items() if not ("probe" in k or "removed" in k)], float)


def test_invariant_to_rotation_and_scale():
    "R², retrieval and edits depend on the geometry only: an orthogonal map and a scale leave them unchanged."
    emb = toy_embeddings(SPACE, GRID, "objects", dim=32)
    q = np.linalg.qr(np.random.default_rng(1).normal(size=(32, 32)))[0]
    sections = ["reconstruction", "concepts_vs_objects", "editing"]
    a = geometry_report(emb, (GRID, SPACE), sections=sections, device="cpu")
    b = geometry_report(3.0 * emb @ q, (GRID, SPACE), sections=sections, device="cpu")
    np.testing.assert_allclose(_headline(a), _headline(b), atol=1e-5)


def test_scene_order_does_not_matter():
    "Shuffling the dataset's scenes (with their embeddings) changes no number that does not depend on the seeded samples."
    emb = toy_embeddings(SPACE, GRID, "positional", dim=32)
    perm = np.random.default_rng(2).permutation(len(GRID))
    kw = dict(sections=["reconstruction", "concepts_vs_objects"], max_queries=None, device="cpu")
    a, b = geometry_report(emb, (GRID, SPACE), **kw), geometry_report(emb[perm], (GRID[perm], SPACE), **kw)
    for col in ("r2", "r2_held_out", "retrieval", "retrieval_held_out", "retrieval_chance"):
        np.testing.assert_allclose(a.reconstruction[col], b.reconstruction[col], atol=1e-6)
    np.testing.assert_allclose(a.concepts_vs_objects.r2, b.concepts_vs_objects.r2, atol=1e-6)


def test_incomplete_design():
    "With scenes missing (some objects never in some slot), estimates skip what they cannot estimate, and least squares stays exact."
    keep = np.random.default_rng(3).random(len(GRID)) < 0.6
    keep[576:] = True
    emb = toy_embeddings(SPACE, GRID[keep], "objects", dim=16)
    rep = geometry_report(emb, (GRID[keep], SPACE), device="cpu")
    assert rep.reconstruction.r2.min() > 0.9 and np.isfinite(rep.reconstruction.r2_held_out.drop(index=3)).all()
    table = scene_table(emb, (GRID[keep], SPACE))
    for unit in ("object", "concept"):
        fit = fit_additive(table, unit, positional=True)
        units = table.ids[..., None] if unit == "object" else np.asarray(SPACE.value_index(table.values))
        size = SPACE.n_objects if unit == "object" else SPACE.n_values
        X = np.zeros((table.n, 2 * size))
        for i in range(2):
            for k in range(units.shape[2]): np.add.at(X, (np.arange(table.n), i * size + units[:, i, k]), 1)
        X = np.concatenate([np.ones((table.n, 1)), X[:, X.any(0)]], 1)
        ref = X @ np.linalg.lstsq(X, table.emb.astype(np.float64), rcond=None)[0]
        np.testing.assert_allclose(fit.predict(table.values), ref, atol=1e-4)


def test_three_object_scenes():
    "Everything runs on scenes of three objects; leaving a scene out also leaves out its five reorderings."
    space = ConceptSpace([3, 2], names=("color", "shape"))
    ids = np.stack(np.meshgrid(*[np.arange(6)] * 3, indexing="ij"), -1).reshape(-1, 3)
    scenes = np.concatenate([space.object_values(ids), np.stack([space.object_values(np.arange(6)), *[np.full((6, 2), -1)] * 2], 1)])
    emb = toy_embeddings(space, scenes, "objects", dim=24)
    rep = geometry_report(emb, (scenes, space), device="cpu")
    assert rep.table.m == 3 and rep.table.n == 216 and len(rep.table.single_ids) == 6
    assert rep.reconstruction.set_index("estimator").loc["AVG", "retrieval"] == 1.0
    assert set(rep.figures()) == {"fig3_editing"}                     # Fig. 2 is drawn for two-object scenes
    table = rep.table
    loo = reconstruct_held_out(table, "avg")
    for r in (0, 7, 100):
        others = np.flatnonzero(table.keys() != table.keys()[r])
        again = estimate(table.subset(others), "object", "avg").reconstruct(space, table.values[r:r + 1])[0]
        np.testing.assert_allclose(loo[r], again, atol=1e-4)
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


def test_large_text_space_in_blocks():
    "160,400 captions' worth of scenes: retrieval and probes run in blocks and samples, within memory and time."
    space, objects = text_captions().space, text_captions().objects
    emb = toy_embeddings(space, objects, "objects", dim=32)
    t0 = time.perf_counter()
    rep = geometry_report(emb, (objects, space), sections=["reconstruction"], estimators=["avg"], max_queries=256,
                          max_probe_scenes=2048, probe_iters=30, device="cpu")
    assert time.perf_counter() - t0 < 90
    r = rep.reconstruction.iloc[0]
    assert r.n == 160_000 and r.n_retrieval == 256 and r.r2 > 0.9 and r.retrieval > 0.9


@pytest.mark.gpu
def test_cuda_matches_cpu():
    emb = toy_embeddings(SPACE, GRID, "positional", dim=32)
    a, b = geometry_report(emb, (GRID, SPACE), device="cpu"), geometry_report(emb, (GRID, SPACE), device="cuda")
    np.testing.assert_allclose(_headline(a), _headline(b), atol=0.02)


def test_probes_leave_a_near_dead_dimension_unscaled():
    "A dimension with 5e-8 of the widest spread (MiniLM has one at 2e-8) is not amplified: its weight stays small, and the probes read the same."
    from binding_nb.geometry import fit_probes
    space = clevr_space()
    scenes = all_pairs(space)
    emb = toy_embeddings(space, scenes, "objects")
    rng = np.random.default_rng(0)
    dead = np.concatenate([emb, (5e-8 * emb.std(0).max() * rng.standard_normal((len(emb), 1))).astype(np.float32)], 1)
    tables = [scene_table(e, (scenes, space)) for e in (emb, dead)]
    split = probe_split(tables[0].n, 0.4, 0)
    plain, with_dead = (fit_probes(t, *split, device="cpu") for t in tables)
    assert with_dead.weight[-1].abs().max() < 1e-3 * with_dead.weight.abs().max()      # was about 1e8 times the others
    acc = lambda p, t: p.accuracy(t.emb[split[1]], t.values[split[1]])
    assert acc(with_dead, tables[1]) == pytest.approx(acc(plain, tables[0]), abs=1e-9)
