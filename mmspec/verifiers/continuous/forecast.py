"""SpeCa-style forecast gating (lossy, deterministic): METHODS.md §5."""

from __future__ import annotations

import functools
import math

import torch

from ..base import VERIFIERS, first_rejection
from .base import (
    core_vs_reference, F64, ContinuousVerdict, ForecastProposal, ForecastScores, ContinuousVerifier, _compute_dtype, _check_number, _check_forecast_pair,
)  # fmt: skip


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


def _bench_forecast(batch, k, dim, g):
    check = torch.randn(batch, k, dim, generator=g)
    scale = torch.rand(batch, 1, 1, generator=g) * 0.2 * torch.arange(1, k + 1)[:, None] / k  # error grows with step
    forecast = check + scale * torch.randn(batch, k, dim, generator=g)
    return ForecastProposal(forecast, torch.rand(batch, generator=g)), ForecastScores(check)


bench_cases = functools.partial(core_vs_reference, "forecast-gating", _bench_forecast)  # (batch, k, dim, seed) -> [BenchCase]
