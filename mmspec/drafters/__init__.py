"""Draft sources, registered by name in DRAFTERS: one module per source."""

from .base import DRAFTERS, DraftRequest, DraftSession, Drafter
from .compressed import CompressedVLMDrafter
from .eagle import EagleDrafter
from .early_exit import EarlyExitDrafter
from .jacobi import JacobiDrafter
from .model import ModelDrafter
from .ngram import NgramDrafter
from .std import STDDrafter

__all__ = [
    "CompressedVLMDrafter", "DRAFTERS", "DraftRequest", "DraftSession", "Drafter", "EagleDrafter", "EarlyExitDrafter",
    "JacobiDrafter", "ModelDrafter", "NgramDrafter", "STDDrafter",
]  # fmt: skip
