"""Exact rules at the verifier level, 2e5 draws: the emitted tokens follow the target's law (χ²), and the
deliberately broken variants in tests/helpers/broken.py fail the same test.

Toy setting: the target's distribution at each position is fixed (independent of the prefix), so a lossless rule's
first emitted token ~ p_0 and, when a first draft was accepted, its second emitted token ~ p_1.
"""

from __future__ import annotations

import pytest
import torch
from scipy import stats

import tests.helpers.broken  # noqa: F401  (registers the broken variants)
from mmspec.types import Proposal, TargetScores
from mmspec.verifiers import make_verifier

B, V = 200_000, 6
P = torch.tensor([[0.30, 0.25, 0.20, 0.15, 0.07, 0.03],
                  [0.05, 0.10, 0.15, 0.20, 0.20, 0.30],
                  [0.40, 0.10, 0.10, 0.10, 0.10, 0.20]])  # fmt: skip  p_0, p_1, p_2 (bonus)
Q = torch.tensor([[0.10, 0.10, 0.10, 0.10, 0.30, 0.30],
                  [0.30, 0.30, 0.10, 0.10, 0.10, 0.10]])  # fmt: skip  the drafter: far from p on purpose


def _chain_round(deterministic: bool, seed: int):
    g = torch.Generator().manual_seed(seed)
    x = torch.stack([torch.multinomial(Q[i], B, replacement=True, generator=g) for i in range(2)], 1)  # [B, 2]
    probs = None if deterministic else Q.expand(B, -1, -1)
    return Proposal(x, probs), TargetScores(P.log().expand(B, -1, -1), P.expand(B, -1, -1))


def _pvalue(tokens: torch.Tensor, law: torch.Tensor) -> float:
    counts = torch.bincount(tokens, minlength=V).double()
    law = law.double() / law.double().sum()
    return float(stats.chisquare(counts.numpy(), (law * counts.sum()).numpy()).pvalue)


def _emitted(verdict, tokens):
    """(first emitted token [B], second emitted token [B'] on rows that accepted their first draft)."""
    n = verdict.num_accepted
    first = torch.where(n >= 1, tokens[:, 0], verdict.next_tokens)
    more = n >= 1
    second = torch.where(n >= 2, tokens[:, 1], verdict.next_tokens)[more]
    return first, second


@pytest.mark.parametrize("name,deterministic", [("speculative", False), ("deterministic", True), ("multi-draft", False)])
def test_exact_chain_rules_follow_the_target(name, deterministic):
    proposal, scores = _chain_round(deterministic, 0)
    verdict = make_verifier(name).verify(proposal, scores, torch.Generator().manual_seed(1))
    first, second = _emitted(verdict, proposal.tokens)
    assert _pvalue(first, P[0]) > 1e-3 and _pvalue(second, P[1]) > 1e-3


def test_broken_residual_fails():
    proposal, scores = _chain_round(False, 0)
    verdict = make_verifier("test-broken-residual").verify(proposal, scores, torch.Generator().manual_seed(1))
    first, _ = _emitted(verdict, proposal.tokens)
    assert _pvalue(first, P[0]) < 1e-6


def _tree_round(seed: int):
    """Two sibling drafts (from q_a and q_b) under x_t, each with one child: parents (-1, -1, 0, 1)."""
    g = torch.Generator().manual_seed(seed)
    qa, qb = Q[0], Q[1]
    tokens = torch.stack([torch.multinomial(qa, B, replacement=True, generator=g),
                          torch.multinomial(qb, B, replacement=True, generator=g),
                          torch.multinomial(Q[1], B, replacement=True, generator=g),
                          torch.multinomial(Q[1], B, replacement=True, generator=g)], 1)  # fmt: skip  [B, 4]
    probs = torch.stack([qa, qb, Q[1], Q[1]]).expand(B, -1, -1)  # [B, 4, V]
    p = torch.stack([P[0], P[1], P[1], P[2], P[2]]).expand(B, -1, -1)  # [B, 5, V]: at x_t, then at each node
    return Proposal(tokens, probs, (-1, -1, 0, 1)), TargetScores(p.log(), p)


@pytest.mark.parametrize("name,ok", [("multi-draft", True), ("speculative", True), ("test-broken-tree-no-residual", False)])
def test_tree_sampling_first_token_law(name, ok):
    proposal, scores = _tree_round(0)
    verdict = make_verifier(name).verify(proposal, scores, torch.Generator().manual_seed(2))
    first = torch.where(verdict.num_accepted >= 1, proposal.tokens.gather(1, verdict.path[:, :1].clamp_min(0)).squeeze(1),
                        verdict.next_tokens)  # fmt: skip
    p = _pvalue(first, P[0])
    assert (p > 1e-3) if ok else (p < 1e-6), p
