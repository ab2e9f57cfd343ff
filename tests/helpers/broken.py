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


class TreeWithoutResidualUpdate(Verifier):
    """Multi-draft tree sampling that forgets to update the residual after a rejected sibling: the next sibling is
    tested against p itself, and the correction is sampled from p (not from the residual)."""

    lossless = False
    supports_trees = True

    def verify(self, proposal, scores, generator=None):
        tokens, p = proposal.tokens, scores.probs  # [B, N], [B, N+1, V]
        b = tokens.shape[0]
        roots = [i for i, par in enumerate(proposal.parents) if par == -1]
        rows = torch.arange(b)
        n = torch.zeros(b, dtype=torch.long)
        node = torch.full((b,), -1, dtype=torch.long)
        for c in roots:  # one level only: enough to bias the first token
            x = tokens[:, c]
            q_c = proposal.probs[:, c].gather(-1, x[:, None]).squeeze(-1).double()
            u = torch.rand(b, dtype=torch.float64, generator=generator)
            accept = (node < 0) & (u * q_c <= p[rows, 0, x].double())
            node = torch.where(accept, torch.full_like(node, c), node)
        n = (node >= 0).long()
        nxt = torch.where(node >= 0, tokens[rows, node.clamp_min(0)], sample(p[:, 0], generator))
        return Verdict(n, nxt, path=torch.where(node >= 0, node, -1)[:, None])


if "test-broken-tree-no-residual" not in VERIFIERS:
    VERIFIERS.register("test-broken-tree-no-residual")(TreeWithoutResidualUpdate)
