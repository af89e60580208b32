"""Benchmark: build one training batch (scenes, tokens, concept and object queries, labels, hard negatives).

Run `python benchmarks/bench_scenes.py [--device cpu] [--batch 4096]`; prints one JSON line. Target on a 2-core CPU: <= 20 ms
for 4,096 scenes with C=3, V=50, max_objects=2.
"""
import argparse, json, time

import torch

from binding_nb.scenes import ConceptSpace, coverage_split
from binding_nb.tokens import BatchSettings, make_batch
from binding_nb.utils import arg_type, make_generator, resolve_device, whole_number


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--batch", type=arg_type(whole_number, low=1), default=4096)
    p.add_argument("--concepts", type=arg_type(whole_number, low=1), default=3)
    p.add_argument("--values", type=arg_type(whole_number, low=2), default=50)
    p.add_argument("--max-objects", type=arg_type(whole_number, low=1), default=2)
    p.add_argument("--repeats", type=arg_type(whole_number, low=1), default=50)
    a = p.parse_args()
    try: a.device = str(resolve_device(a.device))
    except (ValueError, RuntimeError) as e: p.error(str(e))
    space = ConceptSpace([a.values] * a.concepts)
    fit = torch.from_numpy(coverage_split(space, 0.5, seed=0).fit).to(a.device)
    allowed = torch.zeros(space.n_objects, dtype=torch.bool, device=a.device); allowed[fit] = True
    g = make_generator(0, a.device)
    build = lambda: make_batch(space, fit, BatchSettings(a.batch, max_objects=a.max_objects), generator=g, allowed=allowed)
    for _ in range(5): build()                       # warm-up
    times = []
    for _ in range(a.repeats):
        if a.device.startswith("cuda"): torch.cuda.synchronize()
        t0 = time.perf_counter(); b = build()
        if a.device.startswith("cuda"): torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    times.sort()
    print(json.dumps({"bench": "make_batch", "device": a.device, "threads": torch.get_num_threads(), "batch": a.batch,
                      "C": a.concepts, "V": a.values, "max_objects": a.max_objects,
                      "object_queries": int(b.object_values.shape[0]),
                      "median_ms": round(1e3 * times[len(times) // 2], 2), "min_ms": round(1e3 * times[0], 2),
                      "target_ms": 20}))


if __name__ == "__main__":
    main()
