"""Reflection maximal coupling (RMC) of Gaussian steps: METHODS.md §5 (lossless speculative sampling of
diffusion steps, De Bortoli et al. 2025)."""

from __future__ import annotations

import functools
import math

import torch

from ..base import VERIFIERS, first_rejection
from .base import (
    core_vs_reference, F64, ContinuousVerdict, GaussianProposal, GaussianScores, ContinuousVerifier, _check_positive, _compute_dtype, _check_number, _check_gaussian_pair, _expect_shape,
)  # fmt: skip


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


def _bench_gaussian(batch, k, dim, g):
    sigma = 0.1 + torch.rand(batch, k, generator=g)  # [B, L]
    m_p = torch.randn(batch, k, dim, generator=g)  # [B, L, D]
    xi = torch.randn(batch, k, dim, generator=g)
    m_q = m_p + sigma[..., None] * torch.randn(batch, k, dim, generator=g) / math.sqrt(dim)  # δ ≈ 1 per step
    return GaussianProposal(m_p + sigma[..., None] * xi, m_p, xi, sigma), GaussianScores(m_q)


bench_cases = functools.partial(core_vs_reference, "reflection-coupling", _bench_gaussian)  # (batch, k, dim, seed) -> [BenchCase]
