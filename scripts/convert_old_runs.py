"""Convert checkpoints and results tables written by older versions of binding_nb to the files this version reads.

    python scripts/convert_old_runs.py PATH [PATH ...]

PATH is an output folder of a sweep or study (every checkpoint `*.pt` and results table in it and below), a results table
(`coverage_results.csv`, `complexity_results.csv`, `learned_results.csv`; with the checkpoints under its folder, whose keys
it is re-keyed through), or one checkpoint.

A checkpoint: the flat pixel settings of older configs (level, image_size, square, noise, patch, conv_depth, conv_channels)
move into `input_settings` (for inputs='pixels', those that differ from their defaults; token runs drop them); settings it
lacks are written at their defaults; old state-dict keys of a transformer tower (tok, pos, layers, norm, proj) get their
`stem.` / `body.` prefix; the file is rewritten atomically with its digest, and one named after its run
(`<run_name>.pt`) takes the run's new name, since `model_key` now hashes every setting.

A table: the columns it lacks are added with the values older versions implied (status 'ok'; empty otherwise), and its
run keys (`model_key` of a coverage table, the key at the end of a run name in the others) are re-keyed through the
old -> new keys of the checkpoints found under the same folder. Rows it cannot re-key are reported and left as they were.

Every file it rewrites is kept beside the new one as `<name>.bad-<time>-<token><suffix>` (the library's `set_aside`).
Converting twice changes nothing. A path or file it cannot convert (missing, of another kind, unreadable, not
writable, a link) is reported on its own line and left as it was, the others converted; the script then exits 1 with
one line.
"""
from __future__ import annotations

import argparse, csv, io, re, sys
from dataclasses import asdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))    # the library of this clone, also when it is not installed
from binding_nb.evaluation import COVERAGE_RESULTS
from binding_nb.complexity import COMPLEXITY_RESULTS
from binding_nb.learned import LEARNED_RESULTS
from binding_nb.inputs import input_kind
from binding_nb.models import DualEncoder, Tower
from binding_nb.pixels import PixelConfig
from binding_nb.checkpoints import load_model
from binding_nb.config import run_config, RUN_SETTINGS, RunConfig
from binding_nb.utils import atomic_file, fingerprint, is_set_aside, read_verified, safe_reason, set_aside, write_verified

# ---- what older versions wrote (this file is the only place that knows it) ----
OLD_PIXEL_FIELDS = ("level", "image_size", "square", "noise", "patch", "conv_depth", "conv_channels")   # flat in RunConfig before input_settings
OLD_KEY = re.compile(r"^(tok|pos|layers|norm|proj)\.")          # a tower's keys before it had a stem and a body
# Settings added after the first results were written: at their defaults they were left out of model_key.
OLD_ADDED_LATER = ("ffn_width", "final_norm", "init", "logit_scale_init", "logit_scale_max", "concept_queries", "swaps_per_scene",
                   "max_object_positives", "negatives_from", "query_weight_decay", "concept_weight", "concept_off_at",
                   "architecture", "share_embedding", "rank", "code", "v_mean", "concept_on_at", "schedule", "grokfast", "inputs")
OLD_NOT_IN_KEY = ("coverage", "seed", "device", "amp", "compile", "log_every", "layout")
FIT_COLUMNS_ADDED = ("data", "init", "init_mean", "form", "train_r2", "fit_objects", "regime")   # empty in older fit tables
OLD_DEFAULTS = {COVERAGE_RESULTS.file: dict(status="ok"),   # no status: every row had finished
                COMPLEXITY_RESULTS.file: dict.fromkeys(FIT_COLUMNS_ADDED, ""), LEARNED_RESULTS.file: dict.fromkeys(FIT_COLUMNS_ADDED, "")}
TABLES = {t.file: t for t in (COVERAGE_RESULTS, COMPLEXITY_RESULTS, LEARNED_RESULTS)}
RUN_KEY = re.compile(r"^(C\d+_V\d+_cov[^_]+_seed\d+_)([0-9a-f]{10})$")   # a run name: its key at the end


def old_model_key(cfg: RunConfig) -> str:
    "The `model_key` older versions gave `cfg`: later settings at their defaults left out, so that earlier keys stayed the same."
    default = run_config()
    d = {k: v for k, v in cfg.settings().items() if k not in OLD_NOT_IN_KEY + ("input_settings",)
         and not (k in OLD_ADDED_LATER and v == getattr(default, k))}
    d |= input_kind(cfg.inputs).changed_settings(cfg.model.input_settings)   # the flat pixel settings were hashed alike (json sorts keys)
    return fingerprint(d, length=10, algorithm="sha1")


def new_config(saved: dict) -> dict:
    "A checkpoint's config as this version's `RunConfig` stores it: flat pixel settings moved into `input_settings`, every setting present."
    saved = dict(saved)
    flat = {k: saved.pop(k) for k in OLD_PIXEL_FIELDS if k in saved}
    if flat and saved.get("inputs") == "pixels":
        default = asdict(PixelConfig())
        saved["input_settings"] = {**{k: v for k, v in flat.items() if v != default[k]}, **(saved.get("input_settings") or {})} or None
    if unknown := sorted(set(saved) - set(RUN_SETTINGS)):
        raise ValueError(f"settings no version this converter knows wrote ({', '.join(unknown)})")
    return run_config(**saved).settings()


def new_weights(cfg: RunConfig, weights: dict | None) -> dict | None:
    "`weights` with the keys of each transformer tower renamed as towers now name them."
    if weights is None: return None
    towers = [n + "." for n, m in DualEncoder(cfg.model).named_modules() if isinstance(m, Tower)]
    out = {}
    for k, v in weights.items():
        tower = next((t for t in towers if k.startswith(t)), None)
        m = OLD_KEY.match(k[len(tower):]) if tower else None
        out[tower + ("stem." if m[1] in ("tok", "pos") else "body.") + k[len(tower):] if m else k] = v
    return out


def convert_checkpoint(path: Path, keys: dict[str, str], log) -> None:
    "Convert the checkpoint at `path` (and rename it when it is named after its run); record its old -> new key in `keys`."
    try:
        payload = read_verified(path, "checkpoint")
        ck = torch.load(io.BytesIO(payload) if payload is not None else path, map_location="cpu", weights_only=True)
    except Exception as e: raise Unconverted(f"cannot be read ({safe_reason(e)})") from None
    if not (isinstance(ck, dict) and {"config", "model", "step"} <= ck.keys()):
        raise Unconverted("not a checkpoint of a run")
    config = new_config(ck["config"])
    cfg = run_config(**config)
    old, new = old_model_key(cfg), cfg.model_key()
    keys[old] = new
    named = RUN_KEY.match(path.stem)
    target = path.with_name(f"{cfg.run_name()}.pt") if named and named[2] in (old, new) else path
    model, best = new_weights(cfg, ck["model"]), new_weights(cfg, ck.get("best_model"))
    if payload is not None and config == ck["config"] and model.keys() == ck["model"].keys() and target == path:
        return log(f"{path}: up to date")
    if target != path and target.exists(): raise Unconverted(f"{target.name} exists already")
    buf = io.BytesIO(); torch.save({**ck, "config": config, "model": model, "best_model": best}, buf)
    aside = set_aside(path)
    write_verified(target, buf.getvalue(), "checkpoint")          # what save_checkpoint writes: the digest header, then the payload
    load_model(target, "cpu")                                     # reads back as this version reads it
    log(f"{path}: converted to {target.name} (key {old} -> {new}); the old file is kept as {aside.name}")


def rekey(value: str, column: str, keys: dict[str, str]) -> str | None:
    "`value` of a key column re-keyed, itself when it holds no run key, None when its key is not in `keys`."
    if column == "model_key": return keys.get(value, value if value in keys.values() else None)
    m = RUN_KEY.match(value)
    if not m: return value
    return m[1] + keys[m[2]] if m[2] in keys else value if m[2] in keys.values() else None


def convert_table(path: Path, keys: dict[str, str], log) -> None:
    "Add the columns an older table lacks, re-key its runs through `keys`, and rewrite it (the old file kept aside)."
    defaults = OLD_DEFAULTS[path.name]
    try:
        with open(path, newline="", encoding="utf-8") as f: lines = list(csv.reader(f))
    except (UnicodeDecodeError, csv.Error) as e: raise Unconverted(f"not a results table ({safe_reason(e)})") from None
    if not lines: return log(f"{path}: empty, skipped")
    header, rows = lines[0], [r for r in lines[1:] if r]
    columns = list(TABLES[path.name].columns)
    added = [c for c in columns if c not in header]           # optional measurements (`ResultsTable.optional`) are written empty
    if unknown := [c for c in added if c not in defaults and c not in TABLES[path.name].optional]:
        raise Unconverted(f"lacks {', '.join(unknown)}, which no older version left out")
    out = [dict(zip(header, r)) | {c: defaults.get(c, "") for c in added} for r in rows]
    column = "model_key" if path.name == COVERAGE_RESULTS.file else "run"
    unkeyed, changed = [], 0
    for n, row in enumerate(out, 2):
        new = rekey(row[column], column, keys)
        if new is None: unkeyed.append(f"line {n} ({row[column]})")
        elif new != row[column]: row[column], changed = new, changed + 1
    if not added and not changed:
        return log(f"{path}: up to date" + (f"; {len(unkeyed)} row(s) whose key no checkpoint here has: {', '.join(unkeyed[:5])}" if unkeyed else ""))
    text = io.StringIO()
    w = csv.DictWriter(text, fieldnames=columns + [c for c in header if c not in columns], lineterminator="\n")
    w.writeheader(); w.writerows(out)
    aside = set_aside(path)
    with atomic_file(path) as f: f.write(text.getvalue().encode())
    log(f"{path}: added {', '.join(added) or 'no columns'}; re-keyed {changed} row(s); the old file is kept as {aside.name}")
    if unkeyed:
        log(f"{path}: {len(unkeyed)} row(s) not re-keyed, no checkpoint under {path.parent} has their key: {', '.join(unkeyed[:5])}"
            + (" ..." if len(unkeyed) > 5 else "") + " (left as they were: such runs are trained anew)")


class Unconverted(Exception):
    "A file this script cannot convert: reported, left as it was, and the others converted."


def _found(root: Path, pattern: str) -> list[Path]:
    "The files under `root` named by `pattern`, set-aside copies left out."
    return sorted(f for f in root.rglob(pattern) if f.is_file() and not is_set_aside(f))


def _files(p: Path) -> tuple[list[Path], list[Path]]:
    """The checkpoints and results tables that the path `p` names (a table: with the checkpoints under its folder,
    through which its runs are re-keyed), or `Unconverted` saying why it names none."""
    if not p.exists() and not p.is_symlink():
        raise Unconverted("does not exist: pass an output folder, a results table or a checkpoint")
    if p.is_dir(): return _found(p, "*.pt"), [f for n in TABLES for f in _found(p, n)]
    if p.suffix == ".pt": return [p], []
    if p.name in TABLES: return _found(p.parent, "*.pt"), [p]
    raise Unconverted(f"is neither a folder, a checkpoint (*.pt) nor a results table ({', '.join(TABLES)})")


def _one(path: Path, convert_file, keys: dict, log) -> bool:
    "Convert one file; on failure log why, leave it as it was, and return False."
    try:
        if path.is_symlink(): raise Unconverted(f"is a link (to {path.resolve()}): convert the file it points to")
        convert_file(path, keys, log); return True
    except (Unconverted, ValueError) as e: log(f"{path}: {e}; left as it was")
    except OSError as e: log(f"{path}: cannot be rewritten ({e.strerror or safe_reason(e)}); left as it was")
    return False


def convert(paths: list[str | Path], log=print, failed: list[str] | None = None) -> dict[str, str]:
    """Convert every checkpoint, then every results table, under `paths`; the old -> new model keys of the checkpoints.
    A path or file that cannot be converted is reported by `log`, left as it was, and appended to `failed`."""
    keys, failed = {}, failed if failed is not None else []
    for p in map(Path, paths):
        try: checkpoints, tables = _files(p)
        except Unconverted as e: log(f"{p}: {e}"); failed.append(str(p)); continue
        failed += [str(f) for f in checkpoints if not _one(f, convert_checkpoint, keys, log)]
        failed += [str(f) for f in tables if not _one(f, convert_table, keys, log)]
    return keys


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("paths", nargs="+", metavar="PATH", help="an output folder, a results table or a checkpoint")
    failed = []
    convert(p.parse_args().paths, failed=failed)
    if failed:
        print(f"convert_old_runs.py: {len(failed)} path(s) not converted (each said above); the others were",
              file=sys.stderr)
        sys.exit(1)
