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

The token contracts live in :mod:`mmspec.types`; the continuous ones (``GaussianProposal``/``GaussianScores``,
``DensityProposal``/``DensityScores`` with ``GaussianDensity``/``GaussianMixtureDensity``,
``ForecastProposal``/``ForecastScores`` and the shared ``ContinuousVerdict``) are defined here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace

import torch

from .base import VERIFIERS, BenchCase, Verifier, first_rejection

F64 = torch.float64
LOG_2PI = math.log(2 * math.pi)


# ----------------------------------------------------------------------------------------------------------------
# Data contracts. B = batch rows, L / K = drafted steps, D = state dimension.
# ----------------------------------------------------------------------------------------------------------------


def _select_rows(obj, index):
    """Rows ``index`` (a slice or an index tensor, never a bare int) of every batch-first tensor in a contract."""
    if isinstance(index, int):
        raise TypeError("rows: pass a slice or an index tensor (a bare int would drop the batch dimension)")
    changes = {}
    for f in fields(obj):
        value = getattr(obj, f.name)
        if isinstance(value, torch.Tensor):
            changes[f.name] = value[index]
        elif isinstance(value, BatchedDensity):
            changes[f.name] = value.rows(index)
    return replace(obj, **changes)


def _expect_shape(what: str, t: torch.Tensor, shape: tuple, meaning: str):
    """Shape check with a clear error; ``None`` in ``shape`` matches any size."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{what}: expected a tensor {meaning}, got {type(t).__name__}")
    if t.dim() != len(shape) or any(s is not None and s != n for s, n in zip(shape, t.shape)):
        raise ValueError(f"{what}: expected shape {meaning}, got {tuple(t.shape)}")


@dataclass
class ContinuousVerdict:
    """A continuous verifier's decision, per row.

    The committed trajectory of a row is ``drafts[:num_accepted]`` followed by ``next_states`` when
    ``extras["new_state"]`` is True (a residual/reflected sample at the first rejection, or a bonus sample);
    otherwise ``next_states`` is the last accepted draft itself. Either way it is the state to continue from.
    """

    num_accepted: torch.Tensor  # [B] int64, 0..L: accepted draft prefix length
    next_states: torch.Tensor  # [B, *S] (S = state shape, e.g. [D]) in the input dtype: the state to continue from
    extras: dict = field(default_factory=dict)  # rule-specific diagnostics, each documented by its rule


@dataclass
class GaussianProposal:
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

    def rows(self, index) -> GaussianProposal:
        return _select_rows(self, index)


@dataclass
class GaussianScores:
    """The target's Gaussian means for the same L steps, evaluated at the drafted parents in one batched call."""

    means: torch.Tensor  # [B, L, D] target means m_q,i = target mean of step i at parent Y_{i-1}

    def __post_init__(self):
        _expect_shape("GaussianScores.means", self.means, (None, None, None), "[B, L, D]")

    def rows(self, index) -> GaussianScores:
        return _select_rows(self, index)


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
class DensityProposal:
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

    def rows(self, index) -> DensityProposal:
        return _select_rows(self, index)


@dataclass
class DensityScores:
    """The target's densities at the draft positions: p_i for draft i (given drafts < i); with K+1 positions the
    last one is the bonus position, sampled when every draft is accepted."""

    density: BatchedDensity  # p: batch [B, K] or [B, K+1]

    def __post_init__(self):
        if not isinstance(self.density, BatchedDensity):
            raise TypeError(f"DensityScores.density: expected a BatchedDensity, got {type(self.density).__name__}")

    def rows(self, index) -> DensityScores:
        return _select_rows(self, index)


@dataclass
class ForecastProposal:
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

    def rows(self, index) -> ForecastProposal:
        return _select_rows(self, index)


@dataclass
class ForecastScores:
    """The actually computed check tensors (e.g. the last block run on the forecast input)."""

    check: torch.Tensor  # [B, L, *F] computed c_i, same shape as the forecast

    def rows(self, index) -> ForecastScores:
        return _select_rows(self, index)


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


def _check_gaussian_pair(proposal: GaussianProposal, scores: GaussianScores):
    if not isinstance(proposal, GaussianProposal) or not isinstance(scores, GaussianScores):
        raise TypeError(f"reflection-coupling: expected (GaussianProposal, GaussianScores), got "
                        f"({type(proposal).__name__}, {type(scores).__name__})")  # fmt: skip
    if scores.means.shape != proposal.means.shape:
        raise ValueError(f"GaussianScores.means: expected the proposal's shape [B, L, D] = {list(proposal.means.shape)}, "
                         f"got {list(scores.means.shape)}")  # fmt: skip


def _check_density_pair(proposal: DensityProposal, scores: DensityScores):
    if not isinstance(proposal, DensityProposal) or not isinstance(scores, DensityScores):
        raise TypeError(f"density-ratio: expected (DensityProposal, DensityScores), got "
                        f"({type(proposal).__name__}, {type(scores).__name__})")  # fmt: skip
    b, k, d = proposal.samples.shape
    pb, pk = scores.density.batch_shape
    if pb != b or pk not in (k, k + 1) or scores.density.dim != d:
        raise ValueError(f"DensityScores.density: expected batch [B, K] = {[b, k]} or [B, K+1] = {[b, k + 1]} over "
                         f"D = {d}, got batch {[pb, pk]} over D = {scores.density.dim}")  # fmt: skip


def _check_forecast_pair(proposal: ForecastProposal, scores: ForecastScores):
    if not isinstance(proposal, ForecastProposal) or not isinstance(scores, ForecastScores):
        raise TypeError(f"forecast-gating: expected (ForecastProposal, ForecastScores), got "
                        f"({type(proposal).__name__}, {type(scores).__name__})")  # fmt: skip
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


# ----------------------------------------------------------------------------------------------------------------
# 1. Reflection maximal coupling (RMC) of Gaussian steps.
# ----------------------------------------------------------------------------------------------------------------

DELTA_EPS = 1e-12  # δ at or below which a step is accepted outright (changes the law by TV <= δ/sqrt(2π))


def reflection_coupling(proposal: GaussianProposal, scores: GaussianScores, uniforms: torch.Tensor,
                        eps: float = DELTA_EPS) -> ContinuousVerdict:  # fmt: skip
    """Reflection maximal coupling of N(m_p, σ²I) (draft) and N(m_q, σ²I) (target), walked along the L steps.

    Per step: Δ = (m_q − m_p)/σ, δ = ||Δ||, e = Δ/δ, draft Y = m_p + σξ. Accept Y iff
    ``log(1 − u) <= δ(e·ξ) − δ²/2`` (probability min(1, N(Y; m_q)/N(Y; m_p))); at the first rejection return
    the reflection X = m_q + σ(ξ − 2(e·ξ)e) and stop. X ~ N(m_q, σ²I) exactly and P(accept) = 2Φ(−δ/2).
    δ <= eps accepts (no 0/0). Δ, δ² and Δ·ξ are computed in float32 (float64 when an input is float64; the
    rounding moves the log ratio by ~1e-7·δ), the test and the reflected state in float64.

    uniforms [B, L] float64 in [0, 1). Returns ``ContinuousVerdict`` with extras ``delta`` [B, L] (δ per step),
    ``accept_prob`` [B, L] and ``new_state`` [B] bool (True: next_states is the reflected X).
    """
    _check_gaussian_pair(proposal, scores)
    y = proposal.states  # [B, L, D]
    b, l, _ = y.shape
    _expect_shape("uniforms", uniforms, (b, l), f"[B, L] = {[b, l]}")
    ct = _compute_dtype(y, proposal.means, proposal.noise, scores.means)  # float32, or float64 for float64 inputs
    xi = proposal.noise.to(ct)  # [B, L, D]
    sigma = proposal.std.to(F64)  # [B, L]
    m_q = scores.means.to(ct)  # [B, L, D]
    big_delta = (m_q - proposal.means.to(ct)) / sigma.to(ct)[..., None]  # Δ [B, L, D]
    delta2 = torch.linalg.vecdot(big_delta, big_delta).to(F64)  # δ² [B, L]
    log_ratio = torch.linalg.vecdot(big_delta, xi).to(F64) - 0.5 * delta2  # δ(e·ξ) − δ²/2 [B, L]
    small = delta2 <= eps * eps  # [B, L]
    accept = small | (torch.log1p(-uniforms.to(F64)) <= log_ratio)  # [B, L]
    n = first_rejection(accept)  # [B]
    rejected = n < l  # [B]

    rows = torch.arange(b, device=y.device)
    j = n.clamp_max(l - 1)  # [B] step of the first rejection (or the last step)
    delta_j = big_delta[rows, j].to(F64)  # Δ at that step [B, D]
    e = delta_j / torch.linalg.vector_norm(delta_j, dim=-1, keepdim=True).clamp_min(torch.finfo(F64).tiny)  # [B, D]
    xi_j = xi[rows, j].to(F64)  # [B, D]
    e_xi = (e * xi_j).sum(-1, keepdim=True)  # [B, 1]
    x = m_q[rows, j].to(F64) + sigma[rows, j, None] * (xi_j - 2 * e_xi * e)  # reflected X [B, D]
    next_states = torch.where(rejected[:, None], x, y[:, -1].to(F64)).to(y.dtype)  # [B, D]
    accept_prob = torch.where(small, torch.ones_like(log_ratio), log_ratio.clamp_max(0).exp())  # [B, L]
    return ContinuousVerdict(n, next_states, {"delta": delta2.sqrt(), "accept_prob": accept_prob, "new_state": rejected})


def reference_reflection_coupling(proposal: GaussianProposal, scores: GaussianScores, uniforms: torch.Tensor,
                                  eps: float = DELTA_EPS) -> ContinuousVerdict:  # fmt: skip
    """Per-row, per-step loop of :func:`reflection_coupling` (same randomness, same result)."""
    _check_gaussian_pair(proposal, scores)
    b, l, _ = proposal.states.shape
    counts, states = [], []
    for row in range(b):
        n, state = l, proposal.states[row, l - 1].to(F64)
        for i in range(l):
            sigma = float(proposal.std[row, i])
            xi = proposal.noise[row, i].to(F64)
            m_q = scores.means[row, i].to(F64)
            big_delta = (m_q - proposal.means[row, i].to(F64)) / sigma
            delta = float(torch.linalg.vector_norm(big_delta))
            if delta <= eps:
                continue
            e = big_delta / delta
            e_xi = float(e @ xi)
            if math.log1p(-float(uniforms[row, i])) <= delta * e_xi - delta * delta / 2:
                continue
            n, state = i, m_q + sigma * (xi - 2 * e_xi * e)
            break
        counts.append(n)
        states.append(state)
    device = proposal.states.device
    num_accepted = torch.tensor(counts, dtype=torch.int64, device=device)
    return ContinuousVerdict(num_accepted, torch.stack(states).to(proposal.states.dtype), {"new_state": num_accepted < l})


@VERIFIERS.register("reflection-coupling")
class ReflectionCouplingVerifier(ContinuousVerifier):
    """Reflection maximal coupling along a chain of L drafted Gaussian steps (speculative diffusion sampling).

    Parameters: ``eps`` in [0, 1e-3] (default 1e-12): steps with δ = ||m_q − m_p||/σ <= eps are accepted
    outright, which moves that step's law by at most TV = 2Φ(δ/2) − 1 <= eps/sqrt(2π).
    Needs σ > 0 at every step: deterministic samplers (DDIM η = 0, flow Euler) cannot be verified losslessly
    this way and are refused with a clear error.
    """

    lossless = True
    bounds = "exact: every committed state ~ N(m_q, σ²I) given its parent; P(accept step) = 2Φ(−δ/2)"
    paper = "De Bortoli et al. 2025, Accelerated Diffusion Models via Speculative Sampling; Lindvall & Rogers 1986"

    def __init__(self, eps: float = DELTA_EPS):
        _check_number("reflection-coupling", "eps", eps, 0.0, 1e-3)
        self.eps = float(eps)

    def check(self, proposal, scores):
        _check_gaussian_pair(proposal, scores)
        _check_positive("GaussianProposal.std", proposal.std,
                        " (reflection coupling needs σ > 0: deterministic samplers such as DDIM η=0 or flow Euler "
                        "cannot be verified losslessly this way; METHODS.md §5)")  # fmt: skip

    def draw(self, proposal, scores, generator=None):
        b, l, _ = proposal.states.shape
        return {"uniforms": torch.rand((b, l), dtype=F64, device=proposal.states.device, generator=generator)}

    def core(self, proposal, scores, uniforms):
        return reflection_coupling(proposal, scores, uniforms, self.eps)

    def reference(self, proposal, scores, uniforms):
        return reference_reflection_coupling(proposal, scores, uniforms, self.eps)


# ----------------------------------------------------------------------------------------------------------------
# 2. Density-ratio acceptance for continuous tokens (CSPD).
# ----------------------------------------------------------------------------------------------------------------


@dataclass
class _Stops:
    """Where each row's chain stops and the densities there (shared by the core and the residual sampler)."""

    n: torch.Tensor  # [B] int64 accepted drafts
    need: torch.Tensor  # [B] bool: a new sample is drawn at position n (a rejection, or the bonus position)
    bonus: torch.Tensor  # [B] bool: n == K and the target has a bonus position (q = 0 there)
    log_ratio: torch.Tensor  # [B, K] float64 log p(x) − log q(x)
    p_stop: BatchedDensity  # batch [B, 1]: p at position n
    q_stop: BatchedDensity  # batch [B, 1]: q at position min(n, K−1) (ignored where bonus)

    def rows(self, index: torch.Tensor) -> _Stops:
        return _Stops(self.n[index], self.need[index], self.bonus[index], self.log_ratio[index],
                      self.p_stop.rows(index), self.q_stop.rows(index))  # fmt: skip


def _draft_stops(proposal: DensityProposal, scores: DensityScores, uniforms: torch.Tensor) -> _Stops:
    x = proposal.samples  # [B, K, D]
    b, k, _ = x.shape
    _expect_shape("uniforms", uniforms, (b, k), f"[B, K] = {[b, k]}")
    p, q = scores.density, proposal.density
    has_bonus = p.batch_shape[1] == k + 1
    log_ratio = p.positions(slice(0, k)).log_prob(x) - q.log_prob(x)  # [B, K]
    n = first_rejection(torch.log1p(-uniforms.to(F64)) <= log_ratio)  # [B]
    bonus = (n == k) & has_bonus  # [B]
    need = (n < k) | bonus  # [B]
    return _Stops(n, need, bonus, log_ratio, p.take(n.clamp_max(p.batch_shape[1] - 1)), q.take(n.clamp_max(k - 1)))


def _residual_accept(stops: _Stops, candidates: torch.Tensor, candidate_uniforms: torch.Tensor) -> torch.Tensor:
    """Rejection sampling of norm(max(0, p − q)) from p: candidate y ~ p is kept iff u < max(0, 1 − q(y)/p(y)).

    candidates [B, N, D] drawn from p at each row's stop position, candidate_uniforms [B, N] -> keep [B, N] bool.
    At the bonus position q = 0, so every candidate is kept (the first one is a plain sample of p_{K+1}).
    """
    points = candidates.transpose(0, 1)[:, :, None]  # [N, B, 1, D]
    log_p = stops.p_stop.log_prob(points)[..., 0].T  # [B, N]
    log_q = stops.q_stop.log_prob(points)[..., 0].T.masked_fill(stops.bonus[:, None], -math.inf)  # [B, N]
    keep_prob = (-torch.expm1(log_q - log_p)).clamp_min(0)  # max(0, 1 − q/p) [B, N]
    return candidate_uniforms.to(F64) < keep_prob


def density_ratio(proposal: DensityProposal, scores: DensityScores, uniforms: torch.Tensor, candidates: torch.Tensor,
                  candidate_uniforms: torch.Tensor) -> ContinuousVerdict:  # fmt: skip
    """CSPD density-ratio acceptance along K continuous drafts, with the residual sampled by rejection from p.

    Accept x_i ~ q_i iff ``log(1 − u_i) <= log p_i(x_i) − log q_i(x_i)`` (probability min(1, p/q)); stop at the
    first rejection n and replace x_n by a sample of norm(max(0, p_n − q_n)): the first candidate y_j ~ p_n with
    ``v_j < max(0, 1 − q_n(y_j)/p_n(y_j))``. If all K drafts are accepted and the target has a bonus position
    K+1, next_states is a sample of p_{K+1} (the first candidate); without one it is x_K.

    Pre-drawn randomness: uniforms [B, K] float64; candidates [B, N, D] (N >= 1) drawn from p at each row's stop
    position (as :meth:`DensityRatioVerifier.draw` does; entries of rows that need none are ignored, and a
    candidate uniform of 1.0 marks padding that is never kept); candidate_uniforms [B, N] float64. If no
    candidate passes, the last one is returned unconditionally (an
    unconditioned sample of p: the documented fallback) and the row is flagged in ``residual_exhausted``.

    extras: ``accept_prob`` [B, K] min(1, p/q) per draft, ``new_state`` [B] bool (next_states is a residual or bonus
    sample), ``residual_exhausted`` [B] bool, ``residual_draws`` [B] int64 candidates consumed (0 if none needed).
    """
    _check_density_pair(proposal, scores)
    x = proposal.samples  # [B, K, D]
    b, k, _ = x.shape
    _expect_shape("candidates", candidates, (b, None, x.shape[2]), f"[B, N, D] = {[b, 'N', x.shape[2]]}")
    n_cand = candidates.shape[1]
    if n_cand < 1:
        raise ValueError("candidates: expected at least one residual candidate per row (N >= 1), got N = 0")
    _expect_shape("candidate_uniforms", candidate_uniforms, (b, n_cand), f"[B, N] = {[b, n_cand]}")
    stops = _draft_stops(proposal, scores, uniforms)
    keep = _residual_accept(stops, candidates, candidate_uniforms)  # [B, N]
    first = first_rejection(~keep)  # [B] index of the first kept candidate (N if none)
    exhausted = stops.need & (first == n_cand)  # [B]
    index = first.clamp_max(n_cand - 1)  # [B]
    rows = torch.arange(b, device=x.device)
    residual = candidates[rows, index].to(x.dtype)  # [B, D]
    next_states = torch.where(stops.need[:, None], residual, x[:, -1])  # [B, D]
    extras = {
        "accept_prob": stops.log_ratio.clamp_max(0).exp(),
        "new_state": stops.need,
        "residual_exhausted": exhausted,
        "residual_draws": torch.where(stops.need, index + 1, torch.zeros_like(index)),
    }
    return ContinuousVerdict(stops.n, next_states, extras)


def _at(density: BatchedDensity, row: int, pos: int) -> BatchedDensity:
    return density.rows(slice(row, row + 1)).positions(slice(pos, pos + 1))


def reference_density_ratio(proposal: DensityProposal, scores: DensityScores, uniforms: torch.Tensor,
                            candidates: torch.Tensor, candidate_uniforms: torch.Tensor) -> ContinuousVerdict:  # fmt: skip
    """Per-row, per-position loop of :func:`density_ratio` (same randomness, same result)."""
    _check_density_pair(proposal, scores)
    x = proposal.samples
    b, k, _ = x.shape
    has_bonus = scores.density.batch_shape[1] == k + 1
    counts, states, exhausted = [], [], []
    for row in range(b):
        n = k
        for i in range(k):
            xi = x[row : row + 1, i : i + 1]  # [1, 1, D]
            log_p = float(_at(scores.density, row, i).log_prob(xi))
            log_q = float(_at(proposal.density, row, i).log_prob(xi))
            if not math.log1p(-float(uniforms[row, i])) <= log_p - log_q:
                n = i
                break
        counts.append(n)
        if n == k and not has_bonus:
            states.append(x[row, k - 1])
            exhausted.append(False)
            continue
        p_n = _at(scores.density, row, n)
        q_n = _at(proposal.density, row, n) if n < k else None
        chosen = None
        for j in range(candidates.shape[1]):
            y = candidates[row : row + 1, j : j + 1]  # [1, 1, D]
            log_p = float(p_n.log_prob(y))
            keep_prob = 1.0 if q_n is None else max(0.0, -math.expm1(float(q_n.log_prob(y)) - log_p))
            if float(candidate_uniforms[row, j]) < keep_prob:
                chosen = j
                break
        exhausted.append(chosen is None)
        states.append(candidates[row, candidates.shape[1] - 1 if chosen is None else chosen].to(x.dtype))
    device = x.device
    num_accepted = torch.tensor(counts, dtype=torch.int64, device=device)
    extras = {"residual_exhausted": torch.tensor(exhausted, dtype=torch.bool, device=device)}
    return ContinuousVerdict(num_accepted, torch.stack(states), extras)


@VERIFIERS.register("density-ratio")
class DensityRatioVerifier(ContinuousVerifier):
    """CSPD density-ratio acceptance of K continuous drafts with a rejection-sampled residual.

    Parameters: ``max_rounds`` (default 256) rounds of ``candidates_per_round`` (default 4) candidates from p
    for the residual, N = their product in all; rows still without one after N draws get an unconditioned p
    sample (flagged in ``extras["residual_exhausted"]``), which moves the output law by at most TV <= 1/(e(N−1))
    per call (the worst case over p, q; typically far less), or, with ``strict=True``, raise RuntimeError.
    The expected number of candidates for a row that needs one is 1/TV(p, q).
    """

    lossless = True
    bounds = "exact (output law = p) unless the residual sampler exhausts its N draws: flagged p fallback, TV <= 1/(e(N-1))"
    paper = "CSPD: Wang et al. 2024, Continuous Speculative Decoding for Autoregressive Image Generation"

    def __init__(self, max_rounds: int = 256, candidates_per_round: int = 4, strict: bool = False):
        _check_int("density-ratio", "max_rounds", max_rounds, 1)
        _check_int("density-ratio", "candidates_per_round", candidates_per_round, 1)
        if not isinstance(strict, bool):
            raise TypeError(f"density-ratio: strict must be a bool, got {strict!r} ({type(strict).__name__})")
        self.max_rounds, self.candidates_per_round, self.strict = max_rounds, candidates_per_round, strict

    def check(self, proposal, scores):
        _check_density_pair(proposal, scores)
        proposal.density.validate("DensityProposal.density")
        scores.density.validate("DensityScores.density")

    def draw(self, proposal, scores, generator=None):
        """Draft uniforms, then rounds of ``candidates_per_round`` residual candidates from p at the stop position
        of every row that still needs one, until each has a kept candidate or ``max_rounds`` is reached (only
        this loop runs in Python). Rows that need no more are padded with zeros and uniforms of 1.0 (never kept),
        so the core sees [B, N] with N = rounds used × candidates_per_round."""
        x = proposal.samples
        b, k, d = x.shape
        c = self.candidates_per_round
        uniforms = torch.rand((b, k), dtype=F64, device=x.device, generator=generator)
        stops = _draft_stops(proposal, scores, uniforms)
        active = stops.need.clone()  # [B] rows still without a kept candidate
        candidates, candidate_uniforms = [], []
        for _ in range(self.max_rounds):
            cand = torch.zeros((b, c, d), dtype=x.dtype, device=x.device)  # [B, C, D]
            cand_u = torch.ones((b, c), dtype=F64, device=x.device)  # [B, C]
            index = active.nonzero().flatten()  # [R]
            if index.numel():
                sub = stops.rows(index)
                draws = sub.p_stop.sample(generator, (c,))[:, :, 0].transpose(0, 1).to(x.dtype)  # [R, C, D]
                draws_u = torch.rand((index.numel(), c), dtype=F64, device=x.device, generator=generator)
                cand[index], cand_u[index] = draws, draws_u
                active[index[_residual_accept(sub, draws, draws_u).any(1)]] = False
            candidates.append(cand)
            candidate_uniforms.append(cand_u)
            if not bool(active.any()):
                break
        return {"uniforms": uniforms, "candidates": torch.cat(candidates, 1),
                "candidate_uniforms": torch.cat(candidate_uniforms, 1)}  # fmt: skip

    def core(self, proposal, scores, uniforms, candidates, candidate_uniforms):
        verdict = density_ratio(proposal, scores, uniforms, candidates, candidate_uniforms)
        if self.strict and bool(verdict.extras["residual_exhausted"].any()):
            rows = verdict.extras["residual_exhausted"].nonzero().flatten().tolist()
            raise RuntimeError(f"density-ratio: residual rejection sampling found no sample within "
                               f"{candidates.shape[1]} candidates for rows {rows} (p and q nearly equal there); raise "
                               f"max_rounds/candidates_per_round or use strict=False (flagged fallback to p)")  # fmt: skip
        return verdict

    def reference(self, proposal, scores, uniforms, candidates, candidate_uniforms):
        return reference_density_ratio(proposal, scores, uniforms, candidates, candidate_uniforms)


# ----------------------------------------------------------------------------------------------------------------
# 3. SpeCa-style forecast gating (lossy, deterministic).
# ----------------------------------------------------------------------------------------------------------------


def forecast_threshold(progress: torch.Tensor, tau0: float, beta: float, floor: float) -> torch.Tensor:
    """τ = max(τ0·β^progress, floor): progress [...] in [0, 1] -> τ [...] float64 (non-increasing for β <= 1)."""
    return (tau0 * torch.pow(torch.tensor(beta, dtype=F64, device=progress.device), progress.to(F64))).clamp_min(floor)


def relative_l1_error(forecast: torch.Tensor, check: torch.Tensor) -> torch.Tensor:
    """||f − c||₁ / ||c||₁ over the trailing dims: [B, L, *F] -> [B, L] float64 (0/0 = 0, x/0 = inf)."""
    ct = _compute_dtype(forecast, check)  # at least float32
    if forecast.dim() == 2:  # scalar states: F = ()
        forecast, check = forecast[..., None], check[..., None]
    dims = tuple(range(2, forecast.dim()))
    num = torch.linalg.vector_norm(forecast.to(ct) - check.to(ct), ord=1, dim=dims).to(F64)  # [B, L]
    den = torch.linalg.vector_norm(check.to(ct), ord=1, dim=dims).to(F64)  # [B, L]
    degenerate = torch.where(num > 0, torch.full_like(num, math.inf), torch.zeros_like(num))
    return torch.where(den > 0, num / den.clamp_min(torch.finfo(F64).tiny), degenerate)


def forecast_gating(proposal: ForecastProposal, scores: ForecastScores, tau0: float, beta: float,
                    floor: float) -> ContinuousVerdict:  # fmt: skip
    """Accept forecast step i iff ||f_i − c_i||₁ / ||c_i||₁ < τ_i, τ_i = max(τ0·β^progress_i, floor); accept the
    prefix up to the first failure. No randomness, no distribution guarantee.

    next_states [B, *F]: the last accepted forecast; a row with nothing accepted gets its step-0 check (a
    placeholder: the caller falls back to the full computation at step num_accepted, see ``fallback``).
    extras: ``rel_error`` [B, L] and ``tau`` [B, L] float64, ``fallback`` [B] bool (num_accepted < L),
    ``new_state`` [B] bool (always False: gating never produces a state of its own).
    """
    _check_forecast_pair(proposal, scores)
    f, c = proposal.forecast, scores.check  # [B, L, *F]
    b, l = f.shape[:2]
    progress = proposal.progress if proposal.progress.dim() == 2 else proposal.progress[:, None].expand(b, l)  # [B, L]
    tau = forecast_threshold(progress, tau0, beta, floor)  # [B, L]
    err = relative_l1_error(f, c)  # [B, L]
    n = first_rejection(err < tau)  # [B]
    rows = torch.arange(b, device=f.device)
    last = f[rows, (n - 1).clamp_min(0)]  # [B, *F]
    shape = (b,) + (1,) * (f.dim() - 2)
    next_states = torch.where((n > 0).view(shape), last, c[:, 0].to(f.dtype))
    extras = {"rel_error": err, "tau": tau, "fallback": n < l, "new_state": torch.zeros_like(n, dtype=torch.bool)}
    return ContinuousVerdict(n, next_states, extras)


def reference_forecast_gating(proposal: ForecastProposal, scores: ForecastScores, tau0: float, beta: float,
                              floor: float) -> ContinuousVerdict:  # fmt: skip
    """Per-row, per-step loop of :func:`forecast_gating`."""
    _check_forecast_pair(proposal, scores)
    f, c = proposal.forecast, scores.check
    b, l = f.shape[:2]
    counts, states = [], []
    for row in range(b):
        n = 0
        for i in range(l):
            p = float(proposal.progress[row, i] if proposal.progress.dim() == 2 else proposal.progress[row])
            tau = max(tau0 * beta**p, floor)
            num = float((f[row, i].to(F64) - c[row, i].to(F64)).abs().sum())
            den = float(c[row, i].to(F64).abs().sum())
            err = num / den if den > 0 else (math.inf if num > 0 else 0.0)
            if not err < tau:
                break
            n = i + 1
        counts.append(n)
        states.append(f[row, n - 1] if n > 0 else c[row, 0].to(f.dtype))
    num_accepted = torch.tensor(counts, dtype=torch.int64, device=f.device)
    return ContinuousVerdict(num_accepted, torch.stack(states), {"fallback": num_accepted < l})


@VERIFIERS.register("forecast-gating")
class ForecastGatingVerifier(ContinuousVerifier):
    """SpeCa-style forecast-then-verify gating for feature-caching diffusion samplers (lossy).

    Parameters: ``tau0`` > 0 (default 0.1) threshold at progress 0, ``beta`` in (0, 1] (default 0.5) decay
    factor over the whole run (τ = τ0·β at progress 1), ``floor`` in [0, tau0] (default 0.01) lower bound.
    The defaults are illustrative; calibrate them per model. Works with deterministic samplers; it has no
    distribution guarantee: report sample quality (FID/CLIP/...) against the full computation.
    """

    lossless = False
    bounds = "none on the output law: only per accepted step, relative L1 error of the checked block < τ"
    paper = "SpeCa: Liu et al. 2025, arXiv:2509.11628 (forecast-then-verify feature caching)"

    def __init__(self, tau0: float = 0.1, beta: float = 0.5, floor: float = 0.01):
        _check_number("forecast-gating", "tau0", tau0, 0.0, math.inf, low_open=True, high_open=True)
        _check_number("forecast-gating", "beta", beta, 0.0, 1.0, low_open=True)
        _check_number("forecast-gating", "floor", floor, 0.0, float(tau0))
        self.tau0, self.beta, self.floor = float(tau0), float(beta), float(floor)

    def threshold(self, progress: torch.Tensor) -> torch.Tensor:
        return forecast_threshold(progress, self.tau0, self.beta, self.floor)

    def check(self, proposal, scores):
        _check_forecast_pair(proposal, scores)
        p = proposal.progress
        if not bool((torch.isfinite(p) & (p >= 0) & (p <= 1)).all()):
            raise ValueError(f"ForecastProposal.progress: expected values in [0, 1], got min {p.min().item():.4g}, "
                             f"max {p.max().item():.4g}")  # fmt: skip

    def core(self, proposal, scores):
        return forecast_gating(proposal, scores, self.tau0, self.beta, self.floor)

    def reference(self, proposal, scores):
        return reference_forecast_gating(proposal, scores, self.tau0, self.beta, self.floor)


# ----------------------------------------------------------------------------------------------------------------
# Benchmark cases for `mmspec bench verifiers`.
# ----------------------------------------------------------------------------------------------------------------


def _bench_gaussian(batch, k, dim, g):
    sigma = 0.1 + torch.rand(batch, k, generator=g)  # [B, L]
    m_p = torch.randn(batch, k, dim, generator=g)  # [B, L, D]
    xi = torch.randn(batch, k, dim, generator=g)
    m_q = m_p + sigma[..., None] * torch.randn(batch, k, dim, generator=g) / math.sqrt(dim)  # δ ≈ 1 per step
    return GaussianProposal(m_p + sigma[..., None] * xi, m_p, xi, sigma), GaussianScores(m_q)


def _bench_density(batch, k, dim, g):
    mean = torch.randn(batch, k + 1, dim, generator=g)
    q = GaussianDensity(mean[:, :k], 1.0)
    offsets = torch.randn(batch, k + 1, 2, dim, generator=g) / math.sqrt(dim)  # two components near q's mean
    p = GaussianMixtureDensity(torch.rand(batch, k + 1, 2, generator=g) + 0.1, mean[:, :, None] + offsets,
                               torch.ones(batch, k + 1, 2))  # fmt: skip
    return DensityProposal(q.sample(g), q), DensityScores(p)


def _bench_forecast(batch, k, dim, g):
    check = torch.randn(batch, k, dim, generator=g)
    scale = torch.rand(batch, 1, 1, generator=g) * 0.2 * torch.arange(1, k + 1)[:, None] / k  # error grows with step
    forecast = check + scale * torch.randn(batch, k, dim, generator=g)
    return ForecastProposal(forecast, torch.rand(batch, generator=g)), ForecastScores(check)


def bench_cases(batch: int = 8, k: int = 8, dim: int = 16384, seed: int = 0) -> list[BenchCase]:
    """One case per rule: the vectorised core and its reference loop on identical inputs and randomness."""
    cases = []
    for name, build in (("reflection-coupling", _bench_gaussian), ("density-ratio", _bench_density),
                        ("forecast-gating", _bench_forecast)):  # fmt: skip
        g = torch.Generator().manual_seed(seed)
        verifier = VERIFIERS.get(name)()
        proposal, scores = build(batch, k, dim, g)
        randomness = verifier.draw(proposal, scores, g)
        cases.append(BenchCase(
            name,
            vectorised=lambda v=verifier, p=proposal, s=scores, r=randomness: v.core(p, s, **r),
            reference=lambda v=verifier, p=proposal, s=scores, r=randomness: v.reference(p, s, **r),
        ))  # fmt: skip
    return cases
