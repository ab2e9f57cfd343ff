"""Exact (lossless) verification of token chains: greedy match and speculative sampling (METHODS.md §1)."""

from __future__ import annotations

import torch

from ..sampling import sample
from ..types import Proposal, TargetScores, Verdict
from .base import VERIFIERS, Verifier, first_rejection
from .tree import verify_tree_greedy, verify_tree_sampling


@VERIFIERS.register("greedy")
class GreedyVerifier(Verifier):
    """Accept the longest prefix with x_i == argmax p_i; emit the target's argmax at the first mismatch."""

    lossless = True
    needs_probs = False
    bounds = "exact: token-identical to greedy decoding of the target"
    paper = "Leviathan et al. 2023; Chen et al. 2023"

    def verify(self, proposal: Proposal, scores: TargetScores, generator=None) -> Verdict:
        if proposal.is_tree:
            return verify_tree_greedy(proposal, scores)
        x = proposal.tokens  # [B, K]
        k = x.shape[1]
        target_argmax = scores.logits.argmax(-1)  # [B, K+1]
        n = first_rejection(x == target_argmax[:, :k])  # [B]
        next_tokens = target_argmax.gather(1, n[:, None]).squeeze(1)  # [B]
        return Verdict(num_accepted=n, next_tokens=next_tokens)


def _residual_rule(proposal: Proposal, scores: TargetScores, generator, q: torch.Tensor | None) -> Verdict:
    """Accept x_i iff u_i <= p_i(x_i)/q_i(x_i); at the first rejection sample norm(max(0, p - q)).

    q None means a deterministic draft (q = one-hot at x_i): accept with probability p(x_i), and on rejection
    sample p with x_i removed.
    """
    x = proposal.tokens  # [B, K]
    p = scores.probs  # [B, K+1, V]
    if p is None:
        raise ValueError("scores.probs: this verifier needs the processed target distributions, got None")
    b, k = x.shape
    p_x = p[:, :k].gather(-1, x[..., None]).squeeze(-1).double()  # [B, K]
    q_x = torch.ones_like(p_x) if q is None else q.gather(-1, x[..., None]).squeeze(-1).double()  # [B, K]
    u = torch.rand((b, k), dtype=torch.float64, device=x.device, generator=generator)  # [B, K]
    n = first_rejection(u * q_x <= p_x)  # [B]; u <= p/q without dividing by q = 0

    rows = torch.arange(b, device=x.device)
    p_n = p[rows, n]  # [B, V] target distribution at the stop position
    if q is None:
        q_n = torch.nn.functional.one_hot(x, p.shape[-1]).to(p.dtype)  # [B, K, V]
    else:
        q_n = q.to(p.dtype)
    q_n = torch.cat([q_n, torch.zeros_like(p_n[:, None])], dim=1)[rows, n]  # [B, V]; bonus position: q = 0
    residual = (p_n - q_n).clamp_min(0)  # [B, V]
    empty = residual.sum(-1, keepdim=True) <= 1e-12  # numerically zero residual: fall back to p
    residual = torch.where(empty, p_n, residual)
    return Verdict(num_accepted=n, next_tokens=sample(residual, generator))


@VERIFIERS.register("speculative")
class SpeculativeSamplingVerifier(Verifier):
    """Speculative sampling with the residual correction; uses the drafter's q, or one-hot q when it has none."""

    lossless = True
    paper = "Leviathan et al. 2023; Chen et al. 2023"

    def verify(self, proposal: Proposal, scores: TargetScores, generator=None) -> Verdict:
        if proposal.is_tree:
            return verify_tree_sampling(proposal, scores, generator)
        return _residual_rule(proposal, scores, generator, proposal.probs)


@VERIFIERS.register("deterministic")
class DeterministicDraftVerifier(Verifier):
    """Speculative sampling for drafts without distributions (n-gram, prompt lookup, argmax drafters)."""

    lossless = True
    paper = "METHODS.md §1 (one-hot q); prompt lookup decoding"

    def verify(self, proposal: Proposal, scores: TargetScores, generator=None) -> Verdict:
        if proposal.is_tree:
            return verify_tree_sampling(Proposal(proposal.tokens, None, proposal.parents), scores, generator)
        return _residual_rule(proposal, scores, generator, None)


@VERIFIERS.register("multi-draft")
class MultiDraftTreeVerifier(Verifier):
    """Recursive rejection over siblings for token trees (SpecInfer); a chain is a tree of width 1."""

    lossless = True
    paper = "Miao et al. 2024 (SpecInfer); Chen et al. 2023"

    def verify(self, proposal: Proposal, scores: TargetScores, generator=None) -> Verdict:
        k = proposal.k
        tree = proposal if proposal.is_tree else Proposal(proposal.tokens, proposal.probs, tuple(range(-1, k - 1)))
        verdict = verify_tree_sampling(tree, scores, generator)
        return verdict if proposal.is_tree else Verdict(verdict.num_accepted, verdict.next_tokens)
