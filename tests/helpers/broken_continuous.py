"""Deliberately broken continuous verifiers. The distribution tests must FAIL on these (proving they can fail).

Each keeps the correct accept/reject decisions and only corrupts the state returned at the first rejection, so a
failing test pins the bug on the rejection branch.
"""

from __future__ import annotations

import torch

from mmspec.verifiers.base import VERIFIERS
from mmspec.verifiers.continuous import DensityRatioVerifier, ReflectionCouplingVerifier


def _at_stop(t: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    """t [B, L, ...] at each row's stop step min(n, L-1) -> [B, ...]."""
    return t[torch.arange(t.shape[0], device=t.device), n.clamp_max(t.shape[1] - 1)]


class UnreflectedCoupling(ReflectionCouplingVerifier):
    """RMC that returns m_q + σξ at a rejection instead of the reflection m_q + σ(ξ − 2(e·ξ)e).

    Wrong: ξ is conditioned on the rejection (e·ξ is pushed low), so the returned state is biased along −e."""

    def core(self, proposal, scores, uniforms):
        verdict = super().core(proposal, scores, uniforms)
        n = verdict.num_accepted
        x = _at_stop(scores.means, n) + _at_stop(proposal.std, n)[:, None] * _at_stop(proposal.noise, n)
        rejected = verdict.extras["new_state"][:, None]
        return type(verdict)(n, torch.where(rejected, x.to(verdict.next_states.dtype), verdict.next_states), verdict.extras)


class FreshSampleCoupling(ReflectionCouplingVerifier):
    """RMC that returns a fresh independent N(m_q, σ²I) sample at a rejection.

    Wrong too: the output law is min(p, q) + TV·q instead of q (the accepted part already used up min(p, q))."""

    def draw(self, proposal, scores, generator=None):
        randomness = super().draw(proposal, scores, generator)
        b, _, d = proposal.states.shape
        randomness["fresh"] = torch.randn((b, d), dtype=torch.float64, device=proposal.states.device, generator=generator)
        return randomness

    def core(self, proposal, scores, uniforms, fresh):
        verdict = super().core(proposal, scores, uniforms)
        n = verdict.num_accepted
        x = _at_stop(scores.means, n).double() + _at_stop(proposal.std, n).double()[:, None] * fresh
        rejected = verdict.extras["new_state"][:, None]
        return type(verdict)(n, torch.where(rejected, x.to(verdict.next_states.dtype), verdict.next_states), verdict.extras)


class ResampleFromTarget(DensityRatioVerifier):
    """Density ratio that resamples from p (the first candidate, unconditionally) instead of norm(max(0, p − q))."""

    def core(self, proposal, scores, uniforms, candidates, candidate_uniforms):
        verdict = super().core(proposal, scores, uniforms, candidates, candidate_uniforms)
        rejected = (verdict.num_accepted < proposal.samples.shape[1])[:, None]
        next_states = torch.where(rejected, candidates[:, 0].to(verdict.next_states.dtype), verdict.next_states)
        return type(verdict)(verdict.num_accepted, next_states, verdict.extras)


for _name, _cls in (
    ("test-broken-rmc-unreflected", UnreflectedCoupling),
    ("test-broken-rmc-fresh", FreshSampleCoupling),
    ("test-broken-density-from-p", ResampleFromTarget),
):
    if _name not in VERIFIERS:
        VERIFIERS.register(_name)(_cls)
