"""Tests of §4 (03_geometry and its pages 03b–03g) beyond the pages' own: papermill runs, known answers, bad input, invariances, other designs, any encoder."""
import json, subprocess, sys, time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from binding_nb.cache import embed
from binding_nb.datasets import all_pairs, clevr_space, text_captions
from binding_nb.encoders import as_encoder
from binding_nb.geometry import geometry_report, probe_split, scene_table
from binding_nb.geometry.additive import estimate, fit_additive, reconstruct_held_out
from binding_nb.geometry.tables import edit_cases, editing_table, reconstruction_table
from binding_nb.paper import GEOMETRY_NUMBERS
from binding_nb.encoder_runs import RunSpec, dataset_by_name, restrict_values, run_geometry
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

    torch.set_num_threads(1)                                                   # as the page runs (threads 1): the same float sums
    status, reports = run_geometry([test_run], cache, device="cpu", progress=False, ks=[0, 1])   # again: a cache hit
    assert {p: p.stat().st_mtime_ns for p in cache.glob("*.npz")} == cached
    ours = pd.DataFrame([reports[test_run.name].key_numbers()])
    pd.testing.assert_frame_equal(ours, pd.read_csv(out / "key_numbers.csv")[ours.columns], check_dtype=False, atol=1e-6)


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
    "160,400 captions' worth of scenes: retrieval and probes run in blocks and samples (their sizes checked; the time is bench_geometry's)."
    space, objects = text_captions().space, text_captions().objects
    emb = toy_embeddings(space, objects, "objects", dim=32)
    rep = geometry_report(emb, (objects, space), sections=["reconstruction"], estimators=["avg"], max_queries=256,
                          max_probe_scenes=2048, probe_iters=30, device="cpu")
    r = rep.reconstruction.iloc[0]
    assert r.n == 160_000 and r.n_retrieval == 256 and r.r2 > 0.9 and r.retrieval > 0.9


@pytest.mark.gpu
def test_cuda_matches_cpu():
    emb = toy_embeddings(SPACE, GRID, "positional", dim=32)
    a, b = geometry_report(emb, (GRID, SPACE), device="cpu"), geometry_report(emb, (GRID, SPACE), device="cuda")
    np.testing.assert_allclose(_headline(a), _headline(b), atol=0.02)


# --- runs that fail, read-only caches, parameters, duplicates, degenerate input ---------------------------------------------

class _Words:
    "A bag of words as an encoder (module-level, so the cache keys it by name); counts its calls, and fails when told to."
    def __init__(self, fail: str | None = None): self.calls, self.fail = 0, fail
    def __call__(self, texts):
        self.calls += 1
        if self.fail: raise RuntimeError(self.fail)
        return _bag_of_words(texts)


def _toy_encoders(monkeypatch, encoders: dict, preflight=lambda name, pretrained=None: None):
    "Make `run_geometry` load `encoders[name]` for `st:<name>` (no model is downloaded) and pre-check weights with `preflight`."
    import binding_nb.encoder_runs as R
    loaded = []
    def load(name, pretrained=None, modality=None, device="auto"):
        loaded.append(name)
        fn = encoders[name.split(":", 1)[1]]
        if isinstance(fn, Exception): raise fn
        return as_encoder(fn, name=name, modality="text", weights=str(pretrained))
    monkeypatch.setattr(R, "load_encoder", load)
    monkeypatch.setattr(R, "check_weights", preflight, raising=False)
    return loaded


def test_a_failed_run_keeps_the_finished_ones(tmp_path, monkeypatch):
    "A run that fails while embedding or loading is 'failed' with its reason; the runs before it are saved as they finish, the later ones go on."
    out = tmp_path / "out"
    seen_before_failure = []
    class Damaged(_Words):
        def __call__(self, texts):
            seen_before_failure.append(pd.read_csv(out / "geometry_runs.csv").run.tolist())
            raise RuntimeError("the checkpoint is damaged")
    encs = dict(good=_Words(), damaged=Damaged(), missing=ValueError("no such tag 'opneai'"), after=_Words())
    _toy_encoders(monkeypatch, encs)
    runs = [RunSpec("text:3", f"st:{e}") for e in encs]
    with pytest.warns(UserWarning, match=r"2 of 4 runs failed.*st:damaged.*st:missing"):
        status, reports = run_geometry(runs, device="cpu", progress=False, output_dir=out, ks=[0, 1])
    assert status.status.tolist() == ["ok", "failed", "failed", "ok"]
    assert "the checkpoint is damaged" in status.reason[1] and "no such tag 'opneai'" in status.reason[2]
    assert set(reports) == {runs[0].name, runs[3].name}
    assert seen_before_failure == [[runs[0].name]]                           # the first run was on disk before the second began
    saved = pd.read_csv(out / "geometry_runs.csv")
    assert saved.status.tolist() == status.status.tolist() and saved.reason[1] == status.reason[1]
    assert pd.read_csv(out / "key_numbers.csv").run.tolist() == [runs[0].name, runs[3].name]
    assert sorted(pd.read_csv(out / "table2_reconstruction.csv").run.unique()) == sorted([runs[0].name, runs[3].name])


def test_a_failed_measurement_keeps_the_others(tmp_path, monkeypatch):
    import binding_nb.encoder_runs as R
    _toy_encoders(monkeypatch, dict(good=_Words(), other=_Words()))
    real = R.geometry_report
    def report(emb, data, **kw):
        if len(data) == 16 + 4: raise FloatingPointError("the probes diverged")
        return real(emb, data, **kw)
    monkeypatch.setattr(R, "geometry_report", report)
    runs = [RunSpec("text:2", "st:good"), RunSpec("text:3", "st:other")]
    with pytest.warns(UserWarning, match="1 of 2 runs failed"):
        status, reports = run_geometry(runs, device="cpu", progress=False, output_dir=tmp_path, ks=[0, 1])
    assert status.status.tolist() == ["failed", "ok"] and "the probes diverged" in status.reason[0]
    assert pd.read_csv(tmp_path / "key_numbers.csv").run.tolist() == [runs[1].name]


def test_every_run_is_checked_before_the_first(monkeypatch):
    "A weights tag or path that cannot work stops the list before the first run is loaded."
    def preflight(name, pretrained=None):
        if pretrained == "opneai": raise ValueError(f"{name} has no pretrained tag 'opneai'")
    loaded = _toy_encoders(monkeypatch, dict(good=_Words(), typo=_Words()), preflight)
    with pytest.raises(ValueError, match="no pretrained tag 'opneai'"):
        run_geometry([RunSpec("text:3", "st:good"), RunSpec("text:3", "st:typo", "opneai")], device="cpu", progress=False)
    assert loaded == []


def test_weights_typo_refused_before_any_run():
    "The real pre-flight (no model is loaded): a tag the architecture lacks."
    import binding_nb.encoders as E
    if not hasattr(E, "check_weights"): pytest.skip("binding_nb.encoders.check_weights is not there yet")
    with pytest.raises(ValueError, match="opneai"):
        run_geometry([RunSpec("text:3", "openclip:ViT-B-32"), RunSpec("text:3", "openclip:ViT-B-32", "opneai")], device="cpu", progress=False)


def test_read_only_cache_is_served(tmp_path, monkeypatch):
    "A cache that already holds every embedding serves them though it cannot be written."
    import errno, os, tempfile
    if os.geteuid() == 0:                       # root ignores permission bits: refuse writes as the kernel does for other users
        real = tempfile.mkstemp
        def mkstemp(*args, dir=None, **kwargs):
            if dir is not None and not os.stat(dir).st_mode & 0o200: raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(dir))
            return real(*args, dir=dir, **kwargs)
        monkeypatch.setattr(tempfile, "mkstemp", mkstemp)
    words = _Words()
    _toy_encoders(monkeypatch, dict(words=words))
    cache, runs = tmp_path / "cache", [RunSpec("text:3", "st:words")]
    first, reps = run_geometry(runs, cache, device="cpu", progress=False, ks=[0, 1])
    calls = words.calls
    cache.chmod(0o555)
    try:
        again, reps2 = run_geometry(runs, cache, device="cpu", progress=False, ks=[0, 1])
    finally:
        cache.chmod(0o755)
    assert again.status.tolist() == ["ok"] and words.calls == calls       # read back, nothing embedded
    assert reps2[runs[0].name].key_numbers() == pytest.approx(reps[runs[0].name].key_numbers(), nan_ok=True)


def test_identical_scenes_stay_on_one_side_of_the_probe_split():
    "Two copies of every scene: a copy in the training scenes must not lift held-out accuracy, so both copies fall on one side."
    doubled = np.concatenate([GRID[:576], GRID[:576], GRID[576:]])
    emb = toy_embeddings(SPACE, doubled, "objects")
    table = scene_table(emb, (doubled, SPACE))
    train, test = probe_split(table.n, 0.4, 0, groups=table.keys(ordered=True))
    assert not np.isin(table.keys(ordered=True)[test], table.keys(ordered=True)[train]).any()
    assert (len(train), len(test)) == (2 * 230, 2 * 346)
    np.testing.assert_array_equal(probe_split(576, 0.4, 0, groups=np.arange(576))[0], probe_split(576, 0.4, 0)[0])   # unique: as before
    rep = geometry_report(emb, (doubled, SPACE), sections=[], device="cpu")
    assert rep.probes.set_index("scenes").n.to_dict() == {"train": 460, "held-out": 692}


@pytest.mark.parametrize("bad, message", [
    (lambda: geometry_report(np.zeros((600, 4)), (GRID, SPACE), estimators=[]), "estimators must name at least one"),
    (lambda: geometry_report(np.zeros((600, 4)), (GRID, SPACE), sections="editing"), "sections must be a list of names"),
    (lambda: geometry_report(np.zeros((600, 4)), (GRID, SPACE), estimators="avg"), "estimators must be a list of names"),
    (lambda: geometry_report(np.zeros((600, 0)), (GRID, SPACE)), "embeddings have no dimensions"),
    (lambda: geometry_report(np.r_[np.ones((599, 4)), [[0, -1e39, 0, 0]]], (GRID, SPACE)), "-1e+39 in scene 599"),
    (lambda: toy_embeddings(SPACE, GRID, "table", dim=0), "dim must be >= 1"),
    (lambda: toy_embeddings(SPACE, GRID, "objects", noise=float("nan")), "noise must be a finite number"),
    (lambda: toy_embeddings(SPACE, GRID, "objects", dim=0), "dim must be >= 1"),
    (lambda: dataset_by_name("text:3", n_pairs=100_000), "n_pairs=100,000 is more than the 81"),
])
def test_degenerate_input(bad, message):
    with pytest.raises((ValueError, TypeError)) as e: bad()
    assert message in str(e.value)


def test_constant_embeddings_are_refused():
    "No variance: nothing to explain or attribute, so the report is refused in a sentence, before any probe is fitted."
    with pytest.raises(ValueError, match=r"are constant \(every scene the same vector\).*check the encoder"):
        geometry_report(np.ones((600, 4)), (GRID, SPACE), device="cpu", ks=[0, 1])


def _failing_cell(path: Path) -> tuple[int, int]:
    "Index of the cell that raised in a papermill output notebook, and of the first cell of the page's first section."
    cells = json.loads(path.read_text())["cells"]
    failed = next(i for i, c in enumerate(cells) if any(o.get("output_type") == "error" for o in c.get("outputs", [])))
    first = next(i for i, c in enumerate(cells) if c["cell_type"] == "markdown" and "".join(c["source"]).startswith("## The experiment"))
    return failed, first


def test_page_checks_every_parameter_first(tmp_path):
    """Under papermill's kernel a bad parameter stops the page in the cell after its parameters, before the page renders,
    embeds or writes anything; what the output folder held is untouched (the other cases run in process below)."""
    out = tmp_path / "results"; out.mkdir()
    (out / "notes.txt").write_text("precious")
    r = papermill(tmp_path, *ONE_RUN, "-p", "device", "tpu7", "-p", "output_dir", str(out), "-p", "cache_dir", str(tmp_path / "cache"),
                  check=False)
    assert r.returncode != 0 and "pass 'auto', 'cpu', 'cuda'" in r.stderr + r.stdout
    failed, first = _failing_cell(tmp_path / "out.ipynb")
    assert failed < first
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"] and (out / "notes.txt").read_text() == "precious"
    assert not (tmp_path / "cache").exists()


@pytest.mark.parametrize("params, message", [
    (dict(seed=-1), "seed must be >= 0"),
    (dict(threads=2.5), "threads must be a whole number"),
    (dict(dataset="text:4"), "dataset applies only to one run"),
    (dict(train_fraction=1.5), "train_fraction must be in (0, 1)"),
    (dict(ks='["strong"]'), "ks[0] must be a finite number"),
    (dict(clip_weights="opneai"), "has no pretrained tag 'opneai'"),
])
def test_every_parameter_is_checked_in_the_check_cell(tmp_path, params, message):
    "The other cases, run as papermill runs the page through its check cell, without a kernel."
    from conftest import run_parameter_check
    with pytest.raises((ValueError, TypeError)) as e:
        run_parameter_check(NB, output_dir=str(tmp_path / "results"), cache_dir=str(tmp_path / "cache"), **params)
    assert message in str(e.value), str(e.value)
    assert not (tmp_path / "results").exists() and not (tmp_path / "cache").exists()
