"""A trial of alternating least squares for the form probes (04's known answers), kept as a record: it does not recover them.

    python scripts/form_als_trial.py FORM RANK PROBE_RANK SCENES DIM SWEEPS STARTS [RIDGE]

Each sweep solves the head (both blocks and the bias) by least squares, then each product table (slot, concept) with the rest
fixed (one r x r system per value), then the sum block (a Kronecker-structured least squares). The same encoders and split as
scripts/form_recovery.py. Results in results/complexity/README.md ("Alternating least squares").
"""
import sys, time, numpy as np, torch
torch.set_num_threads(2)
from binding_nb.approximators import FormProbe, family, form_embeddings, chain_product
from binding_nb.sweeps import holdout_split
from binding_nb.datasets import all_pairs
from binding_nb.geometry import r2_score, scene_table
from binding_nb.scenes import ConceptSpace

def solve(G, h, lam):   # G [K, r, r], h [K, r, d?]
    eye = torch.eye(G.shape[-1], dtype=G.dtype)
    return torch.linalg.solve(G + lam * eye, h)

def als(probe, X, Y, sweeps=50, lam=1e-4, Xv=None, Yv=None, log=True):
    X = torch.as_tensor(X); Y = torch.as_tensor(Y, dtype=torch.float64)
    f, r = probe.form, probe.rank
    idx = probe.index(X, per_slot=not f.shared)          # [n, m, C]
    n, m, C = idx.shape
    v = probe.v.detach().double().clone() if f.product else None
    u = probe.u.detach().double().clone() if f.sum_block else None
    W = probe.head.weight.detach().double().clone(); b = probe.head.bias.detach().double().clone()
    nb = f.sum_block + (f.product is not None)
    def prod_feats():
        obj = chain_product(v[idx], 2)                  # [n, m, r]
        return obj.sum(1) if f.product == "per_object" else chain_product(obj, 1)
    def sum_feats(): return u[idx].sum((1, 2))
    for s in range(sweeps):
        # head
        feats = [prod_feats()] if f.product else []
        if f.sum_block: feats.append(sum_feats())
        Fm = torch.cat(feats + [torch.ones(n, 1, dtype=torch.float64)], 1)
        sol = torch.linalg.solve(Fm.T @ Fm + lam * len(Fm) * torch.eye(Fm.shape[1], dtype=torch.float64), Fm.T @ Y)
        W, b = sol[:-1].T.contiguous(), sol[-1]
        Wp = W[:, :r] if f.product else None; Ws = W[:, -r:] if f.sum_block else None
        # product factors, one (slot, concept) position at a time
        if f.product and not f.shared:
            for i in range(m):
                for k in range(C):
                    E = Y - b
                    if f.sum_block: E = E - sum_feats() @ Ws.T
                    obj = v[idx]                                             # [n, m, C, r]
                    others = torch.cat([obj[:, :, :k], obj[:, :, k+1:]], 2)
                    if f.product == "global":
                        rest_slots = [chain_product(obj[:, j], 1) for j in range(m) if j != i]
                        Z = chain_product(others[:, i], 1) if C > 1 else torch.ones(n, r, dtype=torch.float64)
                        for q in rest_slots: Z = Z * q
                    else:
                        Z = chain_product(others[:, i], 1) if C > 1 else torch.ones(n, r, dtype=torch.float64)
                        R = sum(chain_product(obj[:, j], 1) for j in range(m) if j != i)
                        E = E - R @ Wp.T
                    rows = idx[:, i, k]
                    WtW = Wp.T @ Wp
                    K = v.shape[0]
                    G = torch.zeros(K, r, r, dtype=torch.float64).index_add_(0, rows, Z[:, :, None] * Z[:, None, :]) * WtW
                    h = torch.zeros(K, r, dtype=torch.float64).index_add_(0, rows, Z * (E @ Wp))
                    used = torch.unique(rows)
                    cnt = torch.bincount(rows, minlength=K).double()[used]
                    v[used] = torch.linalg.solve(G[used] + lam * cnt[:, None, None] * torch.eye(r, dtype=torch.float64), h[used][..., None])[..., 0]
        if f.sum_block:
            E = Y - b - (prod_feats() @ Wp.T if f.product else 0)
            K = u.shape[0]
            Xo = torch.zeros(n, K, dtype=torch.float64).scatter_add_(1, idx.flatten(1), torch.ones(n, m*C, dtype=torch.float64))
            XtX = Xo.T @ Xo + lam * n * torch.eye(K, dtype=torch.float64)
            WtW = Ws.T @ Ws + lam * torch.eye(r, dtype=torch.float64)
            u = torch.linalg.solve(XtX, Xo.T @ E @ Ws) @ torch.linalg.inv(WtW)
        if s == sweeps - 1 or (log and s % 5 == 4):
            with torch.no_grad():
                probe.v.copy_(v.float()) if f.product else None
                if f.sum_block: probe.u.copy_(u.float())
                probe.head.weight.copy_(W.float()); probe.head.bias.copy_(b.float())
                tr = r2_score(Y.numpy(), probe(X).numpy())
                if not log: continue
                va = r2_score(Yv, probe(torch.as_tensor(Xv)).numpy()) if Xv is not None else float('nan')
            print(f"sweep {s+1}: train {tr:.4f} val {va:.4f}", flush=True)
    return probe

def parse(argv: list[str] | None = None):
    "The command line (the docstring's), checked before anything is fitted."
    import argparse
    from binding_nb.approximators import FORMS
    from binding_nb.utils import arg_type, number_in, whole_number
    count = lambda low=1: arg_type(whole_number, low=low)
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("form", choices=list(FORMS)); p.add_argument("rank", type=count()); p.add_argument("probe_rank", type=count())
    p.add_argument("scenes", type=count(2)); p.add_argument("dim", type=count())
    p.add_argument("sweeps", type=count(), nargs="?", default=40); p.add_argument("starts", type=count(), nargs="?", default=1)
    p.add_argument("ridge", type=arg_type(number_in, low=0), nargs="?", default=1e-6)
    a = p.parse_args(argv)
    if a.scenes > 810_000: p.error(f"scenes must be at most the 810,000 ordered pairs of the 30 x 30 space, got {a.scenes}")
    return a


if __name__ == "__main__":
    a = parse()
    form, rank, prank, nsc, dim, sweeps = a.form, a.rank, a.probe_rank, a.scenes, a.dim, a.sweeps
    space = ConceptSpace([30, 30]); pairs = all_pairs(space); pairs = pairs[(pairs[..., 0] >= 0).all(1)]
    scenes = pairs[np.sort(np.random.default_rng(0).choice(len(pairs), nsc, replace=False))]
    t = scene_table(form_embeddings(space, scenes, form, rank, dim, seed=1), (scenes, space))
    sp = holdout_split(t, 0.5, seed=1)
    print(len(sp.train), len(sp.val), len(sp.test))
    for start in range(a.starts):
        torch.manual_seed(start)
        probe = FormProbe(space.values_per_concept, 2, dim, prank, family(form).form, 0.3, 0.0).double()
        t0 = time.time()
        als(probe, t.values[sp.train], t.emb[sp.train], sweeps, a.ridge, t.values[sp.val], t.emb[sp.val])
        probe = probe.float()
        with torch.no_grad(): te = r2_score(t.emb[sp.test], probe(torch.as_tensor(t.values[sp.test])).numpy())
        print(f"start {start}: test r2 {te:.4f}  {time.time()-t0:.1f}s", flush=True)
