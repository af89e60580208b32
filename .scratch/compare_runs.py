"Print train_run result rows and logged losses of short tokens / product / pixel runs (old or new RunConfig API)."
import json, sys, tempfile, os
import torch
torch.set_num_threads(1)
from binding_nb.train import RunConfig, train_run, with_architecture, read_checkpoint
import binding_nb; print(binding_nb.__file__, file=sys.stderr)
new_api = "input_settings" in RunConfig.__dataclass_fields__
def pixels(**s): return dict(inputs="pixels", input_settings=s) if new_api else dict(inputs="pixels", **s)
small = dict(n_val_scenes=128, n_test_scenes=256, device="cpu", eval_every=100, ckpt_every=100)
runs = {"tokens": RunConfig(steps=300, **small),
        "product": with_architecture(RunConfig(steps=300, **small), "product-shared"),
        "pixels": RunConfig(steps=60, batch_size=32, d_model=32, n_layers=1, eval_every=30, ckpt_every=30, n_val_scenes=64,
                            n_test_scenes=64, device="cpu", **pixels(level=2, image_size=16, square=5, patch=4))}
which = sys.argv[1:] or list(runs)
with tempfile.TemporaryDirectory() as d:
    for name in which:
        path = os.path.join(d, f"{name}.pt")
        row = train_run(runs[name], path, progress=False)
        row.pop("train_seconds")
        hist = read_checkpoint(path)["history"]
        print(name, json.dumps(row, sort_keys=True, default=str))
        print(name, "history", json.dumps(hist, sort_keys=True, default=str))
