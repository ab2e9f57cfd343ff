"""The verifier contract, as a mixin every registered verifier's test class inherits (diffusers' scheduler tests
style): verdict shapes and dtypes, accepted lengths in range, seeded determinism, batch independence for
deterministic rules, inputs never mutated, and the exact special cases (draft = target)."""

from __future__ import annotations

import pytest
import torch

from mmspec.types import Proposal, TargetScores, Verdict
from mmspec.verifiers import VERIFIERS, make_verifier

B, K, V = 5, 4, 11


def random_round(seed: int, tree: tuple[int, ...] | None = None, with_q: bool = True):
    """A random proposal and target scores: tokens drawn from q, p an independent softmax."""
    g = torch.Generator().manual_seed(seed)
    parents = tree
    n = len(tree) if tree is not None else K
    q = torch.softmax(2 * torch.randn(B, n, V, generator=g), -1)  # [B, N, V]
    tokens = torch.multinomial(q.flatten(0, 1), 1, generator=g).view(B, n)  # [B, N]
    logits = 2 * torch.randn(B, n + 1, V, generator=g)  # [B, N+1, V]
    return Proposal(tokens, q if with_q else None, parents), TargetScores(logits, torch.softmax(logits, -1))


def agreeing_round(seed: int):
    """The draft is the target's own greedy continuation and q = p: every exact rule accepts everything."""
    g = torch.Generator().manual_seed(seed)
    logits = 3 * torch.randn(B, K + 1, V, generator=g)
    p = torch.softmax(logits, -1)
    return Proposal(logits[:, :K].argmax(-1), p[:, :K].clone()), TargetScores(logits, p)


class VerifierContract:
    """Mixin: subclasses set ``name`` (a registered verifier) and may override ``params``."""

    name: str
    params: dict = {}

    def make(self):
        return make_verifier(self.name, **self.params)

    def test_declares_itself(self):
        v = self.make()
        assert isinstance(type(v).lossless, bool)
        assert isinstance(type(v).supports_trees, bool)  # chain-only rules set False and raise on trees
        assert isinstance(type(v).needs_probs, bool)
        assert type(v).bounds and type(v).paper

    @pytest.mark.parametrize("tree", [None, (-1, -1, 0, 1, 2)], ids=["chain", "tree"])
    def test_verdict_shapes_and_ranges(self, tree):
        proposal, scores = random_round(0, tree)
        if tree is not None and not type(self.make()).supports_trees:  # chain-only rules refuse trees clearly
            with pytest.raises(ValueError, match="tree"):
                self.make().verify(proposal, scores, torch.Generator().manual_seed(0))
            return
        verdict = self.make().verify(proposal, scores, torch.Generator().manual_seed(0))
        assert isinstance(verdict, Verdict)
        assert verdict.num_accepted.shape == (B,) and verdict.num_accepted.dtype == torch.int64
        assert verdict.next_tokens.shape == (B,) and verdict.next_tokens.dtype == torch.int64
        depth = K if tree is None else 3
        assert bool(((verdict.num_accepted >= 0) & (verdict.num_accepted <= depth)).all())
        assert bool(((verdict.next_tokens >= 0) & (verdict.next_tokens < V)).all())
        if tree is not None:
            assert verdict.path is not None and verdict.path.shape[0] == B
            for row in range(B):  # the path is a root-down chain of nodes of the accepted length
                path = [int(i) for i in verdict.path[row] if i >= 0]
                assert len(path) == int(verdict.num_accepted[row])
                assert all(tree[c] == (path[j - 1] if j else -1) for j, c in enumerate(path))

    def test_seeded_determinism(self):
        proposal, scores = random_round(1)
        a = self.make().verify(proposal, scores, torch.Generator().manual_seed(7))
        b = self.make().verify(proposal, scores, torch.Generator().manual_seed(7))
        assert torch.equal(a.num_accepted, b.num_accepted) and torch.equal(a.next_tokens, b.next_tokens)

    @pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64], ids=str)
    def test_low_and_high_precision_inputs(self, dtype):
        """Scores and draft distributions in half / bfloat16 / double: same contract, int64 verdicts."""
        proposal, scores = random_round(6)
        proposal = Proposal(proposal.tokens, proposal.probs.to(dtype), proposal.parents, proposal.meta)
        scores = TargetScores(scores.logits.to(dtype), scores.probs.to(dtype))
        verdict = self.make().verify(proposal, scores, torch.Generator().manual_seed(0))
        assert verdict.num_accepted.dtype == torch.int64 and verdict.next_tokens.dtype == torch.int64
        assert bool(((verdict.num_accepted >= 0) & (verdict.num_accepted <= K)).all())
        assert bool(((verdict.next_tokens >= 0) & (verdict.next_tokens < V)).all())

    def test_inputs_not_mutated(self):
        proposal, scores = random_round(2)
        before = [t.clone() for t in (proposal.tokens, proposal.probs, scores.logits, scores.probs)]
        self.make().verify(proposal, scores, torch.Generator().manual_seed(0))
        for old, new in zip(before, (proposal.tokens, proposal.probs, scores.logits, scores.probs)):
            assert torch.equal(old, new)

    def test_batch_rows_independent(self):
        """Changing row 0's inputs never changes another row's verdict (same generator seed: random draws are made
        by shape, so every other row sees the same randomness)."""
        proposal, scores = random_round(3)
        other_p, other_s = random_round(30)
        whole = self.make().verify(proposal, scores, torch.Generator().manual_seed(5))
        tokens, probs = proposal.tokens.clone(), proposal.probs.clone()
        logits, p = scores.logits.clone(), scores.probs.clone()
        tokens[0], probs[0], logits[0], p[0] = other_p.tokens[0], other_p.probs[0], other_s.logits[0], other_s.probs[0]
        changed = self.make().verify(Proposal(tokens, probs, proposal.parents, proposal.meta), TargetScores(logits, p),
                                     torch.Generator().manual_seed(5))  # fmt: skip
        assert torch.equal(whole.num_accepted[1:], changed.num_accepted[1:])
        assert torch.equal(whole.next_tokens[1:], changed.next_tokens[1:])

    def test_accepts_everything_when_draft_is_target(self):
        proposal, scores = agreeing_round(4)
        verdict = self.make().verify(proposal, scores, torch.Generator().manual_seed(0))
        assert bool((verdict.num_accepted == K).all()), verdict.num_accepted  # relaxed rules only accept more

    @pytest.mark.gpu
    def test_runs_on_cuda(self):
        if not torch.cuda.is_available():
            pytest.skip("no CUDA device")
        proposal, scores = random_round(5)
        dev = torch.device("cuda")
        proposal = Proposal(proposal.tokens.to(dev), proposal.probs.to(dev))
        scores = TargetScores(scores.logits.to(dev), scores.probs.to(dev))
        verdict = self.make().verify(proposal, scores, torch.Generator(device=dev).manual_seed(0))
        assert verdict.num_accepted.device.type == "cuda" and verdict.next_tokens.device.type == "cuda"


class TestGreedy(VerifierContract):
    name = "greedy"


class TestSpeculative(VerifierContract):
    name = "speculative"


class TestDeterministicDraft(VerifierContract):
    name = "deterministic"

    def test_accepts_everything_when_draft_is_target(self):
        """q = one-hot: a draft token is accepted with probability p(x); p one-hot on the draft accepts all."""
        proposal, scores = agreeing_round(4)
        sharp = 1e4 * torch.nn.functional.one_hot(scores.logits.argmax(-1), V).float()
        verdict = self.make().verify(proposal, TargetScores(sharp, torch.softmax(sharp, -1)), torch.Generator().manual_seed(0))
        assert bool((verdict.num_accepted == K).all())


class TestMultiDraft(VerifierContract):
    name = "multi-draft"


def _contract_classes():
    """Every test class, in any tests/test_verifier*.py module, that inherits a ``*Contract`` mixin."""
    import importlib
    import inspect
    from pathlib import Path

    found = []
    for path in sorted(Path(__file__).parent.glob("test_verifier*.py")):
        module = importlib.import_module(f"tests.{path.stem}")
        for _, cls in inspect.getmembers(module, inspect.isclass):
            mixins = [c for c in cls.__mro__[1:] if c.__name__.endswith("Contract")]
            if mixins and not cls.__name__.endswith("Contract") and getattr(cls, "name", None):
                found.append(cls)
    return found


def test_every_registered_rule_has_a_contract_test():
    tested = {cls.name for cls in _contract_classes()}
    builtin = {n for n in VERIFIERS.names() if not n.startswith("test-")}
    assert builtin <= tested, f"verifiers without contract tests: {sorted(builtin - tested)}"


def test_unknown_verifier_is_a_clear_error():
    with pytest.raises(KeyError, match="registered"):
        make_verifier("no-such-rule")


@pytest.mark.parametrize("case", __import__("mmspec.verifiers.exact", fromlist=["bench_cases"]).bench_cases(4, 3, 40, 1),
                         ids=lambda c: c.name)  # fmt: skip
def test_exact_rules_equal_their_reference_loops(case):
    fast, slow = case.vectorised(), case.reference()
    assert torch.equal(fast.num_accepted, slow.num_accepted) and torch.equal(fast.next_tokens, slow.next_tokens)
