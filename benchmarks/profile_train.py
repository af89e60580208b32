"""Profile: where a training step's time goes, at `bench_train.py`'s reference configuration, on one thread.

Run `python benchmarks/profile_train.py [--steps 30] [--compile]`; prints torch.profiler's table of operators by self CPU
time over `--steps` steps (batches drawn inside, after 10 warm-up steps)."""
import argparse, torch
from torch.profiler import profile, ProfilerActivity
from binding_nb.loop import train_step
from binding_nb.models import batch_loss
from binding_nb.config import run_config
from binding_nb.train import setup_run
p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
p.add_argument("--steps", type=int, default=30)
p.add_argument("--compile", action="store_true", help="torch.compile the transformer bodies")
a = p.parse_args()
torch.set_num_threads(1)
cfg = run_config(C=2, V=20, max_objects=2, coverage=0.5, batch_size=256, d_model=128, n_layers=4, n_heads=4, d_out=64,
                 steps=100_000, device="cpu", compile=a.compile)
data, model, opt, sched, g, batch = setup_run(cfg, torch.device("cpu"))
for _ in range(10): train_step(model, opt, sched, batch(), batch_loss)
with profile(activities=[ProfilerActivity.CPU]) as prof:
    for _ in range(a.steps): train_step(model, opt, sched, batch(), batch_loss)
print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=30, max_name_column_width=40))
