"""Checks of binding_nb.scenes that do not belong in the notebook: the benchmark script runs and prints its figure,
and the library works on the largest object space of the paper (|O| = 125,000)."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from binding_nb.scenes import (ConceptSpace, coverage_split, make_batch, object_recognition, present_object_mask,
                               sample_scenes)
from binding_nb.utils import make_generator

ROOT = Path(__file__).resolve().parents[1]


def test_bench_scenes_prints_json():
    out = subprocess.run([sys.executable, str(ROOT / "tests" / "bench_scenes.py"), "--batch", "256", "--repeats", "3"],
                         capture_output=True, text=True, check=True).stdout
    row = json.loads(out.strip().splitlines()[-1])
    assert row["batch"] == 256 and row["median_ms"] > 0 and row["object_queries"] > 0


def test_largest_space_exhaustive_object_recognition():
    space = ConceptSpace([50, 50, 50])
    split = coverage_split(space, 0.4, seed=3)
    scenes = sample_scenes(space, split.heldout, 64, max_objects=2, generator=1)
    scores = present_object_mask(space, scenes).float()                 # [64, 125000]
    assert object_recognition(scores, scenes, space).all()
    scores[:, int(split.train[0])] = 2.0                                 # a train object beats every present one
    assert not object_recognition(scores, scenes, space).any()


def test_batch_never_contains_heldout_objects():
    space = ConceptSpace([10, 10])
    split = coverage_split(space, 0.3, seed=0)
    fit = torch.from_numpy(split.fit)
    g = make_generator(0)
    for _ in range(5):
        b = make_batch(space, fit, 512, 3, g, n_perturb=2)
        assert np.isin(b.object_query_ids.numpy(), split.fit).all()
        assert np.isin(space.object_ids(b.scenes).numpy(), np.append(split.fit, -1)).all()


@pytest.mark.parametrize("bad", [dict(batch_size=0), dict(max_objects=0), dict(min_objects=0), dict(min_objects=3)])
def test_make_batch_rejects_bad_sizes(bad):
    space = ConceptSpace([4, 4])
    kw = dict(batch_size=8, max_objects=2) | bad
    with pytest.raises(ValueError, match="1 <= min_objects <= max_objects"):
        make_batch(space, torch.arange(16), generator=make_generator(0), **kw)


def test_make_batch_min_objects():
    space = ConceptSpace([4, 4])
    b = make_batch(space, torch.arange(16), 256, 3, make_generator(0), min_objects=2)
    sizes = (b.scenes[..., 0] >= 0).sum(1)
    assert sizes.min() == 2 and sizes.max() == 3
