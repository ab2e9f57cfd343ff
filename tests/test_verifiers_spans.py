"""Span-level relaxed verifiers (mmspec/verifiers/spans.py): phrase-level joint acceptance (SJD-PV), edit-distance
τ-matching (HSD) and confidence-based verification skipping (VVS).

Contract tests via the ``VerifierContract`` mixin; vectorised rules against their reference loops on identical
randomness; the exact special cases verdict for verdict; and each promised relaxation on a constructed case."""

from __future__ import annotations

import math

import pytest
import torch

from mmspec.types import Proposal, TargetScores
from mmspec.verifiers import VERIFIERS, make_verifier
from mmspec.verifiers import phrase, spans
from mmspec.verifiers.phrase import PhraseLibrary, build_phrase_library, greedy_unit_starts, phrase_core, reference_phrase
from mmspec.verifiers.spans import (confidence_skip_core, edit_distance_core, levenshtein, reference_confidence_skip,
                                    reference_edit_distance)
from tests.test_verifier_contract import K, V, VerifierContract, agreeing_round, random_round

# every bigram (a, b) with a + b divisible by 3 and a few trigrams: random drafts over V = 11 hit them often
CONTRACT_LIBRARY = [(a, b) for a in range(V) for b in range(V) if (a + b) % 3 == 0] + [(1, 2, 3), (4, 4, 4), (0, 3, 6)]


class SpanRuleContract(VerifierContract):
    """The contract, adapted where span rules differ from the exact token rules."""

    @pytest.mark.parametrize("tree", [None, (-1, -1, 0, 1, 2)], ids=["chain", "tree"])
    def test_verdict_shapes_and_ranges(self, tree):
        # Span rules (phrases, edit distance over a region, skipped prefixes) are defined on chains only: a tree
        # is refused with a clear error instead of returning a path.
        if tree is None:
            return super().test_verdict_shapes_and_ranges(tree)
        proposal, scores = random_round(0, tree)
        with pytest.raises(ValueError, match="token chains"):
            self.make().verify(proposal, scores, torch.Generator().manual_seed(0))

    def test_accepts_everything_when_draft_is_target(self):
        # The contract only checks lossless rules here; these lossy rules still accept everything when the draft
        # is the target's greedy continuation and q = p (joint ratio 1, edit distance 0, ratio 1 or skipped).
        proposal, scores = agreeing_round(4)
        verdict = self.make().verify(proposal, scores, torch.Generator().manual_seed(0))
        assert bool((verdict.num_accepted == K).all()), verdict.num_accepted


class TestPhrase(SpanRuleContract):
    name = "phrase"
    params = {"library": CONTRACT_LIBRARY}


class TestEditDistance(SpanRuleContract):
    name = "edit-distance"
    params = {"tau": 1}


class TestConfidenceSkip(SpanRuleContract):
    name = "confidence-skip"
    params = {"threshold": 0.5}


def test_registered_and_declared_lossy():
    for name in ("phrase", "edit-distance", "confidence-skip"):
        assert name in VERIFIERS
        assert VERIFIERS.get(name).lossless is False
    assert VERIFIERS.get("edit-distance").needs_probs is False


# ---------------------------------------------------------------------------------------------------------------
# random inputs
# ---------------------------------------------------------------------------------------------------------------
def rand_inputs(seed, b=6, k=7, v=5, zeros=True):
    """Draft, p, q and the pre-drawn randomness; small V so phrases recur, and some p entries exactly 0 (top-k
    style) so log p = -inf paths are exercised."""
    g = torch.Generator().manual_seed(seed)
    q = torch.softmax(2 * torch.randn(b, k, v, generator=g), -1)  # [B, K, V]
    x = torch.multinomial(q.flatten(0, 1), 1, generator=g).view(b, k)  # [B, K]
    logits = 2 * torch.randn(b, k + 1, v, generator=g)  # [B, K+1, V]
    if zeros:
        logits = logits.masked_fill(torch.rand(b, k + 1, v, generator=g) < 0.15, float("-inf"))
        logits[..., 0] = logits[..., 0].nan_to_num(neginf=0.0)  # keep every row normalisable
    p = torch.softmax(logits, -1)  # [B, K+1, V]
    u = torch.rand((b, k), dtype=torch.float64, generator=g)  # [B, K]
    e = torch.empty((b, v)).exponential_(generator=g)  # [B, V]
    return x, logits, p, q, u, e


def library_from(x, seed):
    """Phrases of lengths 2-4 cut from the drafts themselves (so they match, overlapping each other) plus noise."""
    g = torch.Generator().manual_seed(seed)
    phrases = []
    for row in x.tolist():
        for _ in range(2):
            length = int(torch.randint(2, 5, (1,), generator=g))
            start = int(torch.randint(0, len(row) - length + 1, (1,), generator=g))
            phrases.append(row[start : start + length])
    return PhraseLibrary(phrases + torch.randint(5, (6, 3), generator=g).tolist())


def assert_same(a, b):
    assert torch.equal(a.num_accepted, b.num_accepted), (a.num_accepted, b.num_accepted)
    assert torch.equal(a.next_tokens, b.next_tokens), (a.next_tokens, b.next_tokens)
    assert a.extras.keys() == b.extras.keys()
    for key in a.extras:
        assert torch.equal(a.extras[key], b.extras[key]), key


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("with_q", [True, False], ids=["q", "one-hot"])
def test_phrase_matches_reference(seed, with_q):
    x, _, p, q, u, e = rand_inputs(seed)
    q = q if with_q else None
    library = library_from(x, seed)
    assert int(library.longest_match(x).max()) >= 2  # phrases really occur in the drafts
    assert_same(phrase_core(x, p, q, library, u, e), reference_phrase(x, p, q, library, u, e))


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("tau", [0, 1, 2, 3])
def test_edit_distance_matches_reference(seed, tau):
    x, logits, *_ = rand_inputs(seed, zeros=False)
    near = logits[:, : x.shape[1]].argmax(-1).clone()  # [B, K] the target region ...
    g = torch.Generator().manual_seed(seed)
    edits = torch.rand(near.shape, generator=g) < 0.3
    near = torch.where(edits, torch.randint(5, near.shape, generator=g), near)  # ... with random substitutions
    near[0] = torch.cat([near[0, 1:], near[0, :1]])  # a rotation: one deletion + one insertion
    for draft in (x, near):
        assert_same(edit_distance_core(draft, logits, tau), reference_edit_distance(draft, logits, tau))


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("threshold", [0.3, 0.6, 1.5])
def test_confidence_skip_matches_reference(seed, threshold):
    x, _, p, q, u, e = rand_inputs(seed)
    conf = q.gather(-1, x[..., None]).squeeze(-1)  # [B, K]
    assert_same(confidence_skip_core(x, p, q, conf, threshold, u, e), reference_confidence_skip(x, p, q, conf, threshold, u, e))
    meta_conf = torch.rand(conf.shape, generator=torch.Generator().manual_seed(seed))  # q None: supplied confidences
    assert_same(confidence_skip_core(x, p, None, meta_conf, threshold, u, e),
                reference_confidence_skip(x, p, None, meta_conf, threshold, u, e))  # fmt: skip


def test_levenshtein_known_values_and_random():
    def enc(s):
        return torch.tensor([[ord(c) for c in s]])

    assert int(levenshtein(enc("kitten"), enc("sitting"))) == 3
    assert int(levenshtein(enc("flaw"), enc("lawn"))) == 2
    assert int(levenshtein(enc("abc"), enc("abc"))) == 0
    assert int(levenshtein(enc("abcd"), enc("dabc"))) == 2
    assert levenshtein(torch.zeros(2, 0, dtype=torch.long), torch.ones(2, 3, dtype=torch.long)).tolist() == [3, 3]
    g = torch.Generator().manual_seed(0)
    a, b = torch.randint(3, (64, 6), generator=g), torch.randint(3, (64, 6), generator=g)
    want = [_dp(r, s) for r, s in zip(a.tolist(), b.tolist())]
    assert levenshtein(a, b).tolist() == want


def _dp(a, b):
    d = [[i + j if i * j == 0 else 0 for j in range(len(b) + 1)] for i in range(len(a) + 1)]
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            d[i][j] = min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] != b[j - 1]))
    return d[-1][-1]


def test_bench_cases_agree():
    cases = phrase.bench_cases(batch=4, k=6, vocab=64, seed=1) + spans.bench_cases(batch=4, k=6, vocab=64, seed=1)
    assert [c.name for c in cases] == ["phrase", "edit-distance", "confidence-skip"]
    for case in cases:
        assert_same(case.vectorised(), case.reference())


# ---------------------------------------------------------------------------------------------------------------
# exact special cases, verdict for verdict with the same generator
# ---------------------------------------------------------------------------------------------------------------
def rounds(seeds=range(8)):
    for seed in seeds:
        for with_q in (True, False):
            yield random_round(seed, with_q=with_q)


def same_verdicts(rule, exact):
    for proposal, scores in rounds():
        for gseed in (0, 1):
            a = rule.verify(proposal, scores, torch.Generator().manual_seed(gseed))
            b = exact.verify(proposal, scores, torch.Generator().manual_seed(gseed))
            assert torch.equal(a.num_accepted, b.num_accepted) and torch.equal(a.next_tokens, b.next_tokens)


def test_empty_phrase_library_is_speculative():
    same_verdicts(make_verifier("phrase"), make_verifier("speculative"))
    same_verdicts(make_verifier("phrase", library=PhraseLibrary()), make_verifier("speculative"))
    # phrases that never occur in the drafts (tokens >= V) also leave the exact rule
    same_verdicts(make_verifier("phrase", library=[(V, V + 1), (V + 2, 0, 1)]), make_verifier("speculative"))


def test_tau_zero_is_greedy():
    same_verdicts(make_verifier("edit-distance", tau=0), make_verifier("greedy"))
    proposal, scores = agreeing_round(3)  # also on drafts that match (greedy accepts long prefixes)
    a, b = make_verifier("edit-distance", tau=0).verify(proposal, scores), make_verifier("greedy").verify(proposal, scores)
    assert torch.equal(a.num_accepted, b.num_accepted) and torch.equal(a.next_tokens, b.next_tokens)


def test_threshold_above_one_is_speculative():
    rule, exact = make_verifier("confidence-skip", threshold=1.01), make_verifier("speculative")
    for proposal, scores in rounds():
        if proposal.probs is None:  # one-hot q: confidences come from meta (any values in [0, 1])
            conf = torch.rand(proposal.tokens.shape, generator=torch.Generator().manual_seed(0))
            proposal = Proposal(proposal.tokens, None, meta={"confidence": conf})
        for gseed in (0, 1):
            a = rule.verify(proposal, scores, torch.Generator().manual_seed(gseed))
            b = exact.verify(proposal, scores, torch.Generator().manual_seed(gseed))
            assert torch.equal(a.num_accepted, b.num_accepted) and torch.equal(a.next_tokens, b.next_tokens)
            assert int(a.extras["skipped"].sum()) == 0


# ---------------------------------------------------------------------------------------------------------------
# the promised relaxations
# ---------------------------------------------------------------------------------------------------------------
def two_token_case():
    """Draft (1, 2), V = 4. Position 0: p(1) = 0.9, q(1) = 0.5 (ratio 1.8). Position 1: p(2) = 0.3, q(2) = 0.5
    (ratio 0.6). Joint ratio R_p = 1.08 >= 1: the phrase (1, 2) passes for every u; token 2 alone fails for u > 0.6."""
    x = torch.tensor([[1, 2]])
    q = torch.tensor([[[0.1, 0.5, 0.2, 0.2], [0.2, 0.1, 0.5, 0.2]]])  # [1, 2, 4]
    p = torch.tensor([[[0.05, 0.9, 0.0, 0.05], [0.0, 0.1, 0.3, 0.6], [0.25, 0.25, 0.25, 0.25]]])  # [1, 3, 4]
    return x, p, q


def test_phrase_accepted_as_a_whole_where_per_token_rejects():
    x, p, q = two_token_case()
    u = torch.tensor([[0.5, 0.9]], dtype=torch.float64)  # token 2: 0.9 * 0.5 > 0.3 -> rejected per token
    e = torch.ones(1, 4)
    per_token = phrase_core(x, p, q, PhraseLibrary(), u, e)
    joint = phrase_core(x, p, q, PhraseLibrary([(1, 2)]), u, e)
    assert int(per_token.num_accepted) == 1 and int(per_token.next_tokens) == 3  # residual max(0, p - q) = e_3
    assert int(joint.num_accepted) == 2 and int(joint.extras["phrase_tokens"]) == 2
    assert int(joint.next_tokens) == 0  # bonus from p_2, uniform, e = 1: argmax picks the first
    # through the registered verifier: the phrase passes for every seed, the exact rule rejects token 2 often
    scores, proposal = TargetScores(p.log(), p), Proposal(x, q)
    phrase, exact = make_verifier("phrase", library=[(1, 2)]), make_verifier("speculative")
    n_phrase = [int(phrase.verify(proposal, scores, torch.Generator().manual_seed(s)).num_accepted) for s in range(40)]
    n_exact = [int(exact.verify(proposal, scores, torch.Generator().manual_seed(s)).num_accepted) for s in range(40)]
    assert n_phrase == [2] * 40 and n_exact.count(1) >= 5


def test_rejected_phrase_is_rejected_as_a_whole_with_residual_at_its_start():
    x, p, q = two_token_case()
    p = p.clone()
    p[0, 0] = torch.tensor([0.0, 0.1, 0.0, 0.9])  # position 0: p(1) / q(1) = 0.2
    p[0, 1] = torch.tensor([0.0, 0.02, 0.48, 0.5])  # position 1: p(2) / q(2) = 0.96; joint ratio R_p = 0.192
    e = torch.ones(1, 4)
    u = torch.tensor([[0.19, 0.0]], dtype=torch.float64)  # 0.19 <= 0.192: the phrase passes
    assert int(phrase_core(x, p, q, PhraseLibrary([(1, 2)]), u, e).num_accepted) == 2
    u = torch.tensor([[0.195, 0.0]], dtype=torch.float64)  # per token: 0.195 <= 0.2 and 0 <= 0.96 pass; joint fails
    per_token = phrase_core(x, p, q, PhraseLibrary(), u, e)
    joint = phrase_core(x, p, q, PhraseLibrary([(1, 2)]), u, e)
    assert int(per_token.num_accepted) == 2
    assert int(joint.num_accepted) == 0  # the whole phrase goes, not just its second token
    assert int(joint.next_tokens) == 3  # residual at the phrase's first position: max(0, p_0 - q_0) = 0.7 e_3


def test_longest_phrase_wins_greedy_left_to_right():
    lib = PhraseLibrary([(1, 2), (1, 2, 3), (3, 4), (2, 3, 4, 5)])
    x = torch.tensor([[1, 2, 3, 4, 5, 7], [9, 2, 3, 4, 5, 1], [3, 4, 1, 2, 1, 2]])
    assert lib.longest_match(x).tolist() == [[3, 4, 2, 0, 0, 0], [0, 4, 2, 0, 0, 0], [2, 0, 2, 0, 2, 0]]
    starts = greedy_unit_starts(lib.longest_match(x))
    # row 0: units [1 2 3] [4] [5] [7]: the longest phrase at 0 covers the start of (2, 3, 4, 5) and (3, 4)
    assert starts.tolist() == [[0, 3, 4, 5, 6, 6, 6], [0, 1, 5, 6, 6, 6, 6], [0, 2, 4, 6, 6, 6, 6]]


@pytest.mark.parametrize("k", [0, 1, 2, 5, 8, 13])
def test_pointer_doubling_matches_a_scan(k):
    g = torch.Generator().manual_seed(k)
    room = k - torch.arange(k)  # [K] longest span that fits at each position
    span = (torch.rand(16, k, generator=g) * (room + 1)).long() * (torch.rand(16, k, generator=g) < 0.5)  # [16, K]
    starts = greedy_unit_starts(span)
    for row, got in zip(span.tolist(), starts.tolist()):
        want, i = [0], 0
        while len(want) < k + 1:
            i = min(k, i + max(1, row[i])) if i < k else k
            want.append(i)
        assert got == want


def test_phrase_library_storage_and_validation():
    lib = PhraseLibrary([(5, 6), [5, 6], torch.tensor([1, 2, 3])])
    assert len(lib) == 2 and (5, 6) in lib and [1, 2, 3] in lib and (6, 5) not in lib
    assert lib.lengths == [2, 3]
    for bad in ([(1,)], [(1, -2)], [5], [("a", "b")]):
        with pytest.raises(ValueError, match="phrases"):
            PhraseLibrary(bad)
    with pytest.raises(ValueError, match="library: expected"):
        make_verifier("phrase", library=[(1,)])
    with pytest.raises(ValueError, match="library: expected"):
        make_verifier("phrase", library=5)
    # window keys that collide would still be rejected by the token check; the library's keys are unique
    for keys, table in lib.tables(torch.device("cpu")).values():
        assert torch.unique(keys).numel() == keys.numel() == table.shape[0]


def test_edit_distance_accepts_within_tau_and_rejects_beyond():
    logits = torch.full((1, 7, 10), -5.0)
    target = [3, 1, 4, 1, 5, 9, 2]
    logits[0, torch.arange(7), torch.tensor(target)] = 5.0  # argmax region 3 1 4 1 5 9 (+ next 2)
    one_sub = torch.tensor([[3, 1, 7, 1, 5, 9]])  # distance 1
    shifted = torch.tensor([[1, 4, 1, 5, 9, 2]])  # deletion + insertion: distance 2
    two_subs = torch.tensor([[3, 8, 4, 1, 5, 8]])  # distance 2
    v1 = edit_distance_core(one_sub, logits, 1)
    assert int(v1.num_accepted) == 6 and int(v1.next_tokens) == 2 and bool(v1.extras["relaxed"])
    v0 = edit_distance_core(one_sub, logits, 0)
    assert int(v0.num_accepted) == 2 and int(v0.next_tokens) == 4  # greedy: the target's token at the mismatch
    vs = edit_distance_core(shifted, logits, 2)
    assert int(vs.extras["distance"]) == 2 and int(vs.num_accepted) == 6
    assert int(edit_distance_core(shifted, logits, 1).num_accepted) == 0
    v = make_verifier("edit-distance", tau=1).verify(Proposal(two_subs), TargetScores(logits))
    assert int(v.extras["distance"]) == 2 and int(v.num_accepted) == 1 and int(v.next_tokens) == 1
    assert int(make_verifier("edit-distance", tau=2).verify(Proposal(two_subs), TargetScores(logits)).num_accepted) == 6


def test_confidence_skip_counts_and_accepts_a_confident_token_the_target_rules_out():
    x = torch.tensor([[0, 1, 2, 3]])
    q = torch.full((1, 4, 5), 0.0)
    for i, (tok, c) in enumerate(zip(x[0].tolist(), [0.95, 0.2, 0.97, 0.1])):
        q[0, i] = (1 - c) / 4
        q[0, i, tok] = c  # confidence q_i(x_i)
    p = torch.full((1, 5, 5), 0.25)
    p[0, :, 4] = 0.0
    p[0, 0] = torch.tensor([0.0, 0.5, 0.5, 0.0, 0.0])  # p(x_0) = 0: only a skip can accept it
    p[0, 1] = torch.tensor([0.0, 0.6, 0.4, 0.0, 0.0])  # p(x_1) = 0.6 >= q = 0.2: accepted for every u
    p[0, 2] = torch.tensor([0.0, 0.0, 0.0, 1.0, 0.0])  # p(x_2) = 0, confident: skipped
    p[0, 3] = torch.tensor([0.0, 0.5, 0.5, 0.0, 0.0])  # p(x_3) = 0, not confident: rejected
    skip, exact = make_verifier("confidence-skip", threshold=0.9), make_verifier("speculative")
    for seed in range(5):
        v = skip.verify(Proposal(x, q), TargetScores(p.log(), p), torch.Generator().manual_seed(seed))
        assert int(v.num_accepted) == 3 and int(v.extras["skipped"]) == 2
        assert math.isclose(float(v.extras["skip_rate"]), 2 / 3, rel_tol=1e-6)
        assert int(v.next_tokens) in (1, 2)  # residual max(0, p_3 - q_3) lives on tokens 1, 2
        assert int(exact.verify(Proposal(x, q), TargetScores(p.log(), p), torch.Generator().manual_seed(seed)).num_accepted) == 0
    # q None: confidences from meta
    conf = torch.tensor([[0.95, 0.2, 0.97, 0.1]])
    outcomes = set()
    for seed in range(20):
        v = skip.verify(Proposal(x, None, meta={"confidence": conf}), TargetScores(p.log(), p), torch.Generator().manual_seed(seed))
        outcomes.add((int(v.num_accepted), int(v.extras["skipped"])))
    assert outcomes == {(1, 1), (3, 2)}  # one-hot q: x_1 is accepted w.p. p(x_1) = 0.6, then x_2 skipped, x_3 rejected
    with pytest.raises(ValueError, match="confidence"):
        skip.verify(Proposal(x), TargetScores(p.log(), p))
    with pytest.raises(ValueError, match=r"shape \(1, 4\)"):
        skip.verify(Proposal(x, None, meta={"confidence": conf[:, :2]}), TargetScores(p.log(), p))


# ---------------------------------------------------------------------------------------------------------------
# BPE builder and parameter validation
# ---------------------------------------------------------------------------------------------------------------
def test_bpe_finds_a_frequent_phrase_and_respects_num_merges():
    g = torch.Generator().manual_seed(0)
    corpus = []
    for _ in range(20):
        noise = torch.randint(10, 40, (6,), generator=g).tolist()
        corpus.append(noise[:3] + [5, 6, 7] + noise[3:])  # the phrase 5 6 7 in every sequence
    lib = build_phrase_library(corpus, num_merges=2)
    assert len(lib) == 2 and (5, 6, 7) in lib  # first merge (5, 6), then ((5, 6), 7)
    one = build_phrase_library(corpus, num_merges=1)
    assert one.phrases == ((5, 6),)
    assert len(build_phrase_library(corpus, num_merges=0)) == 0
    many = build_phrase_library(corpus, num_merges=50)
    assert len(many) <= 50 and (5, 6, 7) in many
    assert len(build_phrase_library(corpus, num_merges=5, min_count=21)) == 0  # nothing occurs 21 times
    # merges are non-overlapping, left to right: 1 1 1 1 -> (1 1) (1 1) -> (1 1 1 1)
    assert build_phrase_library([torch.tensor([1, 1, 1, 1])], 3, min_count=1).phrases == ((1, 1), (1, 1, 1, 1))


@pytest.mark.parametrize(
    "name, params, match",
    [
        ("edit-distance", {"tau": -1}, "tau: expected an int >= 0"),
        ("edit-distance", {"tau": 1.5}, "tau: expected an int >= 0"),
        ("edit-distance", {"tau": True}, "tau: expected an int >= 0"),
        ("confidence-skip", {"threshold": 0}, "threshold: expected a number > 0"),
        ("confidence-skip", {"threshold": "high"}, "threshold: expected a number > 0"),
        ("confidence-skip", {"threshold": float("nan")}, "threshold: expected a number > 0"),
    ],
)
def test_parameter_errors(name, params, match):
    with pytest.raises(ValueError, match=match):
        make_verifier(name, **params)


def test_builder_parameter_errors():
    with pytest.raises(ValueError, match="num_merges: expected an int >= 0"):
        build_phrase_library([[1, 2]], -1)
    with pytest.raises(ValueError, match="min_count: expected an int >= 1"):
        build_phrase_library([[1, 2]], 1, min_count=0)


def test_needs_target_probs():
    proposal, scores = random_round(0)
    for name in ("phrase", "confidence-skip"):
        with pytest.raises(ValueError, match="scores.probs"):
            make_verifier(name).verify(proposal, TargetScores(scores.logits))
    make_verifier("edit-distance").verify(proposal, TargetScores(scores.logits))  # logits suffice
