"""Benchmark of the 03_geometry measurements at the sizes the page measures; one JSON line each.

    python benchmarks/bench_geometry.py [--threads 1] [--device cpu] [--skip-large]

1. The probe fit: our torch L-BFGS fit of all heads at once against scikit-learn's `LogisticRegression` fitting the object probe
   alone (multi-hot targets as duplicated rows), on the same 8,192 training scenes of the 20 x 20 caption space.
2. `geometry_report` section by section on toy embeddings of CLEVR-2D (600 scenes, d 512) and of all 160,400 captions (d 384).
Each section's time includes fitting the probes on real embeddings, which every section needs.
"""
import argparse, json, time, warnings

import numpy as np
import torch

from binding_nb.datasets import all_pairs, clevr_space, text_captions
from binding_nb.geometry import fit_probes, geometry_report, probe_split, scene_table
from binding_nb.geometry.report import SECTIONS
from binding_nb.toys import toy_embeddings
from binding_nb.scenes import object_recognition
from binding_nb.utils import arg_type, resolve_device, whole_number

p = argparse.ArgumentParser()
p.add_argument("--threads", type=arg_type(whole_number, low=1), default=1, help="torch CPU threads (two stall on a busy 2-core machine)")
p.add_argument("--device", default="cpu")
p.add_argument("--skip-large", action="store_true", help="only the 600-scene case")
args = p.parse_args()
try: resolve_device(args.device)
except (ValueError, RuntimeError) as e: p.error(str(e))
torch.set_num_threads(args.threads)
captions = text_captions()
cases = [("clevr2d: 600 scenes, d 512", clevr_space(), all_pairs(clevr_space()), 512)]
if not args.skip_large: cases.append(("text: 160,400 captions, d 384", captions.space, captions.objects, 384))


def probe_comparison():
    from sklearn.linear_model import LogisticRegression
    table = scene_table(toy_embeddings(captions.space, captions.objects, "objects", dim=384), captions)
    train, test = probe_split(table.n, 0.4, 0)
    test = test[:20_000]
    t0 = time.perf_counter()
    probes = fit_probes(table, train, test, device=args.device)
    ours = time.perf_counter() - t0
    rows, x = probes.train, table.emb[probes.train]
    loc, scale = x.mean(0), x.std(0)
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")              # lbfgs stops at max_iter, as ours does
        lr = LogisticRegression(C=1 / (1e-3 * 2 * len(rows)), max_iter=100).fit(np.repeat((x - loc) / scale, 2, 0), table.ids[rows].reshape(-1))
    theirs = time.perf_counter() - t0
    scores = np.full((len(test), table.space.n_objects), -np.inf)
    scores[:, lr.classes_] = lr.decision_function((table.emb[test] - loc) / scale)
    print(json.dumps(dict(case="probe fit, 8,192 of 160,000 caption scenes, d 384", device=args.device, threads=args.threads,
                          torch_all_heads_s=round(ours, 2), sklearn_object_probe_only_s=round(theirs, 2),
                          torch_object_acc=round(probes.accuracy(table.emb[test], table.values[test])["object"], 3),
                          sklearn_object_acc=round(float(object_recognition(scores, table.values[test], table.space).mean()), 3))), flush=True)


if not args.skip_large: probe_comparison()
warm = toy_embeddings(clevr_space(), all_pairs(clevr_space()), "objects", dim=16)
geometry_report(warm, (all_pairs(clevr_space()), clevr_space()), sections=["reconstruction"], device=args.device)   # imports, first calls
for name, space, scenes, dim in cases:
    emb = toy_embeddings(space, scenes, "objects", dim=dim)
    row = dict(case=name, device=args.device, threads=args.threads)
    for section in SECTIONS:
        t0 = time.perf_counter()
        geometry_report(emb, (scenes, space), sections=[section], device=args.device)
        row[f"{section}_s"] = round(time.perf_counter() - t0, 1)
    t0 = time.perf_counter()
    rep = geometry_report(emb, (scenes, space), device=args.device)
    row.update(total_s=round(time.perf_counter() - t0, 1), scenes=rep.table.n)
    print(json.dumps(row), flush=True)
