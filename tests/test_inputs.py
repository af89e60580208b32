"""Input kinds from outside the package (App. B.2): found by registration, by the `binding_nb.inputs` entry-point group,
or by their file; held to the towers' contract; trained and studied like the package's own."""
import re, subprocess, sys
from pathlib import Path

import pytest
import torch

from binding_nb.inputs import INPUTS_GROUP, check_input_kind, registered_inputs, use_inputs
from binding_nb.models import ModelConfig, TOWERS

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "deep_sets_inputs.py"

torch.set_num_threads(1)


def test_the_pixel_kind_is_found_through_its_entry_point():
    "In a fresh interpreter nothing has imported the pixel module; naming the kind imports it through the entry point this package declares."
    script = ("import sys; from importlib.metadata import entry_points; from binding_nb.inputs import input_kind, _INPUT_KINDS\n"
              f"assert 'binding_nb.pixels' not in sys.modules and 'pixels' not in _INPUT_KINDS\n"
              f"assert {{e.name: e.value for e in entry_points(group={INPUTS_GROUP!r})}}.get('pixels') == 'binding_nb.pixels'\n"
              "print(input_kind('pixels').settings.__name__, 'binding_nb.pixels' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["PixelConfig", "True"]


def test_no_module_but_the_pixel_module_names_the_pixel_kind():
    "The package keeps no list of kinds: the pixel kind's name and module appear in `pixels.py` alone (and the generated index)."
    naming = re.compile(r"""['"]pixels['"]|binding_nb\.pixels|from \.pixels|import pixels""")
    hits = [f"{p.name}:{i + 1}" for p in sorted((ROOT / "binding_nb").rglob("*.py")) if p.name not in ("pixels.py", "_modidx.py")
            for i, line in enumerate(p.read_text().splitlines()) if naming.search(line)]
    assert not hits, hits


@pytest.mark.parametrize("architecture", TOWERS)
def test_every_kind_known_and_one_of_ones_own_keep_the_contract(architecture):
    "Each kind known by name, and the example kind named by its file, passes the conformance check at both query-tower architectures."
    kinds = registered_inputs() + [use_inputs(f"{EXAMPLE}:deep_sets")]
    assert {"tokens", "pixels", "deep_sets"} <= set(kinds)
    for name in kinds:
        check_input_kind(ModelConfig(2, 4, 2, d_model=16, n_layers=1, n_heads=2, d_out=8, architecture=architecture, inputs=name))


def test_a_kind_of_ones_own_is_refused_clearly_when_its_file_is_not_named(tmp_path):
    "A file that registers nothing, a missing file, and a name nothing registers: each error says what to pass."
    (tmp_path / "empty.py").write_text("x = 1\n")
    with pytest.raises(ValueError, match="registered no kind 'stripes'"): use_inputs(f"{tmp_path / 'empty.py'}:stripes")
    with pytest.raises(FileNotFoundError, match="there is no file"): use_inputs(f"{tmp_path / 'gone.py'}:stripes")
    with pytest.raises(ValueError, match="'path/to/kind.py:stripes'"): use_inputs("stripes")


def test_a_kind_of_ones_own_trains_through_run_sweep(tmp_path):
    "The example kind, named by its file, trains through the coverage sweep, names itself in the run's label, and its checkpoint loads."
    from binding_nb.checkpoints import load_model, run_checkpoint
    from binding_nb.coverage import run_sweep
    from binding_nb.study import model_label
    from binding_nb.config import run_config
    name = use_inputs(f"{EXAMPLE}:deep_sets")
    base = run_config(C=2, V=4, steps=20, batch_size=16, d_model=16, n_layers=1, n_heads=2, d_out=8, eval_every=10, ckpt_every=20,
                     n_val_scenes=16, n_test_scenes=32, device="cpu", inputs=name, input_settings=dict(hidden=16))
    rows = run_sweep(base, [[2, 4]], [0.75], seeds=[0], output_dir=tmp_path, progress=False)
    assert list(rows.status) == ["ok"] and 0 <= rows.object_acc.iloc[0] <= 1
    cfg = base.replace(coverage=0.75, seed=0)
    assert model_label(cfg) == "deep sets h16, transformer"
    model, loaded = load_model(run_checkpoint(tmp_path, cfg), device="cpu")
    assert type(model.scene_encoder).__name__ == "DeepSetsTower" and loaded.input_settings.hidden == 16


@pytest.mark.slow
def test_06_studies_a_kind_of_ones_own(tmp_path):
    "papermill runs 06 from the repository root on models whose scene towers are the example kind, named by its file (minutes)."
    out = tmp_path / "out"
    params = dict(inputs="examples/deep_sets_inputs.py:deep_sets", architectures='["transformer"]', transformer_coverages="[0.3, 0.9]",
                  train_steps=60, n_scenes=2000, probe_steps=60, widths="[8]", ranks="[64]", forms='["additive", "global_product"]',
                  n_boot=200, output_dir=str(out), cache_dir=str(tmp_path / "cache"))
    run = subprocess.run([sys.executable, "-m", "papermill", "nbs/06_learned_binding.ipynb", str(tmp_path / "06.ipynb"),
                          *[x for k, v in params.items() for x in ("-p", k, str(v))]], cwd=ROOT, capture_output=True, text=True, timeout=1800)
    assert run.returncode == 0, run.stderr[-3000:]
    import pandas as pd
    study = pd.read_csv(out / "binding_study.csv")
    assert set(study.architecture) == {"deep sets h64, transformer"} and study.run.nunique() == 2


@pytest.mark.parametrize("page", ["05_coverage", "06_learned_binding"])
def test_the_training_pages_take_inputs(page, tmp_path):
    "05 and 06 take `inputs` as a parameter: the example kind by its file (from the root, as the README runs pages), a bad name refused before any work."
    from conftest import run_parameter_check
    nb = ROOT / "nbs" / f"{page}.ipynb"
    ns = run_parameter_check(nb, cwd=ROOT, inputs="examples/deep_sets_inputs.py:deep_sets", output_dir=str(tmp_path / "out"))
    configs = ns["configs"]
    assert configs and {c.inputs for c in configs} == {"deep_sets"}
    with pytest.raises(ValueError, match="inputs must be one of"): run_parameter_check(nb, cwd=ROOT, inputs="sound", output_dir=str(tmp_path / "o2"))
    if page == "05_coverage":
        with pytest.raises(ValueError, match="find an input kind by name only"):
            run_parameter_check(nb, cwd=ROOT, inputs="examples/deep_sets_inputs.py:deep_sets", executor="local", output_dir=str(tmp_path / "o3"))


def _kind_file(path: Path, name: str, broken: bool) -> str:
    "A file registering the kind `name`: a scene is the sum of its values' one-hots through a linear map; `broken`: NaN in training."
    path.write_text(f'''import torch
from torch import nn
from binding_nb.inputs import register_inputs
from binding_nb.models import query_tower

class SumOfValues(nn.Module):
    def __init__(self, cfg):
        super().__init__(); self.V, self.n = cfg.V, cfg.C * cfg.V; self.w = nn.Linear(self.n, cfg.d_out)
    def forward(self, *sets):
        out = []
        for s in sets:
            idx = s.clamp(min=0) + torch.arange(s.shape[-1]) * self.V
            e = self.w((nn.functional.one_hot(idx, self.n).float() * (s >= 0)[..., None]).sum((1, 2)))
            out.append(e * float("nan") if {broken} and self.training else e)
        return out

register_inputs({name!r}, lambda cfg: (SumOfValues(cfg), query_tower(cfg)))
''')
    return f"{path}:{name}"


def test_a_name_taken_by_other_code_is_refused(tmp_path):
    "A file registering the built-in `tokens`, or a second file registering a name another file holds, is refused; `tokens` stays the package's."
    from binding_nb.config import run_config
    from binding_nb.inputs import input_kind
    key = run_config().model_key()
    with pytest.raises(ValueError, match="input kind 'tokens' is binding_nb.models's"):
        use_inputs(_kind_file(tmp_path / "shadow.py", "tokens", broken=False))
    assert input_kind("tokens").origin == "binding_nb.models" and run_config().model_key() == key == "abacb151af"
    use_inputs(_kind_file(tmp_path / "first.py", "summed", broken=False))
    with pytest.raises(ValueError, match="register yours under a name of its own"):
        use_inputs(_kind_file(tmp_path / "second.py", "summed", broken=False))
    use_inputs(_kind_file(tmp_path / "first.py", "summed", broken=False))    # its own file again: fine


def test_a_kind_fixed_in_its_file_is_trained_again_not_served_its_stale_verdict(tmp_path):
    "A kind whose towers give NaN is recorded as diverged; once its file is fixed, the sweep trains it under a new key instead of serving that row."
    from binding_nb.config import run_config
    from binding_nb.coverage import run_sweep
    spec = _kind_file(tmp_path / "summed_kind.py", "summed_kind", broken=True)
    base = lambda: run_config(C=2, V=4, steps=10, batch_size=16, d_model=16, n_layers=1, n_heads=2, d_out=8, eval_every=5,
                              ckpt_every=10, log_every=1, n_val_scenes=16, n_test_scenes=32, device="cpu", inputs=use_inputs(spec))
    broken = base().model_key()     # a config names its kind: its key is that of the kind registered when asked
    with pytest.warns(UserWarning, match="diverged"):
        rows = run_sweep(base(), [[2, 4]], [0.75], seeds=[0], output_dir=tmp_path, progress=False)
    assert list(rows.status) == ["diverged"]
    _kind_file(tmp_path / "summed_kind.py", "summed_kind", broken=False)
    fixed = base()
    assert fixed.model_key() != broken
    rows = run_sweep(fixed, [[2, 4]], [0.75], seeds=[0], output_dir=tmp_path, progress=False)
    assert list(rows.status) == ["ok"] and rows.model_key.iloc[0] == fixed.model_key()
