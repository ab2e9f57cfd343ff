"""A deliberately broken Jacobi verifier. The Jacobi distribution test must FAIL on it (proving it can fail)."""

from __future__ import annotations

import torch

from mmspec.verifiers.base import VERIFIERS
from mmspec.verifiers.jacobi import JacobiStep, MCSJDVerifier, mc_sjd_rule


def stale_mc_sjd_rule(d, q, p, u, e, fresh=None) -> JacobiStep:
    """MC-SJD that stores the STALE proposal q_{j+1} (what the old draft was drawn from) for each carried slot,
    instead of the current p_j its new sample was drawn from (METHODS.md §4: this breaks losslessness)."""
    step = mc_sjd_rule(d, q, p, u, e, fresh)
    b, k = d.shape
    v = p.shape[-1]
    old_q = torch.nn.functional.one_hot(d, v).to(p.dtype) if q is None else q.to(p.dtype)  # [B, K, V]
    stale = torch.cat([old_q, p[:, k:]], dim=1)  # [B, K+1, V]: old q where there was a draft, p_K at the bonus
    src = torch.arange(1, k + 1, device=d.device)[None, :] + step.num_accepted[:, None]  # [B, K] inherited position
    carried = src <= k  # [B, K]
    stale_src = stale.gather(1, src.clamp_max(k)[..., None].expand(b, k, v))  # [B, K, V]
    probs = torch.where(carried[..., None], stale_src, step.window_probs)  # [B, K, V] fresh slots unchanged
    return step._replace(window_probs=probs)


class StaleProposalMCSJD(MCSJDVerifier):
    """MC-SJD with the stale-q bookkeeping bug."""

    lossless = False
    _rule = staticmethod(stale_mc_sjd_rule)


if "test-broken-mc-sjd-stale-q" not in VERIFIERS:
    VERIFIERS.register("test-broken-mc-sjd-stale-q")(StaleProposalMCSJD)
