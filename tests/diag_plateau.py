"""Diagnostic: the scene encoder can bind, but the contrastive dual encoder does not find the binding (05_coverage, "Second round").

Run `python tests/diag_plateau.py [--steps 1500] [--seeds 0 1 2] [--threads 1]`; prints one JSON line per run (about 6 minutes
on one core). The toy space has C=2 and V=3 (9 objects), coverage 1, and all 81 two-object scenes.
1. supervised: the scene encoder of `RunConfig` defaults, with a linear head, learns to output each scene's set of objects
   (multi-label). It reports the step at which every scene is right.
2. contrastive: the dual encoder trained as in 05_coverage, on two-object scenes, with and without the concept loss. It reports
   the object loss over the last 250 steps, its floor (perfect binding), the bag-of-concepts level (the scene's objects and
   their attribute swaps scored equally) and object recognition on the 81 scenes.
"""
import argparse, dataclasses, json, math, time

import torch
import torch.nn.functional as F

from binding_nb.coverage import RunConfig, batch_loss, build_model, consistent_object_sets, evaluate, warmup_linear_decay
from binding_nb.datasets import all_pairs
from binding_nb.scenes import make_batch, make_generator, tokenize_scenes


def loss_levels(space, scenes: torch.Tensor) -> tuple[float, float]:
    "Mean object loss of a perfect binder (log #distinct objects) and of a bag-of-concepts model (log #objects it cannot tell apart)."
    ids = space.object_ids(scenes)
    n_pos = 1 + (ids[:, 0] != ids[:, 1]).double()
    n_sets = consistent_object_sets(space, scenes).double()
    return float(n_pos.log().mean()), float((n_pos * n_sets).log().mean())


def supervised_steps(cfg: RunConfig, scenes: torch.Tensor, max_steps: int = 1000) -> int | None:
    "Steps until the scene encoder + a linear head output every scene's object set exactly (None: not within max_steps)."
    space = cfg.space
    model = build_model(cfg, torch.device("cpu")).scene_encoder
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        head = torch.nn.Linear(cfg.d_out, space.n_objects)
    target = torch.zeros(len(scenes), space.n_objects).scatter_(1, space.object_ids(scenes), 1.0)
    tokens = tokenize_scenes(space, scenes, 2)
    opt = torch.optim.Adam([*model.parameters(), *head.parameters()], lr=cfg.lr)
    for step in range(1, max_steps + 1):
        out = head(model(tokens)[0])
        loss = F.binary_cross_entropy_with_logits(out, target)
        opt.zero_grad(); loss.backward(); opt.step()
        if step % 10 == 0 and ((out > 0) == (target > 0)).all(): return step
    return None


def contrastive_run(cfg: RunConfig, scenes: torch.Tensor, concept_loss: bool) -> dict:
    "Train the dual encoder on two-object scenes; the object loss of the last 250 steps and object recognition on `scenes`."
    space, dev = cfg.space, torch.device("cpu")
    model = build_model(cfg, dev)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, warmup_linear_decay(cfg.steps, cfg.warmup_frac))
    g, fit, tail = make_generator(cfg.seed, dev), torch.arange(space.n_objects), []
    for step in range(cfg.steps):
        batch = make_batch(space, fit, cfg.batch_size, 2, g, cfg.n_perturb, min_objects=2)
        loss, parts = batch_loss(model, batch, concept_weight=float(concept_loss))
        opt.zero_grad(set_to_none=True); loss.backward(); opt.step(); sched.step()
        if step >= cfg.steps - 250: tail.append(parts["object_loss"])
    model.eval()
    return dict(object_loss_last_250=round(sum(tail) / len(tail), 3),
                object_acc=round(evaluate(model, space, scenes, 2, hard=False)["object_acc"], 3))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=1500)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args()
    if a.threads: torch.set_num_threads(a.threads)
    cfg = RunConfig(C=2, V=3, coverage=1.0, steps=a.steps, device="cpu")
    scenes = torch.from_numpy(all_pairs(cfg.space, singles=False))
    floor, bag = loss_levels(cfg.space, scenes)
    t0 = time.perf_counter()
    print(json.dumps(dict(run="supervised", steps_to_all_correct=supervised_steps(cfg, scenes),
                          seconds=round(time.perf_counter() - t0, 1))), flush=True)
    for seed in a.seeds:
        for concept_loss in (True, False):
            t0 = time.perf_counter()
            res = contrastive_run(dataclasses.replace(cfg, seed=seed), scenes, concept_loss)
            print(json.dumps(dict(run="contrastive", seed=seed, concept_loss=concept_loss, steps=a.steps, **res,
                                  object_loss_floor=round(floor, 3), object_loss_bag=round(bag, 3),
                                  seconds=round(time.perf_counter() - t0, 1))), flush=True)


if __name__ == "__main__":
    main()
