"""DiffusionSpeculator: the diffusion modality's adapter — a diffusers denoiser and scheduler, conditions and CFG
in, samples (and PIL images) out, any method of ``DIFFUSION_METHODS`` on the Gaussian kernels of ``KERNELS``."""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from ...checks import check_int, check_param, is_number
from ..images import to_pil
from .gaussian import KERNELS, GaussianKernel, build_kernel, sampler_of
from .methods import DIFFUSION_METHODS, DiffusionStats, SampleContext
from .models import Denoiser


@dataclass
class DiffusionOutput:
    samples: torch.Tensor  # [B, *S] final states (images: [B, C, H, W] in [-1, 1])
    images: list | None  # PIL images for image states, else None
    stats: DiffusionStats
    method: str
    sampler: str
    lossless: bool


def _split_pipeline(obj):
    """A diffusers pipeline (``.unet`` or ``.transformer`` + ``.scheduler``) or a (model, scheduler) pair."""
    if isinstance(obj, (tuple, list)) and len(obj) == 2:
        return obj[0], obj[1]
    model = getattr(obj, "unet", None) or getattr(obj, "transformer", None)
    scheduler = getattr(obj, "scheduler", None)
    if model is None or scheduler is None:
        raise TypeError(f"pipeline_or_unet_and_scheduler: expected a diffusers pipeline with .unet (or .transformer) and "
                        f".scheduler, or a (model, scheduler) pair, got {type(obj).__name__}")  # fmt: skip
    return model, scheduler


class DiffusionSpeculator:
    """Speculative sampling for a diffusers denoiser.

    ``conditioner`` maps one user condition (e.g. a caption) to what the model's condition keyword takes (a class
    id, or an embedding tensor [L, D]); ``null_condition`` is the same for the empty condition (needed when
    ``cfg_scale != 1``). ``sampler`` picks the kernel ("ddpm", "ddim", "euler-ancestral"; default: the
    scheduler's own), rebuilt from the scheduler's configuration.
    """

    def __init__(self, pipeline_or_unet_and_scheduler, method: str = "speculative", *, conditioner=None,
                 null_condition=None, cfg_scale: float = 1.0, sampler: str | None = None, sample_shape=None):  # fmt: skip
        self.model, self.scheduler = _split_pipeline(pipeline_or_unet_and_scheduler)
        DIFFUSION_METHODS.get(method)
        self.method = method
        self.conditioner = conditioner
        self.null_condition = null_condition
        self.cfg_scale = cfg_scale
        self.sampler = sampler or sampler_of(self.scheduler)
        KERNELS.get(self.sampler)
        self.sample_shape = tuple(sample_shape) if sample_shape is not None else self._default_shape()

    def _default_shape(self) -> tuple:
        shape = getattr(self.model, "sample_shape", None)
        if shape is not None:
            return tuple(shape)
        cfg = self.model.config
        size = cfg.sample_size if isinstance(cfg.sample_size, (tuple, list)) else (cfg.sample_size, cfg.sample_size)
        return (cfg.in_channels, *size)

    @property
    def device(self):
        p = next(self.model.parameters(), None)
        if p is not None:
            return p.device
        b = next(self.model.buffers(), None)
        return b.device if b is not None else torch.device("cpu")

    def kernel(self, num_inference_steps: int, sampler: str | None = None, eta: float | None = None) -> GaussianKernel:
        sampler = sampler or self.sampler
        options = {} if eta is None else {"eta": eta}
        if eta is not None and sampler != "ddim":
            raise ValueError(f"eta: only the 'ddim' sampler takes eta, got eta={eta!r} with sampler {sampler!r}")
        return build_kernel(sampler, self.scheduler.config, num_inference_steps, **options)

    def _conditions(self, conditions, batch_size):
        if conditions is None:
            check_int("batch_size", batch_size, 1, note=" when no conditions are given")
            return None, batch_size
        if isinstance(conditions, (str, int)) or not hasattr(conditions, "__len__"):
            conditions = [conditions]
        if len(conditions) == 0:
            raise ValueError("conditions: expected at least one condition, got an empty list")
        values = [self.conditioner(c) if self.conditioner else c for c in conditions]
        if isinstance(values[0], torch.Tensor) and values[0].dim() > 0:
            cond = torch.stack(values).to(self.device)
        else:
            cond = torch.tensor([int(v) for v in values], dtype=torch.int64, device=self.device)
        return cond, len(conditions)

    @torch.no_grad()
    def generate(self, conditions=None, *, batch_size: int | None = None, num_inference_steps: int = 100,
                 method: str | None = None, sampler: str | None = None, eta: float | None = None, seed: int = 0,
                 generator: torch.Generator | None = None, num_draft_tokens: int | None = None,
                 cfg_scale: float | None = None, decode: bool = True, **params) -> DiffusionOutput:  # fmt: skip
        """Sample one state per condition (or ``batch_size`` unconditional ones).

        ``num_draft_tokens``: the steps drafted ahead per round (speculative / asd: ``lookahead``; paradigms: the
        Picard ``window``; both names stay as aliases). ``params`` go to the method (speculative / asd: ``lookahead``,
        ``draft``, ``verifier``, ``verifier_params``; paradigms: ``window``, ``tolerance``; speca: ``tau0``, ``beta``,
        ``floor``, ``order``, ``max_forecast``). The same ``seed`` gives every method the same initial noise;
        ``generator`` instead: the seed is drawn from it.
        """
        name = method or self.method
        impl = DIFFUSION_METHODS.get(name)()
        if num_draft_tokens is not None:
            if impl.draft_length is None:
                raise ValueError(f"num_draft_tokens: method {name!r} drafts no steps ahead (it takes {list(impl.params) or 'none'})")
            if params.get(impl.draft_length, num_draft_tokens) != num_draft_tokens:
                raise ValueError(f"num_draft_tokens: {impl.draft_length!r} is its alias; got both ({params[impl.draft_length]} "
                                 f"and {num_draft_tokens})")  # fmt: skip
            params[impl.draft_length] = num_draft_tokens
        if generator is not None:
            seed = int(torch.randint(2**62, (1,), generator=generator, device=generator.device))
        bad = sorted(set(params) - set(impl.params))
        if bad:
            raise ValueError(f"{bad[0]}: not a parameter of method {name!r}; it takes {list(impl.params) or 'none'}")
        kernel = self.kernel(num_inference_steps, sampler, eta)
        if impl.needs_stochastic and not kernel.stochastic and kernel.num_steps == 1:
            raise ValueError(f"num_inference_steps: method {name!r} drafts and couples stochastic steps, but with 1 step "
                             f"the {kernel.sampler!r} sampler takes only its final, deterministic step; expected >= 2")  # fmt: skip
        if impl.needs_stochastic and not kernel.stochastic:
            raise ValueError(
                f"method {name!r} is lossless only for a stochastic sampler (σ > 0 at every step but the last), but sampler "
                f"{kernel.sampler!r}{' with eta=' + str(eta if eta is not None else 0) if kernel.sampler == 'ddim' else ''} is "
                f"deterministic: reflection coupling has nothing to couple. Use sampler='ddpm', 'euler-ancestral' or "
                f"'ddim' with eta > 0, or the lossy method 'speca' (forecast gating works with deterministic samplers)")  # fmt: skip
        scale = self.cfg_scale if cfg_scale is None else cfg_scale
        check_param("cfg_scale", scale, is_number(scale) and scale >= 0, "a number >= 0")
        cond, b = self._conditions(conditions, batch_size)
        if scale != 1.0 and cond is not None and self.null_condition is None:
            raise ValueError(f"cfg_scale: classifier-free guidance (cfg_scale={scale}) needs null_condition= on the speculator")
        null = self.null_condition
        if null is not None and self.conditioner is not None and not isinstance(null, (int, torch.Tensor)):
            null = self.conditioner(null)
        device = self.device
        den = Denoiser(self.model, kernel, float(scale), null)
        x = kernel.init_std * torch.randn((b, *self.sample_shape), generator=torch.Generator(device).manual_seed(seed),
                                          device=device, dtype=torch.float32)  # fmt: skip
        ctx = SampleContext(kernel, den, cond, seed, torch.Generator(device).manual_seed(seed + 0x5EED))
        t0 = time.perf_counter()
        samples, stats = impl.run(ctx, x, **params)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        stats.total_seconds = time.perf_counter() - t0
        images = to_pil(samples) if decode and samples.dim() == 4 and samples.shape[1] in (1, 3) else None
        return DiffusionOutput(samples, images, stats, name, kernel.sampler, impl.lossless)
