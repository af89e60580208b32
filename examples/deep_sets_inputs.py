"""An input kind of one's own, in one file: a scene tower that reads a scene as a set of objects (Deep Sets).

Each object's concept values, one-hot, go through a small MLP; a scene is the sum of its objects' outputs, then a linear
map to the embedding. The query tower is the config's own (transformer or product). Use it by naming this file:
`use_inputs("examples/deep_sets_inputs.py:deep_sets")` in Python, `-p inputs examples/deep_sets_inputs.py:deep_sets`
on a page.
"""
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from binding_nb.inputs import register_inputs
from binding_nb.models import ModelConfig, query_tower


@dataclass(frozen=True)
class DeepSetsSettings:
    "The kind's settings (a config's `input_settings`)."
    hidden: int = 64   # width of the per-object MLP

    def label(self) -> str: return f"deep sets h{self.hidden}"   # how tables and figures name these inputs


class DeepSetsTower(nn.Module):
    "A scene `[slots, C]` (-1 in an empty slot) -> the sum over its objects of an MLP of their one-hot values -> `[d_out]`."
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        hidden = cfg.input_settings.hidden
        self.object = nn.Sequential(nn.Linear(cfg.n_values, hidden), nn.GELU(), nn.Linear(hidden, hidden))
        self.head = nn.Linear(hidden, cfg.d_out)
        self.register_buffer("offsets", torch.arange(cfg.C) * cfg.V, persistent=False)   # concept k's values start here

    def encode(self, scenes: torch.Tensor) -> torch.Tensor:
        present = (scenes >= 0).all(-1, keepdim=True)                                     # [n, slots, 1]
        one_hot = F.one_hot(scenes.clamp_min(0) + self.offsets, self.object[0].in_features).sum(-2).float()
        return self.head((self.object(one_hot) * present).sum(1))

    def forward(self, *scene_sets: torch.Tensor) -> list[torch.Tensor]:
        return [self.encode(s.long()) for s in scene_sets]


register_inputs("deep_sets", lambda cfg: (DeepSetsTower(cfg), query_tower(cfg)), DeepSetsSettings)
