"""Draft sources, registered by name in DRAFTERS."""

from .base import DRAFTERS, DraftRequest, DraftSession, Drafter
from .compressed import CompressedVLMDrafter
from .early_exit import EarlyExitDrafter
from .model import ModelDrafter
from .ngram import NgramDrafter
from .std import STDDrafter

__all__ = [
    "CompressedVLMDrafter", "DRAFTERS", "DraftRequest", "DraftSession", "Drafter", "EarlyExitDrafter", "ModelDrafter",
    "NgramDrafter", "STDDrafter",
]  # fmt: skip
