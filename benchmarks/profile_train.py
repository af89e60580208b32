"""Profile: where a training step's time goes, at the benchmarks' reference configuration (`BENCH_SCALE`), on one thread.

Run `python benchmarks/profile_train.py [--steps 30] [--compile] [--main-job]` or `--attention`; prints the profiler's
table of operators by self CPU time over `--steps` steps (batches drawn inside, after 10 warm-up steps). `--main-job`
profiles the transformer of 05's main job instead (the library's sizes, C = 2, V = 50).
`--attention` times one attention call, forward and backward, in the fused kernel and in two written-out forms, at the
group shapes a batch holds, and prints a table in ms."""
import argparse, time, torch
import torch.nn.functional as F
from torch.profiler import profile, ProfilerActivity
from binding_nb.loop import train_step
from binding_nb.models import batch_loss
from binding_nb.config import BENCH_SCALE, run_config
from binding_nb.train import setup_run

MAIN_JOB = dict(C=2, V=50, coverage=0.5)             # 05's defaults otherwise
# [n sequences, heads, length, head width]: groups of the main job's batches (head width 16) and the reference's (32)
ATTENTION_SHAPES = [(100, 4, 1, 16), (100, 4, 2, 16), (295, 4, 5, 16), (128, 4, 5, 32), (128, 4, 9, 32),
                    (700, 4, 5, 32)]


def elementwise(q, k, v):
    "Attention by broadcast products and sums: no matrix product."
    s = (q.unsqueeze(-2) * k.unsqueeze(-3)).sum(-1) * q.shape[-1] ** -0.5
    return (s.softmax(-1).unsqueeze(-1) * v.unsqueeze(-3)).sum(-2)


def written_out(q, k, v):
    "Attention as `softmax(q kᵀ / √d) v`, by batched matrix products."
    return (q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5).softmax(-1) @ v


def ms_per_call(attend, shape, calls: int = 30) -> float:
    "Mean ms of one forward and backward of `attend` on random `shape` inputs, after 3 unmeasured calls."
    q, k, v = (torch.randn(shape, requires_grad=True) for _ in range(3))
    for _ in range(3): attend(q, k, v).sum().backward()
    t = time.perf_counter()
    for _ in range(calls): attend(q, k, v).sum().backward()
    return (time.perf_counter() - t) / calls * 1e3


def attention_table() -> None:
    forms = {"fused": F.scaled_dot_product_attention, "elementwise": elementwise, "written out": written_out}
    print("| shape | " + " | ".join(forms) + " |\n|---|" + "---|" * len(forms))
    for shape in ATTENTION_SHAPES:
        times = [f"{ms_per_call(f, shape):.2f}" for f in forms.values()]
        print(f"| {' × '.join(map(str, shape))} | " + " | ".join(times) + " |")


def step_profile(size: dict, steps: int, compile: bool) -> None:
    cfg = run_config(**size, steps=100_000, device="cpu", compile=compile)
    run = setup_run(cfg, torch.device("cpu"))
    for _ in range(10): train_step(run.model, run.opt, run.sched, run.next_batch(), batch_loss)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps): train_step(run.model, run.opt, run.sched, run.next_batch(), batch_loss)
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=30, max_name_column_width=40))


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--compile", action="store_true", help="torch.compile the transformer bodies")
    p.add_argument("--main-job", action="store_true", help="05's main-job transformer instead of the reference")
    p.add_argument("--attention", action="store_true", help="time the attention forms alone instead")
    a = p.parse_args()
    if a.steps < 1: p.error(f"--steps must be at least 1, got {a.steps}")
    if a.attention and (a.main_job or a.compile or a.steps != 30):
        p.error("--attention times the attention forms alone: it takes no --main-job, --compile or --steps")
    torch.set_num_threads(1)
    if a.attention: attention_table()
    else: step_profile(MAIN_JOB if a.main_job else {**BENCH_SCALE.settings, "coverage": 0.5}, a.steps, a.compile)
