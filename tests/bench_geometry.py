"""Benchmark: `geometry_report` (every §4 measurement) on toy embeddings of the sizes the 03_geometry page measures; one JSON line each.

    python tests/bench_geometry.py [--threads 1] [--device cpu]

Each section's time includes fitting the probes on real embeddings, which every section needs.
"""
import argparse, json, time

import torch

from binding_nb.datasets import all_pairs, clevr_space, text_space
from binding_nb.geometry import SECTIONS, geometry_report, grid_scenes, toy_embeddings

p = argparse.ArgumentParser()
p.add_argument("--threads", type=int, default=1, help="torch CPU threads (two stall on a busy 2-core machine)")
p.add_argument("--device", default="cpu")
args = p.parse_args()
torch.set_num_threads(args.threads)
cases = [("clevr2d: 600 scenes, d 512", clevr_space(), all_pairs(clevr_space()), 512),
         ("text:10: 10,100 captions, d 384", text_space(), grid_scenes(text_space(), 10), 384)]
warm = toy_embeddings(clevr_space(), all_pairs(clevr_space()), "objects", dim=16)
geometry_report(warm, (all_pairs(clevr_space()), clevr_space()), sections=["reconstruction"], device=args.device)   # imports, first calls
for name, space, scenes, dim in cases:
    emb = toy_embeddings(space, scenes, "objects", dim=dim)
    row = dict(case=name, device=args.device, threads=args.threads)
    for section in SECTIONS:
        t0 = time.perf_counter()
        geometry_report(emb, (scenes, space), sections=[section], device=args.device)
        row[f"{section}_s"] = round(time.perf_counter() - t0, 2)
    t0 = time.perf_counter()
    rep = geometry_report(emb, (scenes, space), device=args.device)
    row.update(total_s=round(time.perf_counter() - t0, 2), scenes=rep.table.n)
    print(json.dumps(row), flush=True)
