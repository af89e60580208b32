"""Checks of binding_nb.scenes that do not belong in the notebook: the benchmark script runs and prints its figure,
the library works on the largest object space of the paper (|O| = 125,000), numpy scalars work wherever Python
numbers do, and every function that takes scenes refuses unsigned or partly empty ones with the same message."""
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from binding_nb.scenes import (check_scenes, ConceptSpace, consistent_object_sets, coverage_split, hard_negatives,
                               object_recognition, perturbation_negatives, present_object_mask, present_value_mask, sample_scenes)
from binding_nb.tokens import BatchSettings, detokenize_scenes, make_batch, scene_length, tokenize_scenes
from binding_nb.utils import make_generator

ROOT = Path(__file__).resolve().parents[1]


def test_bench_scenes_prints_json():
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_scenes.py"), "--batch", "256", "--repeats", "3"],
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
        b = make_batch(space, fit, BatchSettings(512, max_objects=3, n_perturb=2), generator=g)
        assert np.isin(b.object_query_ids.numpy(), split.fit).all()
        assert np.isin(space.object_ids(b.scenes).numpy(), np.append(split.fit, -1)).all()


@pytest.mark.parametrize("bad, says", [(dict(batch_size=0), "batch_size must be >= 1"), (dict(max_objects=0), "max_objects must be >= 1"),
                                       (dict(min_objects=0), "min_objects must be >= 1"), (dict(min_objects=3), "need min_objects <= max_objects")])
def test_batch_settings_reject_bad_sizes(bad, says):
    with pytest.raises(ValueError, match=says):
        BatchSettings(**dict(batch_size=8, max_objects=2) | bad)


def test_make_batch_min_objects():
    space = ConceptSpace([4, 4])
    b = make_batch(space, torch.arange(16), BatchSettings(256, max_objects=3, min_objects=2), generator=make_generator(0))
    sizes = (b.scenes[..., 0] >= 0).sum(1)
    assert sizes.min() == 2 and sizes.max() == 3


SPACE = ConceptSpace([4, 3])
SCENES = sample_scenes(SPACE, np.arange(12), 32, 3, generator=0)      # sizes 1..3, so most scenes have empty slots

# each call takes its whole numbers from `i` and its fractions from `f`
NUMBER_CALLS = {
    "ConceptSpace": lambda i, f: ConceptSpace([i(4), f(3)]).values_per_concept,
    "coverage_split": lambda i, f: coverage_split(SPACE, f(0.5), seed=i(4), val_fraction=f(0.25)).fit,
    "sample_scenes": lambda i, f: sample_scenes(SPACE, np.arange(12), i(8), i(3), generator=i(1), min_objects=i(2)),
    "check_scenes": lambda i, f: check_scenes(SPACE, SCENES, i(3)),
    "scene_length": lambda i, f: scene_length(SPACE, i(3)),
    "tokenize_scenes": lambda i, f: tokenize_scenes(SPACE, SCENES, i(4)),
    "detokenize_scenes": lambda i, f: detokenize_scenes(SPACE, tokenize_scenes(SPACE, SCENES, 3), i(3)),
    "perturbation_negatives": lambda i, f: perturbation_negatives(SPACE, SCENES, i(5), i(2)),
    "hard_negatives": lambda i, f: hard_negatives(SPACE, SCENES, generator=i(5), n_per_object=i(2)),
    "make_batch": lambda i, f: make_batch(SPACE, torch.arange(12), BatchSettings(i(8), max_objects=i(3), n_perturb=i(2), min_objects=i(2)),
                                          generator=make_generator(0)).object_values,
    "consistent_object_sets": lambda i, f: consistent_object_sets(SPACE, SCENES, i(100)),
}


@pytest.mark.parametrize("name", NUMBER_CALLS)
def test_numpy_scalars_work_like_python_numbers(name):
    call = NUMBER_CALLS[name]
    expected = call(int, float)
    for i, f in ((np.int64, np.float64), (np.int32, np.float32), (np.uint8, np.float32)):
        got = call(i, f)
        assert type(got) is type(expected) and np.array_equal(np.asarray(got), np.asarray(expected)), (i, f)


@pytest.mark.parametrize("call", [lambda: ConceptSpace([np.float32(2.5), 3]), lambda: sample_scenes(SPACE, [0], 4.5, 2),
                                  lambda: tokenize_scenes(SPACE, SCENES, np.float64(3.5)),
                                  lambda: coverage_split(SPACE, 0.5, seed=np.float64(0.5)),
                                  lambda: hard_negatives(SPACE, SCENES, generator=np.bool_(True))])
def test_fractions_and_bools_are_not_whole_numbers(call):
    with pytest.raises(ValueError, match="must be a whole number, got"): call()


SCENE_CALLS = {
    "check_scenes": lambda s: check_scenes(SPACE, s),
    "tokenize_scenes": lambda s: tokenize_scenes(SPACE, s, 3),
    "hard_negatives": lambda s: hard_negatives(SPACE, s),
    "object_recognition": lambda s: object_recognition(torch.zeros(len(s), SPACE.n_objects), s, SPACE),
}
UNSIGNED = {"numpy uint8": (SCENES.numpy().astype(np.uint8), "`.astype(np.int64)`"),
            "torch uint8": (SCENES.to(torch.uint8), "`.long()`")}


@pytest.mark.parametrize("kind", UNSIGNED)
@pytest.mark.parametrize("name", SCENE_CALLS)
def test_unsigned_scenes_are_refused_with_the_cast(name, kind):
    scenes, cast = UNSIGNED[kind]
    with pytest.raises(ValueError, match=f"scenes need a signed integer dtype.*cast them with {re.escape(cast)}"):
        SCENE_CALLS[name](scenes)


@pytest.mark.parametrize("kind", UNSIGNED)
@pytest.mark.parametrize("fn", [SPACE.object_ids, lambda s: present_value_mask(SPACE, s)])
def test_unsigned_values_name_the_missing_minus_one(fn, kind):
    scenes, cast = UNSIGNED[kind]
    with pytest.raises(ValueError, match=f"concept value 255 .*unsigned dtype .* cannot hold the -1 .*cast it with {re.escape(cast)}"):
        fn(scenes)


@pytest.mark.parametrize("name", SCENE_CALLS)
def test_partly_empty_objects_are_named(name):
    scenes = SCENES.clone()
    b = int((scenes[:, 2, 0] < 0).nonzero()[0])                         # a scene with an empty third slot
    scenes[b, 2, 0] = 1                                                  # -> [1, -1]: partly empty, 1 itself is valid
    with pytest.raises(ValueError, match=rf"object at index \({b}, 2\) is partly empty: \[1, -1\]; "
                                         "an empty slot must be -1 in every concept"):
        SCENE_CALLS[name](scenes)
