"""`binding_nb diagnose` end to end, as a user runs it: the console command on MiniLM and a random-init ViT-B-32 at --budget small (the\nreports made once, by its entry point in process; the rerun, the leaderboard and bad arguments through the installed command)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

ENV = {**os.environ, "OMP_NUM_THREADS": "2", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}

def binding_nb(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["binding_nb", *args], cwd=cwd, env=ENV, capture_output=True, text=True, timeout=600)

def cache_stamps(cache: Path) -> dict:
    return {p: p.stat().st_mtime_ns for p in cache.rglob("*") if p.is_file()}

def binding_nb_in_process(*args: str, cwd: Path) -> str:
    "The console command's entry point (`binding_nb.diagnose.main`) run in this process as the command line `binding_nb ARGS` in `cwd`; its stdout."
    import contextlib, io
    from binding_nb.diagnose import main
    argv, here, out = sys.argv, os.getcwd(), io.StringIO()
    sys.argv = ["binding_nb", *args]
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out): main()
    finally: sys.argv = argv; os.chdir(here)
    return out.getvalue()

pytestmark = pytest.mark.xdist_group("diagnose")   # its module fixture is built once, on one worker

@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    """MiniLM (its packaged weights) and a random-init ViT-B-32 (CLEVR-2D, and PUG:SPARE with no data folder) diagnosed at the
    small budget, by the console command's entry point in this process (the tests below run the installed command itself)."""
    root = tmp_path_factory.mktemp("diagnose")
    pug = root / "pug"; pug.mkdir()       # a PUG:SPARE folder whose images are not downloaded: its stages cannot run
    (pug / "labels.csv").write_text("filename,character_name,character_texture,character2_name,character2_texture\n"
                                    "a.png,cat,red,dog,blue\nb.png,dog,blue,cat,red\n")
    first = binding_nb_in_process("diagnose", "st:all-MiniLM-L6-v2", "--budget", "small", "--out", "r", "--cache-dir", "cache", "--quiet", cwd=root)
    second = binding_nb_in_process("diagnose", "openclip:ViT-B-32", "--pretrained", "random", "--budget", "small", "--datasets", "clevr2d",
                                   "pug_spare", "--pug-root", "pug", "--out", "r", "--cache-dir", "cache", "--quiet", cwd=root)
    return root, first + second

MINI, CLIP = "st:all-MiniLM-L6-v2 (default)", "openclip:ViT-B-32 (random)"   # the encoders' names, as their reports give them

def report(root: Path, name: str) -> Path:
    "The report folder of the encoder `name` under `root/r`: its readable name and a hash of the whole name."
    from binding_nb.utils import fingerprint
    return root / "r" / f"{name.replace(':', '_').replace(' (', '_').rstrip(')')}_{fingerprint(name, length=8)}"

def summary(root: Path, name: str) -> dict:
    return json.loads((report(root, name) / "summary.json").read_text())

def test_each_report_has_its_files_and_numbers(reports):
    root, out = reports
    for name in (MINI, CLIP):
        folder = report(root, name)
        for f in ("report.md", "report.html", "summary.json", "verdict.csv"): assert (folder / f).stat().st_size > 0, f
        s = summary(root, name)
        assert s["command"].startswith("binding_nb diagnose ") and s["version"] and s["wall_seconds"] > 0
        assert all(0 <= v <= 1 for k, v in s["headline"].items() if "R²" not in k), s["headline"]
        html = (folder / "report.html").read_text()
        assert "<table" in html and "data:image/png;base64," in html and "Verdict" in html
    mini = summary(root, MINI)
    assert [st["name"] for st in mini["stages"]] == ["geometry_text", "complexity_text"] and {st["status"] for st in mini["stages"]} == {"ok"}
    assert mini["headline"]["text geometry: concept probe"] > 0.9           # pretrained MiniLM reads its concepts
    assert mini["towers"]["text"]["weights"] == "default"
    key = pd.read_csv(report(root, MINI) / "geometry_text" / "key_numbers.csv").iloc[0]
    assert key["R² AVG"] == pytest.approx(mini["headline"]["text geometry: R² AVG"])

def test_a_dual_encoder_gets_cross_modal_recognition_beside_its_baselines(reports):
    root, _ = reports
    clip = summary(root, CLIP)
    stages = {st["name"]: st for st in clip["stages"]}
    assert stages["crossmodal_clevr2d"]["status"] == "ok"
    cm = pd.read_csv(report(root, CLIP) / "crossmodal_clevr2d" / "crossmodal.csv").iloc[0]
    assert 0 < cm["object chance"] < cm["bag of concepts"] < 1 and cm["scenes"] > 0
    verdict = pd.read_csv(report(root, CLIP) / "verdict.csv")
    assert "cross-modal object recognition (Def. 3.4)" in set(verdict.measure)
    assert verdict[verdict.measure.str.startswith("additive reconstruction")].clip_in_paper.iloc[0] == "0.78 / 0.83"   # the paper's CLEVR-2D R²

def test_a_stage_that_cannot_run_is_recorded_and_the_others_go_on(reports):
    root, _ = reports
    stages = {st["name"]: st for st in summary(root, CLIP)["stages"]}
    assert stages["geometry_pug_spare"]["status"] == "not run" and "images listed" in stages["geometry_pug_spare"]["reason"]
    assert stages["geometry_clevr2d"]["status"] == "ok"
    assert "not run" in (report(root, CLIP) / "report.md").read_text()

def test_the_leaderboard_has_a_row_per_encoder_and_rebuilds_from_summaries(reports):
    root, out = reports
    board = pd.read_csv(root / "r" / "leaderboard.csv")
    assert set(board.encoder) == {"st:all-MiniLM-L6-v2 (default)", "openclip:ViT-B-32 (random)"}
    rebuilt = binding_nb("leaderboard", "r", "--out", "elsewhere", cwd=root)
    assert rebuilt.returncode == 0, rebuilt.stderr
    pd.testing.assert_frame_equal(pd.read_csv(root / "elsewhere" / "leaderboard.csv").drop(columns="report"), board.drop(columns="report"))
    assert "| encoder |" in rebuilt.stdout and (root / "elsewhere" / "leaderboard.md").is_file()

def test_a_rerun_embeds_nothing_and_an_interrupted_run_resumes(reports):
    root, _ = reports
    stamps = cache_stamps(root / "cache")
    (report(root, CLIP) / "complexity_clevr2d" / "stage.json").unlink()      # as if stopped before this stage ended
    again = binding_nb("diagnose", "openclip:ViT-B-32", "--pretrained", "random", "--budget", "small", "--datasets", "clevr2d", "pug_spare",
                       "--pug-root", "pug", "--out", "r", "--cache-dir", "cache", "--quiet", cwd=root)
    assert again.returncode == 0, again.stderr[-3000:]
    assert cache_stamps(root / "cache") == stamps                                                   # nothing embedded again
    stages = {st["name"]: st for st in summary(root, CLIP)["stages"]}
    assert stages["geometry_clevr2d"]["reason"] == "read back" and stages["crossmodal_clevr2d"]["reason"] == "read back"
    assert stages["complexity_clevr2d"]["status"] == "ok" and stages["complexity_clevr2d"]["reason"] == ""   # run again (its fits read back by 04's table)

@pytest.mark.parametrize("args, message", [
    (["clip"], "unknown encoder 'clip'"),
    (["st:all-MiniLM-L6-v2", "--budget", "huge"], "unknown budget 'huge'"),
    (["st:all-MiniLM-L6-v2", "--datasets", "clevr2d"], "needs an image encoder"),
    (["openclip:ViT-B-32", "--pretrained", "/nowhere/clip.pt"], "/nowhere/clip.pt"),
    (["st:all-MiniLM-L6-v2", "openclip:ViT-B-32", "--pretrained", "default", "random", "random"], "3 weights for 2 encoders"),
    (["openclip:ViT-B-32", "--pretrained", "random", "--text-pretrained", "/nowhere/text.pt"], "--text-pretrained gives the weights of the tower --text-encoder names"),
    (["st:all-MiniLM-L6-v2", "--n-pairs", "160001"], "n_pairs=160,001 is more than the 160,000 multi-object scenes of text"),
    (["openclip:ViT-B-32", "--pretrained", "random", "--n-pairs", "577"], "more than the 576 multi-object scenes of clevr2d"),
    (["openclip:ViT-B-32", "--pretrained", "random", "--datasets", "pug_spare"], "pug_spare needs the downloaded PUG:SPARE folder"),
    (["openclip:ViT-B-32", "--pretrained", "random", "--datasets", "pug_spare", "--pug-root", "/nowhere/pug"], "pug_root /nowhere/pug is not a folder"),
])
def test_bad_arguments_are_refused_before_any_model_loads(tmp_path, args, message, capsys):
    "Refused by the entry point, in process: exit status 2 and the message on stderr, no traceback, nothing written."
    with pytest.raises(SystemExit) as exit_:
        binding_nb_in_process("diagnose", *args, "--out", "r", cwd=tmp_path)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and message in err, err[-2000:]
    assert not (tmp_path / "r").exists()

@pytest.mark.parametrize("args, message", [
    (["--out", "a_file"], "--out a_file is a file, not a folder"),
    (["--out", "a_file/sub"], "--out a_file/sub cannot be created: a_file is a file"),
    (["--out", "r", "--cache_dir", "a_file/cache"], "cache_dir a_file/cache cannot be created: a_file is a file"),
    (["--out", "r", "--device", "bogus"], "unknown device 'bogus'"),
])
def test_unusable_folders_and_devices_are_refused_before_any_work(tmp_path, args, message, capsys, monkeypatch):
    "A folder that is a file or sits under one, and a device that does not exist: exit 2 with one line, before anything is diagnosed."
    import binding_nb.diagnose as D
    monkeypatch.setattr(D, "diagnose", lambda *a, **k: pytest.fail("diagnosed despite a bad argument"))
    (tmp_path / "a_file").write_text("x")
    with pytest.raises(SystemExit) as exit_:
        binding_nb_in_process("diagnose", "st:all-MiniLM-L6-v2", *args, cwd=tmp_path)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and message in err and "Traceback" not in err, err[-2000:]

def test_the_installed_command_refuses_bad_arguments(tmp_path):
    "The console command itself: a bad argument is one line on stderr and exit status 2, with no traceback."
    run = binding_nb("diagnose", "clip", "--out", "r", cwd=tmp_path)
    assert run.returncode == 2 and "unknown encoder 'clip'" in run.stderr, run.stderr[-2000:]
    assert "Traceback" not in run.stderr and not (tmp_path / "r").exists()

def test_leaderboard_refuses_what_is_not_a_report(tmp_path):
    (tmp_path / "x").mkdir(); (tmp_path / "x" / "summary.json").write_text("{not json")
    run = binding_nb("leaderboard", "x", cwd=tmp_path)
    assert run.returncode == 2 and "is not a summary of binding_nb diagnose" in run.stderr
    missing = binding_nb("leaderboard", "nowhere", cwd=tmp_path)
    assert missing.returncode == 2 and "nowhere does not exist" in missing.stderr


def test_a_failed_stage_exits_1_and_is_named(tmp_path, capsys, monkeypatch):
    "A stage that fails (not one that cannot run for want of data): its report is still written, the command names it on stderr and exits 1."
    import binding_nb.diagnose as D
    def broken(ws, dataset, out): raise RuntimeError("a broken stage")
    monkeypatch.setitem(D.STAGES, "complexity", broken)
    with pytest.raises(SystemExit) as exit_:
        binding_nb_in_process("diagnose", "st:all-MiniLM-L6-v2", "--budget", "small", "--n_pairs", "60", "--out", "r", "--cache-dir", "none",
                              "--quiet", cwd=tmp_path)
    err = capsys.readouterr().err
    assert exit_.value.code == 1 and "1 stage(s) failed" in err and "complexity_text" in err and "a broken stage" in err, err[-2000:]
    stages = {st["name"]: st["status"] for st in summary(tmp_path, MINI)["stages"]}
    assert stages == {"geometry_text": "ok", "complexity_text": "failed"}, stages


def test_replaced_weights_run_the_stages_again_into_the_same_folder(tmp_path, monkeypatch):
    "Weights replaced under the same name (new bytes): the rerun into the same --out fits the new embeddings, setting the old fits aside, instead of exiting 1."
    import numpy as np
    import binding_nb.diagnose as D
    args = ("diagnose", "st:all-MiniLM-L6-v2", "--budget", "small", "--n_pairs", "60", "--out", "r", "--cache-dir", "none", "--quiet")
    binding_nb_in_process(*args, cwd=tmp_path)
    before = pd.read_csv(report(tmp_path, MINI) / "complexity_text" / "complexity_results.csv")
    embed = D.Workspace.embeddings
    monkeypatch.setattr(D, "weights_digest", lambda w: "the new weights' bytes")                 # what a replaced file's digest does
    monkeypatch.setattr(D.Workspace, "embeddings", lambda self, ds: embed(self, ds) * np.float32(1.5) + np.float32(0.01))
    with pytest.warns(UserWarning, match="on other embeddings than today's"):
        binding_nb_in_process(*args, cwd=tmp_path)
    stages = {st["name"]: st for st in summary(tmp_path, MINI)["stages"]}
    assert {s["status"] for s in stages.values()} == {"ok"} and stages["complexity_text"]["reason"] == ""
    after = pd.read_csv(report(tmp_path, MINI) / "complexity_text" / "complexity_results.csv")
    assert len(after) == len(before) and set(after.data).isdisjoint(before.data)
    assert len(list((report(tmp_path, MINI) / "complexity_text").glob("complexity_results.csv.bad-*"))) == 1


def test_an_old_name_report_folder_beside_its_hashed_one_is_one_leaderboard_row(reports, tmp_path):
    "A report folder of the old name (no hash) left beside the hashed one: the leaderboard keeps the hashed one, once, and says so."
    import shutil
    from binding_nb.reports import leaderboard
    root, _ = reports
    out = tmp_path / "r"; shutil.copytree(root / "r", out)
    hashed = out / report(root, MINI).name
    shutil.copytree(hashed, out / "st_all-MiniLM-L6-v2_default")                 # the folder's name before it carried the hash
    with pytest.warns(UserWarning, match="another report of st:all-MiniLM-L6-v2 .default. beside"):
        board = leaderboard([out])
    assert list(board.encoder).count(MINI) == 1 and board[board.encoder == MINI].report.iloc[0] == str(hashed)
    assert len(board) == len(pd.read_csv(root / "r" / "leaderboard.csv"))


def test_a_stage_records_its_results_not_its_locks_or_temporaries(tmp_path):
    "The files a stage's record lists (and so whose change runs it again) are its results: not a lock, a temporary left by a kill, or a copy set aside."
    from binding_nb.diagnose import _stage_files
    for name in ("complexity_results.csv", "fig.png", "complexity_results.csv.lock", ".complexity_results.csv.x1y2.tmp",
                 "complexity_results.csv.bad-20261206-120000-0123abcd.csv", "stage.json"):
        (tmp_path / name).write_text(name)
    assert sorted(_stage_files(tmp_path)) == ["complexity_results.csv", "fig.png"]


def test_leaderboard_refuses_a_summary_of_the_wrong_types_and_takes_one_path(reports, tmp_path):
    "A summary whose encoder is not text or whose headline holds text is refused naming its file; one folder given as a string is one folder."
    from binding_nb.reports import leaderboard
    root, _ = reports
    for bad in (dict(encoder=5), dict(headline={"a": "high"}), dict(stage_seconds="fast")):
        s = {**summary(root, MINI), **bad}
        (tmp_path / "x").mkdir(exist_ok=True); (tmp_path / "x" / "summary.json").write_text(json.dumps(s))
        with pytest.raises(ValueError, match="x/summary.json is not a summary of binding_nb diagnose"): leaderboard([tmp_path / "x"])
    assert len(leaderboard(str(root / "r"))) == len(leaderboard([root / "r"]))
