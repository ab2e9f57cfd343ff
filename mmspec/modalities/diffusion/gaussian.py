"""Pure per-step Gaussian kernels of diffusers samplers (METHODS.md §5).

A sampler with N steps moves the state ``x_n`` (n = 0 .. N-1; x_0 is the initial noise) by

    x̂0   = clip(ax[n]·x + ao[n]·out)          out = the network output at (x_n, t_n)
    ε̂    = bx[n]·x + bo[n]·out
    mean = cx[n]·x + c0[n]·x̂0 + ce[n]·ε̂
    x_{n+1} = mean + std[n]·ξ,  ξ ~ N(0, I)

with every coefficient a number per step read from the scheduler's *configuration* (its ``alphas_cumprod``,
timesteps and sigmas after ``set_timesteps``), never by calling the stateful ``step()``. All three supported
samplers (DDPM, DDIM with any η, Euler-ancestral) are linear in (x, out) up to the x̂0 clip, so one kernel class
covers them and every operation is batched over rows that sit at *different* steps (``n`` is a per-row index).

Two frozen quantities give the drafts of speculative sampling:

- frozen drift (De Bortoli et al.): keep the network output ``out`` of the last verified node and re-apply the
  coefficients at each drafted state (:meth:`GaussianKernel.mean_from_output`);
- frozen x̂0 (ASD): keep the x̂0 of the last verified node; ε̂ is re-derived from it at each drafted state
  (:meth:`GaussianKernel.mean_from_x0`, using ε̂ = gx[n]·x + g0[n]·x̂0).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch

from ...checks import check_int, check_param, is_number
from ...registry import Registry

F64 = torch.float64


@dataclass(frozen=True)
class GaussianKernel:
    """The N per-step Gaussian kernels of one sampler run. Every array is float64 [N] on the CPU."""

    sampler: str  # registry name of the sampler ("ddpm", "ddim", "euler-ancestral")
    timesteps: torch.Tensor  # [N] the model's timestep at step n
    input_scale: torch.Tensor  # [N] model input = x · input_scale[n]
    ax: torch.Tensor  # [N] x̂0 = ax·x + ao·out (then clipped)
    ao: torch.Tensor
    bx: torch.Tensor  # [N] ε̂ = bx·x + bo·out
    bo: torch.Tensor
    gx: torch.Tensor  # [N] ε̂ from a frozen x̂0: ε̂ = gx·x + g0·x̂0
    g0: torch.Tensor
    cx: torch.Tensor  # [N] mean = cx·x + c0·x̂0 + ce·ε̂
    c0: torch.Tensor
    ce: torch.Tensor
    std: torch.Tensor  # [N] σ_n >= 0 (0: a deterministic step)
    init_std: float  # the initial state is x_0 ~ N(0, init_std² I)
    clip: float | None  # x̂0 is clamped to [-clip, clip] (None: no clipping)

    @property
    def num_steps(self) -> int:
        return self.timesteps.shape[0]

    @property
    def stochastic(self) -> bool:
        """True when every step but the last has σ > 0 (the last may be deterministic, as in DDPM)."""
        return bool((self.std[:-1] > 0).all()) and (self.num_steps > 1 or bool(self.std[0] > 0))

    def at(self, name: str, n: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
        """Coefficient ``name`` at per-row steps ``n`` [R] as a tensor [R, 1, ..] broadcastable against ``like``."""
        values = getattr(self, name).to(like.device)[n.to(like.device)]  # [R]
        return values.to(like.dtype).view(-1, *([1] * (like.dim() - 1)))

    def model_timesteps(self, n: torch.Tensor) -> torch.Tensor:
        return self.timesteps[n.cpu()]

    def model_input(self, x: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
        return x * self.at("input_scale", n, x)

    def predict(self, x: torch.Tensor, out: torch.Tensor, n: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(x̂0, ε̂) [R, *S] from the state x [R, *S] and the network output ``out`` [R, *S] at steps n [R]."""
        out = out.to(x.dtype)
        x0 = self.at("ax", n, x) * x + self.at("ao", n, x) * out
        if self.clip is not None:
            x0 = x0.clamp(-self.clip, self.clip)
        eps = self.at("bx", n, x) * x + self.at("bo", n, x) * out
        return x0, eps

    def x0_from_output(self, x: torch.Tensor, out: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
        return self.predict(x, out, n)[0]

    def mean(self, x: torch.Tensor, x0: torch.Tensor, eps: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
        return self.at("cx", n, x) * x + self.at("c0", n, x) * x0 + self.at("ce", n, x) * eps

    def mean_from_output(self, x: torch.Tensor, out: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
        """The sampler's mean at (x, step n) given the network output there (or a frozen one: a frozen-drift draft)."""
        x0, eps = self.predict(x, out, n)
        return self.mean(x, x0, eps, n)

    def mean_from_x0(self, x: torch.Tensor, x0: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
        """The sampler's mean at (x, step n) with x̂0 given (ASD's closed-form draft from a frozen x̂0)."""
        eps = self.at("gx", n, x) * x + self.at("g0", n, x) * x0
        return self.mean(x, x0, eps, n)

    def step_std(self, n: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
        return self.at("std", n, like)


KERNELS: Registry = Registry("diffusion sampler")  # name -> builder(scheduler_config, num_steps, **options)


def _check_common(config, sampler: str) -> None:
    if config.get("thresholding", False):
        raise ValueError(f"scheduler: dynamic thresholding (thresholding=True) is not supported by the {sampler} kernel "
                         f"(x̂0 would depend on a per-sample quantile); use clip_sample instead")  # fmt: skip
    if config.get("prediction_type", "epsilon") not in ("epsilon", "sample", "v_prediction"):
        raise ValueError(f"scheduler.prediction_type: expected 'epsilon', 'sample' or 'v_prediction', got "
                         f"{config.get('prediction_type')!r}")  # fmt: skip


def _vp_prediction(prediction_type: str, a: torch.Tensor):
    """(ax, ao, bx, bo) of x̂0 / ε̂ for a variance-preserving state x = √a·x0 + √(1−a)·ε."""
    sa, sb = a.sqrt(), (1 - a).sqrt()
    one, zero = torch.ones_like(a), torch.zeros_like(a)
    table = {
        "epsilon": (1 / sa, -sb / sa, zero, one),
        "sample": (zero, one, 1 / sb, -sa / sb),
        "v_prediction": (sa, -sb, sb, sa),
    }
    return table[prediction_type]


def _fresh(scheduler_class: str, config, num_steps: int):
    """A fresh scheduler of that class built from ``config`` with ``set_timesteps(num_steps)`` (arrays only)."""
    import diffusers

    scheduler = getattr(diffusers, scheduler_class).from_config(copy.deepcopy(dict(config)))
    scheduler.set_timesteps(num_steps)
    return scheduler


@KERNELS.register("ddpm")
def ddpm_kernel(config, num_steps: int) -> GaussianKernel:
    """DDPM ancestral steps (``DDPMScheduler``): posterior mean of x̂0 and x_t, ``fixed_small`` or ``fixed_large``
    variance; noise is added only while t > 0, as in ``step()``."""
    _check_common(config, "ddpm")
    variance_type = config.get("variance_type", "fixed_small")
    if variance_type not in ("fixed_small", "fixed_large"):
        raise ValueError(f"scheduler.variance_type: expected 'fixed_small' or 'fixed_large' (a state-independent σ), got "
                         f"{variance_type!r}; learned variances make σ depend on the state, which breaks the Gaussian "
                         f"coupling (METHODS.md §5)")  # fmt: skip
    sched = _fresh("DDPMScheduler", config, num_steps)
    t = sched.timesteps.to(torch.int64)  # [N]
    ac = sched.alphas_cumprod.to(F64)  # [T]
    prev = torch.cat([t[1:], torch.tensor([-1])])  # DDPM's previous_timestep with set_timesteps
    a = ac[t]
    a_prev = torch.where(prev >= 0, ac[prev.clamp_min(0)], torch.ones_like(a))
    alpha = a / a_prev
    beta = 1 - alpha
    c0 = a_prev.sqrt() * beta / (1 - a)
    cx = alpha.sqrt() * (1 - a_prev) / (1 - a)
    if variance_type == "fixed_small":
        var = ((1 - a_prev) / (1 - a) * beta).clamp_min(1e-20)
    else:
        var = beta.clamp_min(1e-20)
    std = torch.where(t > 0, var.sqrt(), torch.zeros_like(var))
    ax, ao, bx, bo = _vp_prediction(config.get("prediction_type", "epsilon"), a)
    zero = torch.zeros_like(a)
    return GaussianKernel("ddpm", t.to(F64), torch.ones_like(a), ax, ao, bx, bo, 1 / (1 - a).sqrt(), -a.sqrt() / (1 - a).sqrt(),
                          cx, c0, zero, std, 1.0, float(config["clip_sample_range"]) if config.get("clip_sample") else None)  # fmt: skip


@KERNELS.register("ddim")
def ddim_kernel(config, num_steps: int, eta: float = 1.0) -> GaussianKernel:
    """DDIM steps with noise scale η (``DDIMScheduler``; η = 0 is deterministic). Like ``step()`` with the
    default ``use_clipped_model_output=False``: x̂0 is clipped, ε̂ is the unclipped prediction."""
    _check_common(config, "ddim")
    check_param("eta", eta, is_number(eta) and 0 <= eta <= 1, "a number in [0, 1] (DDIM noise scale)")
    sched = _fresh("DDIMScheduler", config, num_steps)
    t = sched.timesteps.to(torch.int64)  # [N]
    ac = sched.alphas_cumprod.to(F64)
    prev = t - config["num_train_timesteps"] // num_steps
    final = ac[0] if not config.get("set_alpha_to_one", True) else torch.tensor(1.0, dtype=F64)
    a = ac[t]
    a_prev = torch.where(prev >= 0, ac[prev.clamp_min(0)], final)
    var = (1 - a_prev) / (1 - a) * (1 - a / a_prev)
    std = eta * var.sqrt()
    ax, ao, bx, bo = _vp_prediction(config.get("prediction_type", "epsilon"), a)
    zero = torch.zeros_like(a)
    ce = (1 - a_prev - std**2).clamp_min(0).sqrt()
    return GaussianKernel("ddim", t.to(F64), torch.ones_like(a), ax, ao, bx, bo, 1 / (1 - a).sqrt(), -a.sqrt() / (1 - a).sqrt(),
                          zero, a_prev.sqrt(), ce, std, 1.0, float(config["clip_sample_range"]) if config.get("clip_sample") else None)  # fmt: skip


@KERNELS.register("euler-ancestral")
def euler_ancestral_kernel(config, num_steps: int) -> GaussianKernel:
    """Euler-ancestral steps (``EulerAncestralDiscreteScheduler``) in σ-space: x̂0 = x − σ·out (ε prediction),
    x' = x + (σ_down − σ)(x − x̂0)/σ + σ_up·ξ; the model sees x/√(σ²+1)."""
    _check_common(config, "euler-ancestral")
    if config.get("prediction_type", "epsilon") == "sample":
        raise ValueError("scheduler.prediction_type: Euler-ancestral supports 'epsilon' and 'v_prediction', got 'sample'")
    sched = _fresh("EulerAncestralDiscreteScheduler", config, num_steps)
    sig = sched.sigmas.to(F64)  # [N + 1], last = 0
    s, s_to = sig[:-1], sig[1:]
    up = (s_to**2 * (s**2 - s_to**2) / s**2).clamp_min(0).sqrt()
    down = (s_to**2 - up**2).clamp_min(0).sqrt()
    zero, one = torch.zeros_like(s), torch.ones_like(s)
    if config.get("prediction_type", "epsilon") == "epsilon":
        ax, ao = one, -s
    else:
        ax, ao = 1 / (s**2 + 1), -s / (s**2 + 1).sqrt()
    # ε̂ is never used by this sampler's mean (ce = 0); gx/g0 keep the contract ε̂ = (x − x̂0)/σ.
    return GaussianKernel("euler-ancestral", sched.timesteps.to(F64), 1 / (s**2 + 1).sqrt(), ax, ao, zero, zero,
                          1 / s, -1 / s, down / s, 1 - down / s, zero, up, float(sched.init_noise_sigma), None)  # fmt: skip


SCHEDULER_SAMPLERS = {  # diffusers scheduler class -> our sampler name (to pick the kernel of a given scheduler)
    "DDPMScheduler": "ddpm",
    "DDIMScheduler": "ddim",
    "EulerAncestralDiscreteScheduler": "euler-ancestral",
}
SAMPLER_SCHEDULERS = {v: k for k, v in SCHEDULER_SAMPLERS.items()}


def sampler_of(scheduler) -> str:
    name = type(scheduler).__name__
    if name not in SCHEDULER_SAMPLERS:
        raise ValueError(f"scheduler: expected one of {sorted(SCHEDULER_SAMPLERS)} (or pass sampler= with one of "
                         f"{KERNELS.names()}), got {name}")  # fmt: skip
    return SCHEDULER_SAMPLERS[name]


def build_kernel(sampler: str, config, num_steps: int, **options) -> GaussianKernel:
    """The kernel of ``sampler`` for ``num_steps`` steps from a scheduler ``config`` (any diffusers scheduler's
    config with the same training schedule: the sampler's own class is rebuilt from it)."""
    check_int("num_inference_steps", num_steps, 1)
    if num_steps > config["num_train_timesteps"]:
        raise ValueError(f"num_inference_steps: expected at most num_train_timesteps = {config['num_train_timesteps']}, "
                         f"got {num_steps}")  # fmt: skip
    return KERNELS.get(sampler)(config, num_steps, **options)
