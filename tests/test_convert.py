"""The one converter of files older versions wrote (scripts/convert_old_runs.py): old checkpoints and results tables become files this version reads."""
import csv, importlib.util, io, os, re, subprocess, sys, warnings
from pathlib import Path

import pytest
import torch

from binding_nb.coverage import has_run, run_checkpoint
from binding_nb.evaluation import COVERAGE_RESULTS, OPTIONAL_RESULTS, SPLIT_METRICS
from binding_nb.train import build_model, make_optimizer, train_run
from binding_nb.complexity import COMPLEXITY_RESULTS
from binding_nb.learned import LEARNED_RESULTS
from binding_nb.results import CONVERT_ADVICE
from binding_nb.loop import TrainState
from binding_nb.checkpoints import load_model, read_checkpoint, save_checkpoint
from binding_nb.config import run_config
from binding_nb.utils import make_generator, write_verified

torch.set_num_threads(1)

_spec = importlib.util.spec_from_file_location("convert_old_runs", Path(__file__).parents[1] / "scripts" / "convert_old_runs.py")
convert_old_runs = importlib.util.module_from_spec(_spec); _spec.loader.exec_module(convert_old_runs)

from conftest import TINY_RUN

CFG = run_config(**TINY_RUN)
OLD_FLAT = dict(level=1, image_size=32, square=10, noise=0.3, patch=4, conv_depth=2, conv_channels=32)


def _old_weights(weights: dict) -> dict:
    "A tower's weights as the single-module encoder named them: no stem. or body. after the tower's name."
    return {k.replace("encoder.stem.", "encoder.").replace("encoder.body.", "encoder."): v for k, v in weights.items()}


def _make_old(path: Path, old: Path) -> dict:
    "Rewrite today's checkpoint at `path` as an older version wrote it, at `old`: flat pixel fields in the config, old weight keys."
    ck = read_checkpoint(path)
    ck = {**ck, "config": {**ck["config"], **OLD_FLAT}, "model": _old_weights(ck["model"]), "best_model": _old_weights(ck["best_model"])}
    buf = io.BytesIO(); torch.save(ck, buf); write_verified(old, buf.getvalue(), "checkpoint")
    path.unlink()
    return ck


def test_the_old_rule_gives_the_committed_keys():
    "The converter's copy of the old key rule reproduces a key of a committed table (results/plateau/cpu_search.csv, its defaults)."
    cfg = run_config(C=2, V=50, coverage=0.9, steps=1500, batch_size=128, device="cpu")
    assert convert_old_runs.old_model_key(cfg) == "4b151d5b3d" and cfg.model_key() != "4b151d5b3d"


def test_old_pixel_settings_move_into_input_settings():
    "Flat pixel settings: the non-default ones of a pixel run go to input_settings; a token run drops them."
    pixels = convert_old_runs.new_config({"inputs": "pixels", **OLD_FLAT, "level": 3, "patch": 8})
    assert pixels["input_settings"] == dict(level=3, patch=8) and not set(OLD_FLAT) & set(pixels)
    assert convert_old_runs.new_config({"inputs": "pixels", **OLD_FLAT})["input_settings"] is None
    assert convert_old_runs.new_config({**OLD_FLAT, "V": 7}) == run_config(V=7).settings()
    with pytest.raises(ValueError, match=r"\(dropout\)"): convert_old_runs.new_config(dict(dropout=0.1))


def test_an_old_checkpoint_is_refused_then_converted_loads_and_resumes(tmp_path, uninterrupted):
    "An old checkpoint is refused; converted, it is named after the run's new key, loads the same weights and resumes to where an uninterrupted run ends."
    whole, _ = uninterrupted(CFG)
    out = tmp_path / "sweep"
    new = run_checkpoint(out, CFG); new.parent.mkdir(parents=True)
    assert train_run(CFG, new, stop_after=20, progress=False) is None
    best = read_checkpoint(new)["best_model"]
    old = new.with_name(f"C2_V5_cov0.8_seed0_{convert_old_runs.old_model_key(CFG)}.pt")
    _make_old(new, old)
    with pytest.raises(ValueError, match="settings this version of binding_nb does not know \\(conv_channels, conv_depth"): load_model(old)
    log = []
    keys = convert_old_runs.convert([out], log.append)
    assert keys == {convert_old_runs.old_model_key(CFG): CFG.model_key()} and not old.exists() and new.exists()
    assert len(list(new.parent.glob(f"{old.name}.bad-*"))) == 1 and f"converted to {new.name}" in log[0]     # the old file kept aside
    model, cfg = load_model(new, "cpu")
    assert cfg == CFG and all(torch.equal(model.state_dict()[k], best[k]) for k in best)
    with warnings.catch_warnings():
        warnings.simplefilter("error")                                        # nothing set aside
        resumed = train_run(CFG, new, progress=False)
    drop = lambda r: {k: v for k, v in r.items() if k != "train_seconds"}
    assert drop(resumed) == drop(whole)
    log.clear(); convert_old_runs.convert([out], log.append)
    assert log == [f"{new}: up to date"]                                      # converting twice changes nothing


def test_the_refusal_of_an_old_checkpoint_says_how_to_convert(tmp_path):
    path = tmp_path / "run.pt"
    train_run(CFG, path, stop_after=10, progress=False)
    _make_old(path, old := tmp_path / "old.pt")
    with pytest.raises(ValueError, match="python scripts/convert_old_runs.py"): read_checkpoint(old)


def _write(path: Path, header: list[str], rows: list[list]) -> None:
    with open(path, "w", newline="") as f: csv.writer(f, lineterminator="\n").writerows([header, *rows])


def test_tables_are_rekeyed_through_the_checkpoints_beside_them(tmp_path):
    "An old coverage table gains its missing columns and its runs' new keys; a row no checkpoint has a key for is reported and left; no value changes."
    out = tmp_path / "sweep"
    ck = run_checkpoint(out, CFG); ck.parent.mkdir(parents=True)
    train_run(CFG, ck, stop_after=10, progress=False)
    old_key = convert_old_runs.old_model_key(CFG)
    _make_old(ck, ck.with_name(f"C2_V5_cov0.8_seed0_{old_key}.pt"))
    header = [c for c in COVERAGE_RESULTS.columns if c not in ("status", *OPTIONAL_RESULTS)]
    row = dict(C=2, V=5, n_objects=25, coverage=0.8, seed=0, concept_acc=0.123456789012345, object_acc=0.5, object_acc_hard=0.25,
               bag_of_concepts_acc=0.5, steps=40, train_seconds=1.5, best_step=40, val_object_acc=0.5, val_concept_acc=0.5, n_fit=18,
               n_heldout=5, n_test_scenes=128, model_key=old_key, device="cpu")
    _write(COVERAGE_RESULTS.path(out), header, [[row[c] for c in header], [{**row, "model_key": "0123456789"}[c] for c in header]])
    with pytest.raises(ValueError, match=re.escape(CONVERT_ADVICE.format(path=COVERAGE_RESULTS.path(out)))):
        COVERAGE_RESULTS.read(COVERAGE_RESULTS.path(out))
    learned = LEARNED_RESULTS.path(out)
    lheader = [c for c in LEARNED_RESULTS.columns if c not in convert_old_runs.FIT_COLUMNS_ADDED]
    _write(learned, lheader, [[f"C2_V5_cov0.8_seed0_{old_key}" if c == "run" else "0.5" for c in lheader],
                              [f"C2_V5_cov0.8_seed0_abcdefabcd" if c == "run" else "0.5" for c in lheader]])
    complexity = COMPLEXITY_RESULTS.path(out)
    cheader = [c for c in COMPLEXITY_RESULTS.columns if c not in convert_old_runs.FIT_COLUMNS_ADDED]
    _write(complexity, cheader, [["clip" if c == "run" else "0.5" for c in cheader]])    # a run of a pretrained encoder: no key
    log = []
    convert_old_runs.convert([out], log.append)
    rows = list(csv.DictReader(open(complexity)))
    assert rows[0]["run"] == "clip" and list(rows[0]) == list(COMPLEXITY_RESULTS.columns)
    table = COVERAGE_RESULTS.read(COVERAGE_RESULTS.path(out))
    assert has_run(table, CFG) and table.status.tolist() == ["ok", "ok"] and table[SPLIT_METRICS].isna().all().all()
    assert table.model_key.tolist() == [CFG.model_key(), "0123456789"] and table.concept_acc[0] == 0.123456789012345
    assert any("1 row(s) not re-keyed" in l and "line 3 (0123456789)" in l for l in log), log
    rows = list(csv.DictReader(open(learned)))
    assert [r["run"] for r in rows] == [CFG.run_name(), "C2_V5_cov0.8_seed0_abcdefabcd"]
    assert all(r[c] == "" for r in rows for c in convert_old_runs.FIT_COLUMNS_ADDED) and rows[0]["object_acc"] == "0.5"
    assert any("line 3 (C2_V5_cov0.8_seed0_abcdefabcd)" in l for l in log), log
    assert len(list(out.glob("coverage_results.csv.bad-*"))) == 1 and len(list(out.glob("learned_results.csv.bad-*"))) == 1


def test_an_old_pixel_checkpoint_keeps_its_pixel_settings(tmp_path):
    "A pixel run's flat settings off their defaults become its input_settings; the converted checkpoint loads the same weights."
    cfg = run_config(C=2, V=4, inputs="pixels", input_settings=dict(level=2, patch=8), device="cpu")
    model = build_model(cfg, torch.device("cpu")); opt, sched = make_optimizer(model, cfg)
    state = TrainState(); state.best_model = model.state_dict()
    save_checkpoint(tmp_path / "today.pt", cfg, model, opt, sched, make_generator(0, torch.device("cpu")), state)
    ck = read_checkpoint(tmp_path / "today.pt")
    flat = {k: v for k, v in ck["config"].items() if k != "input_settings"} | OLD_FLAT | dict(level=2, patch=8)
    old_body = lambda w: {k.replace("encoder.body.", "encoder."): v for k, v in w.items()}
    buf = io.BytesIO(); torch.save({**ck, "config": flat, "model": old_body(ck["model"]), "best_model": old_body(ck["best_model"])}, buf)
    write_verified(tmp_path / f"C2_V4_cov0.5_seed0_{convert_old_runs.old_model_key(cfg)}.pt", buf.getvalue(), "checkpoint")
    (tmp_path / "today.pt").unlink()
    assert convert_old_runs.convert([tmp_path], lambda line: None) == {convert_old_runs.old_model_key(cfg): cfg.model_key()}
    loaded, read = load_model(tmp_path / f"{cfg.run_name()}.pt", "cpu")
    assert read == cfg and all(torch.equal(loaded.state_dict()[k], v) for k, v in model.state_dict().items())


def test_files_it_cannot_convert_are_each_reported_and_the_rest_converted(tmp_path):
    "A missing path, a file of another kind, a table of random bytes, a link and a read-only folder: each one line, left as it was; the rest converted; exit 1 with one line."
    good = tmp_path / "good" / "complexity_results.csv"; good.parent.mkdir()
    old_columns = [c for c in COMPLEXITY_RESULTS.columns if c not in convert_old_runs.FIT_COLUMNS_ADDED + tuple(COMPLEXITY_RESULTS.optional)]
    good.write_text(",".join(old_columns) + "\n")                                   # an older table: the fit columns added later missing
    junk = tmp_path / "junk" / "learned_results.csv"; junk.parent.mkdir()
    junk.write_bytes(bytes(range(256)) * 8)                                       # random bytes named as a table
    notes = tmp_path / "notes.txt"; notes.write_text("x")
    bad_ckpt = tmp_path / "bad" / "run.pt"; bad_ckpt.parent.mkdir(); bad_ckpt.write_bytes(b"not a checkpoint")
    link = tmp_path / "linked" / "run.pt"; link.parent.mkdir(); link.symlink_to(bad_ckpt)
    locked = tmp_path / "locked" / "coverage_results.csv"; locked.parent.mkdir(); locked.write_text("model_key,C,V\n")
    locked.parent.chmod(0o555)
    try:
        paths = [tmp_path / "nowhere", notes, junk, bad_ckpt, link.parent, locked, good]
        run = subprocess.run([sys.executable, str(Path(__file__).parents[1] / "scripts" / "convert_old_runs.py"), *map(str, paths)],
                             capture_output=True, text=True, timeout=300)
    finally: locked.parent.chmod(0o755)
    assert run.returncode == 1 and "Traceback" not in run.stderr, run.stderr[-2000:]
    out = run.stdout
    for p, said in [(tmp_path / "nowhere", "does not exist"), (notes, "is neither a folder"), (junk, "not a results table"),
                    (bad_ckpt, "cannot be read"), (link, "is a link")]:
        assert f"{p}: " in out and said in out.split(f"{p}: ", 1)[1].splitlines()[0], (p, out)
    assert "Re-running `torch.load`" not in out and "weights_only=False" not in out       # no advice to load unsafely
    if os.geteuid() != 0: assert f"{locked}: cannot be rewritten" in out               # root writes anywhere
    assert "added" in out.split(f"{good}: ", 1)[1].splitlines()[0]                       # the last path still converted
    assert run.stderr.strip().splitlines()[-1].startswith("convert_old_runs.py: ") and len(run.stderr.strip().splitlines()) == 1
    assert junk.read_bytes() == bytes(range(256)) * 8 and bad_ckpt.read_bytes() == b"not a checkpoint"
