"""mmspec: speculative decoding for multimodal generation.

One propose -> score -> verify -> commit loop; drafters and verifiers are pluggable registries.
"""

from .config import SpecConfig
from .drafters import DRAFTERS, Drafter, EarlyExitDrafter, ModelDrafter, NgramDrafter, STDDrafter
from .engine import SpeculativeEngine
from .jacobi import JacobiConfig, JacobiEngine
from .modalities.diffusion import DIFFUSION_METHODS, DiffusionSpeculator
from .modalities.image_ar import IMAGE_AR_METHODS, ImageARSpeculator
from .modalities.video import VideoSpeculator
from .modalities.vlm import VLMSpeculator
from .sampling import SamplingParams
from .types import GenerationOutput, Proposal, SpecStats, TargetScores, Verdict
from .verifiers import VERIFIERS, Verifier, make_verifier
from . import zoo

__version__ = "0.1.0"
__all__ = [
    "DIFFUSION_METHODS", "DRAFTERS", "DiffusionSpeculator", "Drafter", "EarlyExitDrafter", "GenerationOutput", "IMAGE_AR_METHODS", "ImageARSpeculator",
    "JacobiConfig", "JacobiEngine", "ModelDrafter", "NgramDrafter", "Proposal",
    "STDDrafter", "SamplingParams", "SpecConfig", "SpecStats", "SpeculativeEngine", "TargetScores", "VERIFIERS", "VLMSpeculator",
    "VideoSpeculator",
    "Verdict", "Verifier", "make_verifier", "zoo",
]  # fmt: skip
