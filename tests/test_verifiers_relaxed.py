"""Relaxed (lossy) token verifiers: contract, vectorised == per-position reference, the exact special cases
(β = 0, δ = 0, k = 0, G = {x}, R = 1, margin = 0, r = 0) and the bounds each rule promises."""

from __future__ import annotations

import pytest
import torch

from mmspec.types import Proposal, TargetScores
from mmspec.verifiers import make_verifier
from mmspec.verifiers import action, codebook, tolerance
from mmspec.verifiers.action import KalmanActionFilter, adaptive_tolerance
from mmspec.verifiers.codebook import build_neighbour_table, lantern_core, lantern_relaxation
from tests.test_verifier_contract import V, VerifierContract, random_round

NEIGHBOURS = build_neighbour_table(torch.randn(V, 4, generator=torch.Generator().manual_seed(0)), 4)


class TestSSD(VerifierContract):
    name = "ssd"
    params = {"beta": 0.2}


class TestTopR(VerifierContract):
    name = "top-r"
    params = {"r": 2}


class TestMargin(VerifierContract):
    name = "margin"
    params = {"margin": 0.5}


class TestActionTolerance(VerifierContract):
    name = "action-tolerance"
    params = {"r": 1}


class TestLantern(VerifierContract):
    name = "lantern"
    params = {"neighbours": NEIGHBOURS, "delta": 0.2}


class TestGSD(VerifierContract):
    name = "gsd"
    params = {"ranks": 2, "prob_tol": 0.3}


@pytest.mark.parametrize("case", [c for m in (tolerance, action, codebook) for c in m.bench_cases(batch=4, k=3, vocab=40, seed=1)],
                         ids=lambda c: c.name)
def test_vectorised_equals_reference_loop(case):
    fast, slow = case.vectorised(), case.reference()
    assert torch.equal(fast.num_accepted, slow.num_accepted), (fast.num_accepted, slow.num_accepted)
    assert torch.equal(fast.next_tokens, slow.next_tokens), (fast.next_tokens, slow.next_tokens)


def _greedy_round(seed):
    proposal, scores = random_round(seed)
    onehot = torch.nn.functional.one_hot(scores.logits.argmax(-1), V).float()  # processed p under greedy decoding
    return Proposal(proposal.tokens, None), TargetScores(scores.logits, onehot)


EXACT_CASES = [
    ("ssd", {"beta": 0.0}, "speculative", random_round),
    ("lantern", {"neighbours": NEIGHBOURS, "delta": 0.0}, "speculative", random_round),
    ("lantern", {"neighbours": NEIGHBOURS[:, :0], "delta": 0.3}, "speculative", random_round),  # k = 0
    ("lantern", {"neighbours": NEIGHBOURS, "lam": 1.0}, "speculative", random_round),  # λ = 1
    ("gsd", {"ranks": 0}, "speculative", random_round),
    ("top-r", {"r": 1}, "greedy", _greedy_round),
    ("margin", {"margin": 0.0}, "greedy", _greedy_round),
    ("action-tolerance", {"r": 0}, "greedy", _greedy_round),
]


@pytest.mark.parametrize("name,params,exact,make_round", EXACT_CASES, ids=lambda v: str(v)[:30])
def test_exact_special_case_reproduces_the_exact_rule(name, params, exact, make_round):
    relaxed, reference = make_verifier(name, **params), make_verifier(exact)
    for seed in range(40):
        proposal, scores = make_round(seed)
        a = relaxed.verify(proposal, scores, torch.Generator().manual_seed(seed))
        b = reference.verify(proposal, scores, torch.Generator().manual_seed(seed))
        assert torch.equal(a.num_accepted, b.num_accepted) and torch.equal(a.next_tokens, b.next_tokens), seed


def test_relaxations_accept_at_least_as_much_as_exact():
    """Same uniforms: a relaxed rule never accepts a shorter prefix than its exact special case."""
    for seed in range(20):
        proposal, scores = random_round(seed)
        for name, loose, tight in [("ssd", {"beta": 0.3}, {"beta": 0.0}),  # (GSD is not monotone: see its docstring)
                                   ("lantern", {"neighbours": NEIGHBOURS, "delta": 0.3}, {"neighbours": NEIGHBOURS, "delta": 0.0})]:  # fmt: skip
            a = make_verifier(name, **loose).verify(proposal, scores, torch.Generator().manual_seed(seed))
            b = make_verifier(name, **tight).verify(proposal, scores, torch.Generator().manual_seed(seed))
            assert bool((a.num_accepted >= b.num_accepted).all()), (name, seed)


def test_ssd_acceptance_probability_is_ratio_plus_beta():
    """K = 1, fixed draft: P(accept) = min(1, p(x)/q(x) + β), checked over 2e5 rows within 5 sigma."""
    b, beta = 200_000, 0.15
    p = torch.tensor([0.1, 0.3, 0.6]).expand(b, 2, 3)
    q = torch.tensor([0.5, 0.25, 0.25]).expand(b, 1, 3)
    x = torch.zeros(b, 1, dtype=torch.long)  # p/q = 0.2 -> acceptance 0.35
    verdict = make_verifier("ssd", beta=beta).verify(Proposal(x, q), TargetScores(p.log(), p), torch.Generator().manual_seed(0))
    rate, want = verdict.num_accepted.double().mean().item(), 0.2 + beta
    assert abs(rate - want) < 5 * (want * (1 - want) / b) ** 0.5, (rate, want)


@pytest.mark.parametrize("delta,lam", [(0.05, None), (0.2, None), (0.5, None), (None, 1.5), (None, 3.0)])
def test_lantern_bounds(delta, lam):
    """δ-mode: TV(p, p~) = c_m <= δ; λ-mode: p~(x) = p(x) + c_m <= λ p(x); absorbed neighbours are the nearest."""
    for seed in range(10):
        proposal, scores = random_round(seed)
        x, p = proposal.tokens, scores.probs
        nb, m, c_m = lantern_relaxation(x, p, NEIGHBOURS, delta or 0.0, lam)
        p_x = p[:, :-1].gather(-1, x[..., None]).squeeze(-1).double()
        if lam is None:
            assert bool((c_m <= delta + 1e-12).all())
        else:
            assert bool((p_x + c_m <= lam * p_x + 1e-12).all())
        want = torch.stack([p[:, :-1].gather(-1, nb).double()[..., :j].sum(-1) for j in range(nb.shape[-1] + 1)], -1)
        assert torch.allclose(c_m, want.gather(-1, m[..., None]).squeeze(-1))


def test_lantern_acceptance_is_monotone_in_delta():
    proposal, scores = random_round(3)
    g = torch.Generator().manual_seed(0)
    u = torch.rand(proposal.tokens.shape, dtype=torch.float64, generator=g)
    e = torch.empty(scores.probs.shape[0], V).exponential_(generator=g)
    lengths = [lantern_core(proposal.tokens, scores.probs, proposal.probs, NEIGHBOURS, d, None, u, e).num_accepted
               for d in (0.0, 0.05, 0.1, 0.2, 0.4, 0.8)]  # fmt: skip
    for short, long in zip(lengths, lengths[1:]):
        assert bool((long >= short).all())
    assert bool((lengths[-1] > lengths[0]).any())  # and it does relax something on this round


def test_lantern_residual_uses_the_relaxed_target():
    """After a rejection the neighbours absorbed into x get no mass: they can never be the correction token."""
    b = 50_000
    p = torch.tensor([0.3, 0.3, 0.2, 0.2]).expand(b, 2, 4)
    q = torch.tensor([0.1, 0.1, 0.1, 0.7]).expand(b, 1, 4)
    x = torch.full((b, 1), 3)  # p(x)/q(x) = 0.2/0.7: frequent rejections
    neighbours = torch.tensor([[1, 2, 3], [0, 2, 3], [3, 0, 1], [2, 0, 1]])  # token 3's nearest is 2, then 0
    verdict = make_verifier("lantern", neighbours=neighbours, delta=0.25).verify(Proposal(x, q), TargetScores(p.log(), p),
                                                                                torch.Generator().manual_seed(0))  # fmt: skip
    rejected = verdict.num_accepted == 0
    assert bool(rejected.any()) and not bool((verdict.next_tokens[rejected] == 2).any())  # p~(2) = 0
    rate = 1 - rejected.double().mean().item()  # accepted w.p. (0.2 + 0.2) / 0.7
    assert abs(rate - 0.4 / 0.7) < 0.01


def test_action_tolerance_never_accepts_beyond_r():
    for seed in range(20):
        proposal, scores = random_round(seed)
        tol = torch.tensor([0, 1, 2, 3, 1])
        proposal.meta["tolerance"] = tol
        verdict = make_verifier("action-tolerance", r=9).verify(proposal, scores)
        dist = (proposal.tokens - scores.logits[:, :-1].argmax(-1)).abs()
        for row in range(dist.shape[0]):
            n = int(verdict.num_accepted[row])
            assert bool((dist[row, :n] <= tol[row]).all())
            assert n == dist.shape[1] or int(dist[row, n]) > int(tol[row])


def test_action_tolerance_non_action_tokens_match_exactly():
    proposal, scores = random_round(0)
    proposal.tokens = scores.logits[:, :-1].argmax(-1) + 1  # every draft one bin off
    proposal.meta["is_action"] = torch.tensor([[True, True, False, True]]).expand(proposal.tokens.shape[0], -1)
    verdict = make_verifier("action-tolerance", r=1).verify(proposal, scores)
    assert verdict.num_accepted.tolist() == [2] * proposal.tokens.shape[0]


def test_adaptive_tolerance_tightens_on_jerky_motion():
    t = torch.arange(6, dtype=torch.float64)
    smooth = torch.stack([t * 2, t * 3], -1)[None]  # constant velocity: no acceleration
    jerky = torch.stack([t * 0, (-1) ** t * 4], -1)[None]
    r = adaptive_tolerance(torch.cat([smooth, jerky]), r_min=0, r_max=3, scale=0.5)
    assert r.tolist() == [3, 0]
    with pytest.raises(ValueError, match="recent"):
        adaptive_tolerance(torch.zeros(2, 2, 3))


def test_kalman_filter_predicts_constant_velocity():
    kf = KalmanActionFilter(batch=2, dims=3)
    start, vel = torch.tensor([[0.0, 5.0, -2.0], [1.0, 1.0, 1.0]]), torch.tensor([[1.0, -0.5, 2.0], [0.0, 3.0, -1.0]])
    for step in range(12):
        kf.update(start + step * vel)
    assert torch.allclose(kf.predict().float(), start + 12 * vel, atol=0.05)


def test_neighbour_table():
    emb = torch.tensor([[0.0, 1.0], [0.1, 1.0], [1.0, 0.0], [1.0, 0.1], [-1.0, 0.0]])
    table = build_neighbour_table(emb, 2)
    assert table.shape == (5, 2) and table.dtype == torch.int64
    assert table[0, 0] == 1 and table[2, 0] == 3 and not bool((table == torch.arange(5)[:, None]).any())
    with pytest.raises(ValueError, match="k"):
        build_neighbour_table(emb, 5)


@pytest.mark.parametrize("name,params,arg", [
    ("ssd", {"beta": -0.1}, "beta"), ("top-r", {"r": 0}, "r"), ("margin", {"margin": -1}, "margin"),
    ("action-tolerance", {"r": -1}, "r"), ("lantern", {"neighbours": torch.zeros(3)}, "neighbours"),
    ("lantern", {"neighbours": NEIGHBOURS, "delta": 2.0}, "delta"), ("lantern", {"neighbours": NEIGHBOURS, "lam": 0.5}, "lam"),
    ("gsd", {"ranks": -1}, "ranks"),
])  # fmt: skip
def test_bad_parameters_are_clear_errors(name, params, arg):
    with pytest.raises(ValueError, match=arg):
        make_verifier(name, **params)


def test_margin_entropy_gate_skips_confident_rows():
    proposal, scores = random_round(1)
    sharp = torch.nn.functional.one_hot(proposal.tokens, V).float() * 0.999 + 0.001 / V
    proposal = Proposal(proposal.tokens, sharp)
    verdict = make_verifier("margin", margin=0.0, entropy_gate=0.5).verify(proposal, scores, torch.Generator().manual_seed(0))
    assert bool(verdict.extras["skipped"].all()) and bool((verdict.num_accepted == proposal.k).all())
