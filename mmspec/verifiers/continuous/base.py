"""Continuous-state verification (METHODS.md §5): reflection maximal coupling, density-ratio acceptance and
forecast gating.

Every rule comes in three pieces that compute the same thing:

- a vectorised **core** (``reflection_coupling``, ``density_ratio``, ``forecast_gating``) that takes all its
  randomness pre-drawn (uniforms, residual candidates) and is batched over rows and steps;
- a per-row, per-step Python **reference** loop (``reference_*``) consuming the same randomness, used by the
  tests and by ``mmspec bench verifiers`` (:func:`bench_cases`);
- a registered :class:`~mmspec.verifiers.base.Verifier` whose ``verify`` validates the inputs, draws the
  randomness from a ``torch.Generator`` (``draw``) and calls the core.

All are pure (inputs are never mutated), follow the inputs' device and return states in the input dtype. They
compute in at least float32: the large [B, L, D] elementwise passes run in float32 (float64 when an input is
float64), while log densities, acceptance tests, uniforms and the reflected state are float64.

This module holds the shared pieces: the continuous contracts (``GaussianProposal``/``GaussianScores``,
``DensityProposal``/``DensityScores`` with ``GaussianDensity``/``GaussianMixtureDensity``,
``ForecastProposal``/``ForecastScores``, the shared ``ContinuousVerdict``), input checks and
:class:`ContinuousVerifier`. The rules are in :mod:`.reflection`, :mod:`.density_ratio` and :mod:`.forecast` (the
token contracts live in :mod:`mmspec.types`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace

import torch

from ..base import Verifier

F64 = torch.float64
LOG_2PI = math.log(2 * math.pi)


# ----------------------------------------------------------------------------------------------------------------
# Data contracts. B = batch rows, L / K = drafted steps, D = state dimension.
# ----------------------------------------------------------------------------------------------------------------


class Rows:
    """``rows(index)``: the contract restricted to rows ``index`` (a slice or an index tensor, never a bare int) of
    every batch-first tensor and density in it."""

    def rows(self, index):
        if isinstance(index, int):
            raise TypeError("rows: pass a slice or an index tensor (a bare int would drop the batch dimension)")
        changes = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, torch.Tensor):
                changes[f.name] = value[index]
            elif isinstance(value, BatchedDensity):
                changes[f.name] = value.rows(index)
        return replace(self, **changes)


def _expect_shape(what: str, t: torch.Tensor, shape: tuple, meaning: str):
    """Shape check with a clear error; ``None`` in ``shape`` matches any size."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{what}: expected a tensor {meaning}, got {type(t).__name__}")
    if t.dim() != len(shape) or any(s is not None and s != n for s, n in zip(shape, t.shape)):
        raise ValueError(f"{what}: expected shape {meaning}, got {tuple(t.shape)}")


@dataclass
class ContinuousVerdict(Rows):
    """A continuous verifier's decision, per row.

    The committed trajectory of a row is ``drafts[:num_accepted]`` followed by ``next_states`` when
    ``extras["new_state"]`` is True (a residual/reflected sample at the first rejection, or a bonus sample);
    otherwise ``next_states`` is the last accepted draft itself. Either way it is the state to continue from.
    """

    num_accepted: torch.Tensor  # [B] int64, 0..L: accepted draft prefix length
    next_states: torch.Tensor  # [B, *S] (S = state shape, e.g. [D]) in the input dtype: the state to continue from
    extras: dict = field(default_factory=dict)  # rule-specific diagnostics, each documented by its rule


@dataclass
class GaussianProposal(Rows):
    """L drafted Gaussian steps of a stochastic sampler (the draft chain of speculative diffusion sampling).

    Step i goes from parent ``Y_{i-1}`` (``Y_0`` = the last committed state) to ``Y_i = m_p,i + σ_i ξ_i``.
    The caller must keep ``states``, ``means`` and ``noise`` consistent; the rule reads ``noise`` and ``means``
    for the test and ``states`` only for the state to continue from when every step is accepted.
    """

    states: torch.Tensor  # [B, L, D] drafted states Y_i
    means: torch.Tensor  # [B, L, D] draft means m_p,i (the draft's mean of step i, at parent Y_{i-1})
    noise: torch.Tensor  # [B, L, D] standard-normal ξ_i used to draft Y_i
    std: torch.Tensor  # [B, L] per-step std σ_i (> 0), shared by draft and target
    meta: dict = field(default_factory=dict)  # caller's bookkeeping (timesteps, ...); never read by the rule

    def __post_init__(self):
        _expect_shape("GaussianProposal.states", self.states, (None, None, None), "[B, L, D]")
        b, l, d = self.states.shape
        if l < 1:
            raise ValueError("GaussianProposal.states: expected at least one drafted step (L >= 1), got L = 0")
        _expect_shape("GaussianProposal.means", self.means, (b, l, d), f"[B, L, D] = {[b, l, d]}")
        _expect_shape("GaussianProposal.noise", self.noise, (b, l, d), f"[B, L, D] = {[b, l, d]}")
        _expect_shape("GaussianProposal.std", self.std, (b, l), f"[B, L] = {[b, l]}")

    @property
    def num_steps(self) -> int:
        return self.states.shape[1]



@dataclass
class GaussianScores(Rows):
    """The target's Gaussian means for the same L steps, evaluated at the drafted parents in one batched call."""

    means: torch.Tensor  # [B, L, D] target means m_q,i = target mean of step i at parent Y_{i-1}

    def __post_init__(self):
        _expect_shape("GaussianScores.means", self.means, (None, None, None), "[B, L, D]")



class BatchedDensity:
    """A batch of densities over R^D, one per (row, position): batch shape [B, K].

    Every parameter tensor is batch-first ``[B, K, ...]``, which is what :meth:`rows`, :meth:`positions` and
    :meth:`take` rely on. Subclasses are dataclasses implementing ``log_prob`` and ``sample`` and ``dim``.
    """

    def log_prob(self, x: torch.Tensor) -> torch.Tensor:
        """x [..., B, K, D] -> log density [..., B, K] in float64."""
        raise NotImplementedError  # abstract

    def sample(self, generator: torch.Generator | None = None, sample_shape: tuple[int, ...] = ()) -> torch.Tensor:
        """-> draws [*sample_shape, B, K, D] in the parameters' dtype (drawn in float64)."""
        raise NotImplementedError  # abstract

    @property
    def dim(self) -> int:
        raise NotImplementedError  # abstract

    @property
    def batch_shape(self) -> tuple[int, int]:
        first = getattr(self, fields(self)[0].name)
        return tuple(first.shape[:2])

    def validate(self, what: str) -> None:
        """Value checks (positive scales, finite parameters); may synchronise with the device."""

    def _map(self, fn):
        return replace(self, **{f.name: fn(getattr(self, f.name)) for f in fields(self)})

    def rows(self, index) -> BatchedDensity:
        """Rows ``index`` (slice or index tensor) -> batch [R, K]."""
        if isinstance(index, int):
            raise TypeError("rows: pass a slice or an index tensor (a bare int would drop the batch dimension)")
        return self._map(lambda t: t[index])

    def positions(self, index: slice) -> BatchedDensity:
        """Positions ``index`` (a slice) of every row -> batch [B, K']."""
        return self._map(lambda t: t[:, index])

    def take(self, pos: torch.Tensor) -> BatchedDensity:
        """One position per row: pos [B] int64 -> batch [B, 1]."""

        def gather(t: torch.Tensor) -> torch.Tensor:
            index = pos.view(-1, 1, *([1] * (t.dim() - 2))).expand(t.shape[0], 1, *t.shape[2:])
            return t.gather(1, index)

        return self._map(gather)


@dataclass
class GaussianDensity(BatchedDensity):
    """N(mean, diag(std²)) per (row, position)."""

    mean: torch.Tensor  # [B, K, D]
    std: torch.Tensor | float  # [B, K] (isotropic), [B, K, 1] or [B, K, D] (diagonal), or a float; kept as [B, K, 1|D]

    def __post_init__(self):
        _expect_shape("GaussianDensity.mean", self.mean, (None, None, None), "[B, K, D]")
        b, k, d = self.mean.shape
        if isinstance(self.std, (int, float)) and not isinstance(self.std, bool):
            self.std = torch.full((b, k, 1), float(self.std), dtype=self.mean.dtype, device=self.mean.device)
        elif isinstance(self.std, torch.Tensor) and self.std.dim() == 2:
            self.std = self.std[..., None]
        if not isinstance(self.std, torch.Tensor) or self.std.shape not in ((b, k, 1), (b, k, d)):
            got = tuple(self.std.shape) if isinstance(self.std, torch.Tensor) else type(self.std).__name__
            raise ValueError(f"GaussianDensity.std: expected a float or shape [B, K], [B, K, 1] or [B, K, D] "
                             f"with [B, K, D] = {[b, k, d]}, got {got}")  # fmt: skip

    @property
    def dim(self) -> int:
        return self.mean.shape[-1]

    def validate(self, what: str) -> None:
        _check_positive(f"{what}.std", self.std)

    def log_prob(self, x: torch.Tensor) -> torch.Tensor:
        std = self.std.to(F64)  # [B, K, 1|D]
        z = (x.to(F64) - self.mean.to(F64)) / std  # [..., B, K, D]
        log_norm = std.log().sum(-1) * (self.dim if std.shape[-1] == 1 else 1)  # [B, K]
        return -0.5 * torch.linalg.vecdot(z, z) - log_norm - 0.5 * self.dim * LOG_2PI

    def sample(self, generator=None, sample_shape=()) -> torch.Tensor:
        z = torch.randn((*sample_shape, *self.mean.shape), dtype=F64, device=self.mean.device, generator=generator)
        return (self.mean.to(F64) + self.std.to(F64) * z).to(self.mean.dtype)


@dataclass
class GaussianMixtureDensity(BatchedDensity):
    """Σ_m w_m N(μ_m, s_m² I) per (row, position); weights need not be normalised (they are on use)."""

    weights: torch.Tensor  # [B, K, M] non-negative mixture weights w_m
    means: torch.Tensor  # [B, K, M, D] component means μ_m
    stds: torch.Tensor  # [B, K, M] isotropic component stds s_m > 0

    def __post_init__(self):
        _expect_shape("GaussianMixtureDensity.means", self.means, (None, None, None, None), "[B, K, M, D]")
        b, k, m, _ = self.means.shape
        _expect_shape("GaussianMixtureDensity.weights", self.weights, (b, k, m), f"[B, K, M] = {[b, k, m]}")
        _expect_shape("GaussianMixtureDensity.stds", self.stds, (b, k, m), f"[B, K, M] = {[b, k, m]}")

    @property
    def dim(self) -> int:
        return self.means.shape[-1]

    def validate(self, what: str) -> None:
        _check_positive(f"{what}.stds", self.stds)
        w = self.weights.to(F64)
        if not bool(((w >= 0) & torch.isfinite(w)).all()) or not bool((w.sum(-1) > 0).all()):
            raise ValueError(f"{what}.weights: expected finite non-negative weights with a positive sum per "
                             f"(row, position), got min {w.min().item():.3g}, min sum {w.sum(-1).min().item():.3g}")  # fmt: skip

    def log_prob(self, x: torch.Tensor) -> torch.Tensor:
        s = self.stds.to(F64)  # [B, K, M]
        diff = x.to(F64)[..., None, :] - self.means.to(F64)  # [..., B, K, M, D]
        log_comp = -0.5 * torch.linalg.vecdot(diff, diff) / (s * s) - self.dim * (s.log() + 0.5 * LOG_2PI)  # [..., B, K, M]
        w = self.weights.to(F64)
        log_w = w.log() - w.sum(-1, keepdim=True).log()  # [B, K, M]
        return torch.logsumexp(log_w + log_comp, dim=-1)  # [..., B, K]

    def sample(self, generator=None, sample_shape=()) -> torch.Tensor:
        b, k, m, d = self.means.shape
        n = math.prod(sample_shape)
        w = self.weights.to(F64).reshape(b * k, m)
        comp = torch.multinomial(w, n, replacement=True, generator=generator).view(b, k, n)  # [B, K, N]
        mu = self.means.to(F64).gather(2, comp[..., None].expand(b, k, n, d))  # [B, K, N, D]
        s = self.stds.to(F64).gather(2, comp)  # [B, K, N]
        z = torch.randn((b, k, n, d), dtype=F64, device=self.means.device, generator=generator)
        x = (mu + s[..., None] * z).permute(2, 0, 1, 3)  # [N, B, K, D]
        return x.reshape(*sample_shape, b, k, d).to(self.means.dtype)


@dataclass
class DensityProposal(Rows):
    """K continuous drafts with the draft's densities (CSPD-style continuous tokens)."""

    samples: torch.Tensor  # [B, K, D] drafts x_i ~ q_i (K >= 1)
    density: BatchedDensity  # q: batch [B, K], the density each draft was drawn from
    meta: dict = field(default_factory=dict)

    def __post_init__(self):
        _expect_shape("DensityProposal.samples", self.samples, (None, None, None), "[B, K, D]")
        b, k, d = self.samples.shape
        if k < 1:
            raise ValueError("DensityProposal.samples: expected at least one draft (K >= 1), got K = 0")
        if not isinstance(self.density, BatchedDensity):
            raise TypeError(f"DensityProposal.density: expected a BatchedDensity, got {type(self.density).__name__}")
        if self.density.batch_shape != (b, k) or self.density.dim != d:
            raise ValueError(f"DensityProposal.density: expected batch [B, K] = {[b, k]} over D = {d}, got batch "
                             f"{list(self.density.batch_shape)} over D = {self.density.dim}")  # fmt: skip



@dataclass
class DensityScores(Rows):
    """The target's densities at the draft positions: p_i for draft i (given drafts < i); with K+1 positions the
    last one is the bonus position, sampled when every draft is accepted."""

    density: BatchedDensity  # p: batch [B, K] or [B, K+1]

    def __post_init__(self):
        if not isinstance(self.density, BatchedDensity):
            raise TypeError(f"DensityScores.density: expected a BatchedDensity, got {type(self.density).__name__}")



@dataclass
class ForecastProposal(Rows):
    """L forecast block outputs (e.g. a Taylor expansion over cached finite differences) and the sampling progress."""

    forecast: torch.Tensor  # [B, L, *F] forecast f_i of the checked block's output at step i
    progress: torch.Tensor  # [B] or [B, L] sampling progress in [0, 1] (0 = first step, 1 = last)
    meta: dict = field(default_factory=dict)

    def __post_init__(self):
        if not isinstance(self.forecast, torch.Tensor) or self.forecast.dim() < 2 or self.forecast.shape[1] < 1:
            got = tuple(self.forecast.shape) if isinstance(self.forecast, torch.Tensor) else type(self.forecast).__name__
            raise ValueError(f"ForecastProposal.forecast: expected shape [B, L, *F] with L >= 1, got {got}")
        b, l = self.forecast.shape[:2]
        if not isinstance(self.progress, torch.Tensor) or tuple(self.progress.shape) not in ((b,), (b, l)):
            got = tuple(self.progress.shape) if isinstance(self.progress, torch.Tensor) else type(self.progress).__name__
            raise ValueError(f"ForecastProposal.progress: expected shape [B] = {[b]} or [B, L] = {[b, l]}, got {got}")



@dataclass
class ForecastScores(Rows):
    """The actually computed check tensors (e.g. the last block run on the forecast input)."""

    check: torch.Tensor  # [B, L, *F] computed c_i, same shape as the forecast



# ----------------------------------------------------------------------------------------------------------------
# Checks shared by the rules.
# ----------------------------------------------------------------------------------------------------------------


def _check_positive(what: str, t: torch.Tensor, hint: str = ""):
    """Every entry finite and > 0 (synchronises with the device once)."""
    if not bool((torch.isfinite(t) & (t > 0)).all()):
        bad = t[~(torch.isfinite(t) & (t > 0))].flatten()[0].item()
        raise ValueError(f"{what}: expected finite values > 0, got {bad!r}{hint}")


def _compute_dtype(*tensors: torch.Tensor) -> torch.dtype:
    """At least float32: float64 when any input is float64 (reductions then accumulate in that dtype)."""
    dtype = torch.float32
    for t in tensors:
        dtype = torch.promote_types(dtype, t.dtype)
    return dtype


def _check_number(rule: str, name: str, value, low: float, high: float, low_open: bool = False, high_open: bool = False):
    """A finite real parameter in [low, high] (open ends where asked); names the argument in the error."""
    interval = f"{'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{rule}: {name} must be a real number in {interval}, got {value!r} ({type(value).__name__})")
    ok = math.isfinite(value) and (value > low if low_open else value >= low) and (value < high if high_open else value <= high)
    if not ok:
        raise ValueError(f"{rule}: {name} must be a finite number in {interval}, got {value!r}")


def _check_int(rule: str, name: str, value, low: int):
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{rule}: {name} must be an int >= {low}, got {value!r} ({type(value).__name__})")
    if value < low:
        raise ValueError(f"{rule}: {name} must be an int >= {low}, got {value!r}")


def _check_types(rule: str, proposal, scores, proposal_type: type, scores_type: type) -> None:
    if not isinstance(proposal, proposal_type) or not isinstance(scores, scores_type):
        raise TypeError(f"{rule}: expected ({proposal_type.__name__}, {scores_type.__name__}), got "
                        f"({type(proposal).__name__}, {type(scores).__name__})")  # fmt: skip


def _check_gaussian_pair(proposal: GaussianProposal, scores: GaussianScores):
    _check_types("reflection-coupling", proposal, scores, GaussianProposal, GaussianScores)
    if scores.means.shape != proposal.means.shape:
        raise ValueError(f"GaussianScores.means: expected the proposal's shape [B, L, D] = {list(proposal.means.shape)}, "
                         f"got {list(scores.means.shape)}")  # fmt: skip


def _check_density_pair(proposal: DensityProposal, scores: DensityScores):
    _check_types("density-ratio", proposal, scores, DensityProposal, DensityScores)
    b, k, d = proposal.samples.shape
    pb, pk = scores.density.batch_shape
    if pb != b or pk not in (k, k + 1) or scores.density.dim != d:
        raise ValueError(f"DensityScores.density: expected batch [B, K] = {[b, k]} or [B, K+1] = {[b, k + 1]} over "
                         f"D = {d}, got batch {[pb, pk]} over D = {scores.density.dim}")  # fmt: skip


def _check_forecast_pair(proposal: ForecastProposal, scores: ForecastScores):
    _check_types("forecast-gating", proposal, scores, ForecastProposal, ForecastScores)
    if not isinstance(scores.check, torch.Tensor) or scores.check.shape != proposal.forecast.shape:
        got = list(scores.check.shape) if isinstance(scores.check, torch.Tensor) else type(scores.check).__name__
        raise ValueError(f"ForecastScores.check: expected the forecast's shape [B, L, *F] = "
                         f"{list(proposal.forecast.shape)}, got {got}")  # fmt: skip


class ContinuousVerifier(Verifier):
    """A verifier over continuous states: ``verify = core(proposal, scores, **draw(proposal, scores, generator))``.

    Subclasses implement ``check`` (input validation, may synchronise), ``draw`` (all randomness, batch-first
    tensors keyed by the core's argument names), ``core`` (vectorised) and ``reference`` (per-row loop).
    """

    needs_probs = False
    supports_trees = False  # chains of continuous states only
    domain = "continuous"

    def check(self, proposal, scores) -> None:
        raise NotImplementedError  # abstract

    def draw(self, proposal, scores, generator: torch.Generator | None = None) -> dict[str, torch.Tensor]:
        return {}

    def core(self, proposal, scores, **randomness) -> ContinuousVerdict:
        raise NotImplementedError  # abstract

    def reference(self, proposal, scores, **randomness) -> ContinuousVerdict:
        raise NotImplementedError  # abstract

    def verify(self, proposal, scores, generator: torch.Generator | None = None) -> ContinuousVerdict:
        self.check(proposal, scores)
        return self.core(proposal, scores, **self.draw(proposal, scores, generator))


def core_vs_reference(name: str, make_inputs, batch: int = 8, k: int = 8, dim: int = 16384, seed: int = 0) -> list:
    """``bench_cases`` of a continuous rule: its vectorised core and its reference loop on identical inputs
    ``make_inputs(batch, k, dim, generator) -> (proposal, scores)`` and randomness (``mmspec bench verifiers``)."""
    from ..base import VERIFIERS, BenchCase

    g = torch.Generator().manual_seed(seed)
    verifier = VERIFIERS.get(name)()
    proposal, scores = make_inputs(batch, k, dim, g)
    randomness = verifier.draw(proposal, scores, g)
    return [BenchCase(name, lambda: verifier.core(proposal, scores, **randomness),
                      lambda: verifier.reference(proposal, scores, **randomness))]  # fmt: skip
