"""mmspec: speculative decoding for multimodal generation.

One propose -> score -> verify -> commit loop (:class:`SpeculativeEngine`) for every token modality; drafters and
verifiers are pluggable registries; diffusion runs the same round over continuous states.
"""

from . import zoo
from .config import SpecConfig
from .drafters import (DRAFTERS, CompressedVLMDrafter, Drafter, EagleDrafter, EarlyExitDrafter, JacobiDrafter, ModelDrafter,
                       NgramDrafter, STDDrafter)
from .drafting import EagleHead, QueryAdaptor
from .engine import SpeculativeEngine
from .layout import UnsupportedModelError
from .modalities.asr import ASRSpeculator
from .modalities.diffusion import DIFFUSION_METHODS, DiffusionSpeculator
from .modalities.image_ar import IMAGE_AR_METHODS, ImageARSpeculator
from .modalities.video import VideoSpeculator
from .modalities.vlm import VLMSpeculator
from .sampling import SamplingParams
from .types import Commit, GenerationOutput, Proposal, SpecStats, TargetScores, Verdict, Window
from .verifiers import VERIFIERS, Verifier, make_verifier

__version__ = "0.1.0"
__all__ = [
    "ASRSpeculator", "DIFFUSION_METHODS", "DRAFTERS", "IMAGE_AR_METHODS", "VERIFIERS", "Commit", "CompressedVLMDrafter",
    "DiffusionSpeculator", "Drafter", "EagleDrafter", "EagleHead", "EarlyExitDrafter", "GenerationOutput",
    "ImageARSpeculator", "JacobiDrafter", "ModelDrafter", "NgramDrafter", "Proposal", "QueryAdaptor", "STDDrafter",
    "SamplingParams", "SpecConfig", "SpecStats", "SpeculativeEngine", "TargetScores", "UnsupportedModelError",
    "VLMSpeculator", "Verdict", "Verifier", "VideoSpeculator", "Window", "make_verifier", "zoo",
]  # fmt: skip
