"""The zoo registry: each entry module (one per entry) registers a :class:`ZooEntry` with how to train and load it;
:func:`load` verifies the entry's files against its card (:mod:`.integrity`) and loads its models."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from ..registry import Registry
from .integrity import load_model, verify

WEIGHTS = Path(__file__).parent / "weights"


@dataclass(frozen=True)
class ZooEntry:
    name: str
    train: Callable[..., dict]  # train(out_dir, **options) -> model card
    load: Callable[..., object]  # load(path, dtype, device) -> the entry's models

    @property
    def path(self) -> Path:
        return WEIGHTS / self.name


ZOO: Registry[ZooEntry] = Registry("zoo entry")


def load(name: str, dtype=torch.float32, device="cpu", *, path=None, verify_weights: bool = True):
    """Load a zoo entry's models (from ``path``, default: the bundled weights). ``verify_weights``: check every file
    against the sha256 its card records first (:mod:`mmspec.zoo.integrity`); False for entries retrained in place."""
    entry = ZOO.get(name)
    root = Path(path) if path is not None else entry.path
    if verify_weights:
        verify(root, name)
    return entry.load(root, dtype=dtype, device=device)


def load_eagle(path: Path, dtype, device):
    from ..drafting.eagle_head import EagleHead

    return load_model(EagleHead, path / "eagle", dtype, device, optional=True)
