"""The target call of diffusion speculation and an analytic toy model.

- :class:`Denoiser` evaluates a diffusers denoiser (``UNet2DModel``, ``UNet2DConditionModel``,
  ``DiTTransformer2DModel``, or anything with the same ``model(sample, timestep, **condition).sample`` call) on
  rows that sit at *different* steps in one batched call, with classifier-free guidance as a stacked batch
  (conditional rows, then the same rows with the null condition; combined as ``u + s·(c − u)``).
- :class:`GaussianMixtureDenoiser` is the exact ε-predictor of a variance-preserving diffusion whose data law
  is a Gaussian mixture in R^D: no training, an analytic score, used by the law tests.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .gaussian import GaussianKernel

CONDITION_KWARGS = {  # model class -> the keyword its condition goes to (class ids or embeddings)
    "UNet2DModel": "class_labels",
    "UNet2DConditionModel": "encoder_hidden_states",
    "DiTTransformer2DModel": "class_labels",
    "GaussianMixtureDenoiser": "class_labels",
}


@dataclass
class Denoiser:
    """Batched network outputs at per-row steps: ``denoiser(x [R, *S], n [R], cond [R, ...] | None) -> out [R, *S]``.

    ``cond`` is whatever the model's condition keyword takes (class ids [R] or embeddings [R, L, D]); with
    ``cfg_scale != 1`` the null condition ``null`` (an id, or a tensor of one row's shape) is stacked below.
    Counts its calls (sequential rounds) and rows (network evaluations, CFG rows excluded).
    """

    model: torch.nn.Module
    kernel: GaussianKernel
    cfg_scale: float = 1.0
    null: object = None
    calls: int = 0
    rows: int = 0

    @property
    def condition_kwarg(self) -> str | None:
        return CONDITION_KWARGS.get(type(self.model).__name__, "class_labels")

    def _null_rows(self, cond: torch.Tensor) -> torch.Tensor:
        null = self.null if isinstance(self.null, torch.Tensor) else torch.tensor(self.null)
        null = null.to(device=cond.device, dtype=cond.dtype)
        return null.expand_as(cond) if null.dim() == cond.dim() else null.expand(cond.shape[0], *null.shape)

    def model_call(self, inp: torch.Tensor, t: torch.Tensor, cond) -> torch.Tensor:
        kwargs = {} if cond is None else {self.condition_kwarg: cond}
        param = next(self.model.parameters(), None)
        dtype = param.dtype if param is not None else inp.dtype
        return self.model(inp.to(dtype), t, **kwargs).sample

    def __call__(self, x: torch.Tensor, n: torch.Tensor, cond=None) -> torch.Tensor:
        self.calls += 1
        self.rows += x.shape[0]
        inp = self.kernel.model_input(x, n)  # [R, *S]
        t = self.kernel.model_timesteps(n).to(device=x.device, dtype=torch.float32)  # [R]
        if self.cfg_scale == 1.0 or cond is None:
            return self.model_call(inp, t, cond).to(x.dtype)
        both = self.model_call(torch.cat([inp, inp]), torch.cat([t, t]), torch.cat([cond, self._null_rows(cond)]))
        c, u = both.to(x.dtype).chunk(2)  # [R, *S] each
        return u + self.cfg_scale * (c - u)


class _Output:
    def __init__(self, sample):
        self.sample = sample


class GaussianMixtureDenoiser(torch.nn.Module):
    """Exact ε-prediction for data x0 ~ Σ_k π_k N(μ_k, s_k² I) in R^D under x_t = √ᾱ_t x0 + √(1−ᾱ_t) ε.

    ``forward(sample [B, D], timestep [B], class_labels=None)``: timesteps index the training schedule
    ``alphas_cumprod`` (fractional timesteps interpolate σ_t = √((1−ᾱ)/ᾱ) linearly, like diffusers' Euler
    schedulers). For Euler-ancestral the input arrives scaled by 1/√(σ²+1), which is exactly x_t, so one model
    serves every sampler. ``class_labels`` k restricts the mixture to component k; label ``num_components`` (or
    None) is the unconditional mixture (the null condition of CFG).
    """

    def __init__(self, means: torch.Tensor, stds: torch.Tensor, weights: torch.Tensor, alphas_cumprod: torch.Tensor):
        super().__init__()
        self.register_buffer("means", means.to(torch.float64))  # [K, D]
        self.register_buffer("stds", stds.to(torch.float64))  # [K]
        self.register_buffer("log_weights", weights.to(torch.float64).log())  # [K]
        self.register_buffer("sigmas", ((1 - alphas_cumprod) / alphas_cumprod).sqrt().to(torch.float64))  # [T]

    @property
    def sample_shape(self) -> tuple[int]:
        return (self.means.shape[1],)

    @property
    def num_components(self) -> int:
        return self.means.shape[0]

    def alpha_bar(self, timestep: torch.Tensor) -> torch.Tensor:
        t = timestep.to(torch.float64).clamp(0, self.sigmas.shape[0] - 1)
        lo = t.floor().long()
        hi = (lo + 1).clamp_max(self.sigmas.shape[0] - 1)
        sigma = self.sigmas[lo] + (t - lo) * (self.sigmas[hi] - self.sigmas[lo])
        return 1 / (1 + sigma**2)

    def forward(self, sample: torch.Tensor, timestep: torch.Tensor, class_labels: torch.Tensor | None = None):
        x = sample.to(torch.float64)  # [B, D]
        timestep = torch.as_tensor(timestep, device=x.device)
        a = self.alpha_bar(timestep.expand(x.shape[0]))[:, None]  # [B, 1]
        var = a * self.stds**2 + (1 - a)  # [B, K]
        diff = x[:, None, :] - a.sqrt()[..., None] * self.means  # [B, K, D]
        d = x.shape[-1]
        logits = self.log_weights - 0.5 * (diff**2).sum(-1) / var - 0.5 * d * var.log()  # [B, K]
        if class_labels is not None:
            labels = torch.as_tensor(class_labels, device=x.device).long().view(-1)
            own = torch.nn.functional.one_hot(labels.clamp_max(self.num_components - 1), self.num_components).bool()
            keep = own | (labels == self.num_components)[:, None]  # the null label keeps every component
            logits = logits.masked_fill(~keep, -torch.inf)
        w = logits.softmax(-1)  # [B, K]
        score = -(w[..., None] * diff / var[..., None]).sum(1)  # ∇ log p_t(x) [B, D]
        eps = -(1 - a).sqrt() * score
        return _Output(eps.to(sample.dtype))


def toy_mixture(alphas_cumprod: torch.Tensor) -> GaussianMixtureDenoiser:
    """A 2-D mixture of four well-separated components of unequal weight and width (the law-test model)."""
    means = torch.tensor([[-2.0, -1.0], [2.0, -1.5], [0.0, 2.0], [2.5, 2.5]])
    stds = torch.tensor([0.3, 0.5, 0.4, 0.2])
    weights = torch.tensor([0.35, 0.25, 0.3, 0.1])
    return GaussianMixtureDenoiser(means, stds, weights, alphas_cumprod)
