"""Diffusion modality: lossless speculative sampling (reflection coupling, ASD), forecast gating and a Picard
baseline on Hugging Face diffusers denoisers and schedulers (METHODS.md §5).

``DiffusionSpeculator((unet, scheduler) | pipeline).generate(conditions, method=..., num_inference_steps=...)``
samples with any method of ``DIFFUSION_METHODS`` on the Gaussian kernels of ``KERNELS`` (DDPM, DDIM with η,
Euler-ancestral), derived from the scheduler's configuration.
"""

from .forecast import BLOCK_SPLITS, ForecastGatedSampling, GatedModel
from .gaussian import KERNELS, SAMPLER_SCHEDULERS, GaussianKernel, build_kernel, sampler_of
from .methods import DIFFUSION_METHODS, DRAFT_RULES, DiffusionMethod, DiffusionStats, SampleContext, StepNoise
from .models import CONDITION_KWARGS, Denoiser, GaussianMixtureDenoiser, toy_mixture
from .speculator import DiffusionOutput, DiffusionSpeculator, to_pil

__all__ = [
    "BLOCK_SPLITS", "CONDITION_KWARGS", "DIFFUSION_METHODS", "DRAFT_RULES", "Denoiser", "DiffusionMethod", "DiffusionOutput",
    "DiffusionSpeculator", "DiffusionStats", "ForecastGatedSampling", "GatedModel", "GaussianKernel",
    "GaussianMixtureDenoiser", "KERNELS", "SAMPLER_SCHEDULERS", "SampleContext", "StepNoise", "build_kernel",
    "sampler_of", "to_pil", "toy_mixture",
]  # fmt: skip
