"""Exact (lossless) verification of token chains: greedy match and speculative sampling (METHODS.md §1)."""

from __future__ import annotations

import dataclasses

import torch

from ..kernels import greedy_chain, speculative_chain
from ..kernels.chain import residual_weights, token_probs  # noqa: F401  (shared by the relaxed rules)
from ..types import Proposal, TargetScores, Verdict
from .base import VERIFIERS, BenchCase, Verifier, reference_chain, require_chain, require_probs
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
        n, next_tokens = greedy_chain(proposal.tokens, scores.logits.argmax(-1))  # [B], [B]
        return Verdict(num_accepted=n, next_tokens=next_tokens)


def draft_uniforms(x: torch.Tensor, generator) -> torch.Tensor:
    """One float64 uniform per draft position, [B, K] (float32 could give exactly 0)."""
    return torch.rand(x.shape, dtype=torch.float64, device=x.device, generator=generator)


def residual_noise(p: torch.Tensor, generator) -> torch.Tensor:
    """Exp(1) noise [B, V] for one exponential-race sample per row (exactly what :func:`sample` draws)."""
    return torch.empty((p.shape[0], p.shape[-1]), dtype=torch.float32, device=p.device).exponential_(generator=generator)


def chain_inputs(proposal: Proposal, scores: TargetScores, generator, rule: str) -> tuple:
    """A chain rule's inputs, with the clear errors (a tree, no probabilities): drafts x [B, K], target probabilities
    p [B, K+1, V], and the randomness of exact speculative sampling in its order: uniforms u [B, K], noise e [B, V]."""
    require_chain(proposal, rule)
    p, x = require_probs(scores, rule), proposal.tokens
    return x, p, draft_uniforms(x, generator), residual_noise(p, generator)


def speculative_core(x, p, q, u, e) -> Verdict:
    """Accept x_i iff u_i <= p_i(x_i)/q_i(x_i); at the first rejection sample norm(max(0, p - q)).

    x [B, K]; p [B, K+1, V]; q [B, K, V] or None (one-hot q: accept with probability p(x_i), on rejection sample
    p with x_i removed); u [B, K] uniforms; e [B, V] Exp(1) noise for the exponential-race residual sample. Runs
    :func:`mmspec.kernels.speculative_chain` (the Triton kernel on CUDA, else its torch reference).
    """
    n, next_tokens = speculative_chain(x, p, q, u, e)
    return Verdict(num_accepted=n, next_tokens=next_tokens)


@VERIFIERS.register("speculative")
class SpeculativeSamplingVerifier(Verifier):
    """Speculative sampling with the residual correction; uses the drafter's q, or one-hot q when it has none."""

    lossless = True
    supports_trees = True
    paper = "Leviathan et al. 2023; Chen et al. 2023"
    one_hot = False  # treat every draft as one-hot (q = 1 at x), whatever the drafter proposes

    def verify(self, proposal: Proposal, scores: TargetScores, generator=None) -> Verdict:
        if self.one_hot:
            proposal = dataclasses.replace(proposal, probs=None)
        if proposal.is_tree:
            return verify_tree_sampling(proposal, scores, generator)
        x, p, u, e = chain_inputs(proposal, scores, generator, "speculative")
        return speculative_core(x, p, proposal.probs, u, e)


@VERIFIERS.register("deterministic")
class DeterministicDraftVerifier(SpeculativeSamplingVerifier):
    """Speculative sampling for drafts without distributions (n-gram, prompt lookup, argmax drafters)."""

    paper = "METHODS.md §1 (one-hot q); prompt lookup decoding"
    one_hot = True


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


# -- per-position reference loops (test oracles, and the baseline of ``mmspec bench verifiers``) -------------------
def reference_residual_sample(p_row, q_row, x_row, n: int, e_row) -> int:
    """One row's residual sample at stop position n: torch ops along the vocabulary only."""
    k = x_row.shape[0]
    if n < k:
        q_n = torch.nn.functional.one_hot(x_row[n], p_row.shape[-1]).to(p_row.dtype) if q_row is None else q_row[n]
    else:
        q_n = torch.zeros_like(p_row[n])
    weights = (p_row[n] - q_n).clamp_min(0)
    if float(weights.sum()) <= 1e-12:
        weights = p_row[n]
    return int((weights.float() / e_row).argmax())


def reference_ratio_chain(x, p, q, u, e, accept) -> Verdict:
    """Per-row, per-position reference of the accept-then-residual chain: ``accept(p(x), q(x), u) -> bool`` at each
    draft position (q(x) = 1 for one-hot drafts), the residual sample at the first rejection (bonus if none)."""

    def accepted(row, i):
        qx = 1.0 if q is None else float(q[row, i, x[row, i]])
        return accept(float(p[row, i, x[row, i]]), qx, float(u[row, i]))

    return reference_chain(*x.shape, accepted, lambda row, n: reference_residual_sample(
        p[row], None if q is None else q[row], x[row], n, e[row]))  # fmt: skip


def reference_speculative(x, p, q, u, e) -> Verdict:
    return reference_ratio_chain(x, p, q, u, e, lambda px, qx, uu: uu * qx <= px)


def reference_greedy(x, logits) -> Verdict:
    return reference_chain(*x.shape, lambda row, i: int(x[row, i]) == int(logits[row, i].argmax()),
                           lambda row, n: int(logits[row, n].argmax()))  # fmt: skip


def greedy_core(x, logits) -> Verdict:
    return GreedyVerifier().verify(Proposal(x), TargetScores(logits))


def bench_inputs(batch: int, k: int, vocab: int, seed: int = 0, closeness: float = 0.3) -> dict:
    """Random but realistic verification inputs: a drafter q close to the target p (most drafts accepted, so a
    reference loop cannot stop early), drafts x ~ q, uniforms u and exponential-race noise e."""
    g = torch.Generator().manual_seed(seed)
    draft_logits = 4 * torch.randn(batch, k + 1, vocab, generator=g)  # [B, K+1, V]
    q = torch.softmax(draft_logits[:, :k], -1)  # [B, K, V]
    x = torch.multinomial(q.flatten(0, 1), 1, generator=g).view(batch, k)  # [B, K]
    logits = draft_logits + closeness * torch.randn(batch, k + 1, vocab, generator=g)  # [B, K+1, V]
    return {"x": x, "q": q, "logits": logits, "p": torch.softmax(logits, -1),
            "u": torch.rand(batch, k, dtype=torch.float64, generator=g),
            "e": torch.empty(batch, vocab).exponential_(generator=g)}  # fmt: skip


def bench_cases(batch: int = 8, k: int = 8, vocab: int = 16384, seed: int = 0) -> list[BenchCase]:
    """Vectorised exact rules vs their per-position reference loops on identical random inputs."""
    d = bench_inputs(batch, k, vocab, seed)
    x, q, logits, p, u, e = d["x"], d["q"], d["logits"], d["p"], d["u"], d["e"]
    greedy_x = logits[:, :k].argmax(-1)  # greedy drafts that mostly match
    greedy_x[:, k // 2 :] = x[:, k // 2 :]
    return [
        BenchCase("greedy", lambda: greedy_core(greedy_x, logits), lambda: reference_greedy(greedy_x, logits)),
        BenchCase("speculative", lambda: speculative_core(x, p, q, u, e), lambda: reference_speculative(x, p, q, u, e)),
        BenchCase("deterministic", lambda: speculative_core(x, p, None, u, e), lambda: reference_speculative(x, p, None, u, e)),
    ]  # fmt: skip
