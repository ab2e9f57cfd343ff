"""Deliberately broken verifiers. The distribution tests must FAIL on these (proving the tests can fail)."""

from __future__ import annotations

import torch

from mmspec.sampling import sample
from mmspec.types import Verdict
from mmspec.verifiers.base import VERIFIERS, Verifier, first_rejection


class ResidualFromP(Verifier):
    """Speculative sampling that resamples from p (not norm(max(0, p - q))) after a rejection."""

    lossless = False

    def verify(self, proposal, scores, generator=None):
        x, p, q = proposal.tokens, scores.probs, proposal.probs
        b, k = x.shape
        p_x = p[:, :k].gather(-1, x[..., None]).squeeze(-1).double()
        q_x = torch.ones_like(p_x) if q is None else q.gather(-1, x[..., None]).squeeze(-1).double()
        u = torch.rand((b, k), dtype=torch.float64, generator=generator)
        n = first_rejection(u * q_x <= p_x)
        return Verdict(n, sample(p[torch.arange(b), n], generator))


if "test-broken-residual" not in VERIFIERS:
    VERIFIERS.register("test-broken-residual")(ResidualFromP)
