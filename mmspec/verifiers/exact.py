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
    supports_trees = True
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


def draft_uniforms(x: torch.Tensor, generator) -> torch.Tensor:
    """One float64 uniform per draft position, [B, K] (float32 could give exactly 0)."""
    return torch.rand(x.shape, dtype=torch.float64, device=x.device, generator=generator)


def token_probs(p: torch.Tensor, q: torch.Tensor | None, x: torch.Tensor):
    """p(x_i), q(x_i) in float64 at each draft position -> ([B, K], [B, K]); q None = one-hot q (q(x) = 1)."""
    k = x.shape[1]
    p_x = p[:, :k].gather(-1, x[..., None]).squeeze(-1).double()  # [B, K]
    q_x = torch.ones_like(p_x) if q is None else q.gather(-1, x[..., None]).squeeze(-1).double()  # [B, K]
    return p_x, q_x


def residual_weights(p: torch.Tensor, q: torch.Tensor | None, x: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    """max(0, p_n - q_n) at each row's stop position n [B] -> unnormalised weights [B, V].

    q None = one-hot at the draft (p with x removed). At n = K (all accepted) q = 0: the bonus is drawn from p_K.
    A numerically empty residual falls back to p_n (never uniform, never NaN).
    """
    rows = torch.arange(x.shape[0], device=x.device)
    p_n = p[rows, n]  # [B, V]
    q_all = torch.nn.functional.one_hot(x, p.shape[-1]).to(p.dtype) if q is None else q.to(p.dtype)  # [B, K, V]
    q_n = torch.cat([q_all, torch.zeros_like(p_n[:, None])], dim=1)[rows, n]  # [B, V]
    residual = (p_n - q_n).clamp_min(0)  # [B, V]
    return torch.where(residual.sum(-1, keepdim=True) <= 1e-12, p_n, residual)


def _residual_rule(proposal: Proposal, scores: TargetScores, generator, q: torch.Tensor | None) -> Verdict:
    """Accept x_i iff u_i <= p_i(x_i)/q_i(x_i); at the first rejection sample norm(max(0, p - q)).

    q None means a deterministic draft (q = one-hot at x_i): accept with probability p(x_i), and on rejection
    sample p with x_i removed.
    """
    x, p = proposal.tokens, scores.probs  # [B, K], [B, K+1, V]
    if p is None:
        raise ValueError("scores.probs: this verifier needs the processed target distributions, got None")
    p_x, q_x = token_probs(p, q, x)  # [B, K]
    u = draft_uniforms(x, generator)  # [B, K]
    n = first_rejection(u * q_x <= p_x)  # [B]; u <= p/q without dividing by q = 0
    return Verdict(num_accepted=n, next_tokens=sample(residual_weights(p, q, x, n), generator))


@VERIFIERS.register("speculative")
class SpeculativeSamplingVerifier(Verifier):
    """Speculative sampling with the residual correction; uses the drafter's q, or one-hot q when it has none."""

    lossless = True
    supports_trees = True
    paper = "Leviathan et al. 2023; Chen et al. 2023"

    def verify(self, proposal: Proposal, scores: TargetScores, generator=None) -> Verdict:
        if proposal.is_tree:
            return verify_tree_sampling(proposal, scores, generator)
        return _residual_rule(proposal, scores, generator, proposal.probs)


@VERIFIERS.register("deterministic")
class DeterministicDraftVerifier(Verifier):
    """Speculative sampling for drafts without distributions (n-gram, prompt lookup, argmax drafters)."""

    lossless = True
    supports_trees = True
    paper = "METHODS.md §1 (one-hot q); prompt lookup decoding"

    def verify(self, proposal: Proposal, scores: TargetScores, generator=None) -> Verdict:
        if proposal.is_tree:
            return verify_tree_sampling(Proposal(proposal.tokens, None, proposal.parents), scores, generator)
        return _residual_rule(proposal, scores, generator, None)


@VERIFIERS.register("multi-draft")
class MultiDraftTreeVerifier(Verifier):
    """Recursive rejection over siblings for token trees (SpecInfer); a chain is a tree of width 1."""

    lossless = True
    supports_trees = True
    paper = "Miao et al. 2024 (SpecInfer); Chen et al. 2023"

    def verify(self, proposal: Proposal, scores: TargetScores, generator=None) -> Verdict:
        k = proposal.k
        tree = proposal if proposal.is_tree else Proposal(proposal.tokens, proposal.probs, tuple(range(-1, k - 1)))
        verdict = verify_tree_sampling(tree, scores, generator)
        return verdict if proposal.is_tree else Verdict(verdict.num_accepted, verdict.next_tokens)
