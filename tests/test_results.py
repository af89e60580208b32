"""Reading a results table takes nothing from the folder it is in: no lock file where nobody may write, no folder where none was."""
import os

import pandas as pd
import pytest

from binding_nb.evaluation import COVERAGE_RESULTS
from binding_nb.learned import LEARNED_RESULTS
from binding_nb.study import trained_models
from binding_nb.results import ResultsTable

TABLE = ResultsTable("r.csv", ("name", "x"), keys=("name",), text=("name",))


def _finished(folder):
    TABLE.write(pd.DataFrame(dict(name=["a"], x=[1.0])), TABLE.path(folder))
    (folder / "r.csv.lock").unlink(missing_ok=True)


def test_a_folder_nobody_may_write_is_read_without_a_lock(tmp_path, monkeypatch):
    "As a user without write access sees it (the check root's write access would pass is replaced by the answer such a user gets)."
    _finished(tmp_path)
    import binding_nb.results as results
    monkeypatch.setattr(results.os, "access", lambda path, mode: False)
    assert TABLE.read(TABLE.path(tmp_path)).name.tolist() == ["a"]
    assert not (tmp_path / "r.csv.lock").exists()


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root writes anywhere: a read-only folder needs an ordinary user")
def test_a_read_only_finished_folder_can_be_read(tmp_path):
    _finished(tmp_path)
    tmp_path.chmod(0o555)
    try: assert TABLE.read(TABLE.path(tmp_path)).name.tolist() == ["a"]
    finally: tmp_path.chmod(0o755)


def test_reading_a_mistyped_folder_creates_nothing(tmp_path):
    typo = tmp_path / "outptus"
    for table in (COVERAGE_RESULTS, LEARNED_RESULTS): assert table.read(table.path(typo)).empty
    assert trained_models(typo) == [] and not typo.exists()


@pytest.mark.parametrize("table, lacks", [(COVERAGE_RESULTS, ("device", "status")),
                                          (LEARNED_RESULTS, ("data", "init", "init_mean", "form", "train_r2", "fit_objects", "regime"))])
def test_a_table_of_an_older_version_is_refused_with_the_converter(tmp_path, table, lacks):
    "A table without standard columns added since it was written is refused, untouched: the message names the columns and the converter (optional measurements may be missing; see results)."
    path = table.path(tmp_path)
    header = [c for c in table.columns if c not in lacks]
    path.write_text(",".join(header) + "\n" + ",".join("1" for _ in header) + "\n")
    raw = path.read_bytes()
    with pytest.raises(ValueError) as e: table.read(path)
    msg = str(e.value)
    assert f"lacks the columns {', '.join(lacks)}" in msg and f"python scripts/convert_old_runs.py {path}" in msg, msg
    assert path.read_bytes() == raw and sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")) == [table.file]
