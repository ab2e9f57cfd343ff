"""The verifier contract: a small object with a pure ``verify(...) -> Verdict`` and a declared ``lossless`` flag."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, ClassVar

import torch

from ..kernels.chain import first_rejection  # noqa: F401  (the rules' shared helper)
from ..registry import Registry
from ..types import Proposal, TargetScores, Verdict


DOMAINS = {  # what a verifier's proposals are, and which loop runs it
    "token": "token drafts (SpeculativeEngine, any drafter)",
    "jacobi": "Jacobi windows (SpeculativeEngine with a JacobiDrafter: the verdict also gives the next window)",
    "continuous": "continuous states (DiffusionSpeculator)",
}


class Verifier:
    """Base class. Subclasses set ``lossless`` and ``needs_probs`` and implement :meth:`verify`.

    ``verify`` must be pure (inputs are never mutated), batched over rows, vectorised over positions and the
    vocabulary, and work on any device.
    """

    lossless: ClassVar[bool]
    needs_probs: ClassVar[bool] = True  # whether TargetScores.probs must be filled in
    supports_trees: ClassVar[bool] = False  # whether token trees (Proposal.parents) are verified; else chains only
    bounds: ClassVar[str] = "exact: output law equals the target's"
    paper: ClassVar[str] = ""
    domain: ClassVar[str] = "token"  # a key of DOMAINS: what it verifies
    samples_first_token: ClassVar[bool] = False  # the loop asks the rule for the first token too (else: plain sampling)

    def verify(self, proposal: Proposal, scores: TargetScores, generator: torch.Generator | None = None) -> Verdict:
        raise NotImplementedError  # abstract; every registered verifier overrides it


VERIFIERS: Registry[type[Verifier]] = Registry("verifier")


def reference_chain(b: int, k: int, accept: Callable[[int, int], bool], stop: Callable[[int, int], int]) -> Verdict:
    """The per-row, per-position reference loop of a chain rule (test oracles, the ``bench verifiers`` baseline):
    row r accepts drafts while ``accept(r, i)``; ``stop(r, n)`` is its token at the first rejection n (or the bonus)."""
    n_out = [next((i for i in range(k) if not accept(r, i)), k) for r in range(b)]
    return Verdict(torch.tensor(n_out), torch.tensor([stop(r, n) for r, n in enumerate(n_out)]))


def check_verifier(name, domains: tuple[str, ...], where: str) -> type[Verifier]:
    """The registered verifier class ``name`` if its domain is one of ``domains``; else a clear error naming the
    verifiers valid ``where``."""
    valid = [n for n in VERIFIERS.names() if VERIFIERS.get(n).domain in domains and not n.startswith("test-")]
    if not isinstance(name, str) or name not in VERIFIERS:
        raise ValueError(f"verifier: expected one of {valid} ({where}), got {name!r}")
    cls = VERIFIERS.get(name)
    if cls.domain not in domains:
        raise ValueError(f"verifier: {name!r} verifies {DOMAINS[cls.domain]}, not {where}; expected one of {valid}")
    return cls


def make_verifier(name: str, **params) -> Verifier:
    """Build a registered verifier by name, e.g. ``make_verifier("speculative")``."""
    cls = VERIFIERS.get(name)
    try:
        return cls(**params)
    except TypeError as e:
        raise TypeError(f"verifier {name!r}: bad parameters {params}: {e}") from None


def require_chain(proposal: Proposal, rule: str) -> None:
    if proposal.is_tree:
        raise ValueError(f"proposal: the {rule!r} verifier takes token chains, got a token tree (tree=...)")


def require_probs(scores: TargetScores, rule: str) -> torch.Tensor:
    if scores.probs is None:
        raise ValueError(f"scores.probs: the {rule!r} verifier needs the processed target distributions, got None")
    return scores.probs


@dataclass
class BenchCase:
    """One row of ``mmspec bench verifiers``: the vectorised rule and its per-position reference loop, both
    closed over the same inputs (and the same pre-drawn randomness) so they compute the same thing."""

    name: str  # registered verifier name (plus a mode, e.g. "lantern (lambda)")
    vectorised: Callable[[], object]
    reference: Callable[[], object]


def verifier_table() -> str:
    """A markdown table of every registered verifier: name, lossless, what it bounds, parameters, paper."""
    import inspect

    lines = ["| verifier | lossless | trees | what it guarantees | parameters | paper |", "|---|---|---|---|---|---|"]
    for name in VERIFIERS.names():
        if name.startswith("test-"):
            continue
        cls = VERIFIERS.get(name)
        params = [
            f"`{p.name}={p.default!r}`" if p.default is not inspect.Parameter.empty else f"`{p.name}`"
            for p in list(inspect.signature(cls.__init__).parameters.values())[1:]
            if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        ]  # fmt: skip
        lines.append(f"| `{name}` | {'yes' if cls.lossless else 'no'} | {'yes' if cls.supports_trees else 'no'} | "
                     f"{cls.bounds} | {', '.join(params) or '—'} | {cls.paper} |")  # fmt: skip
    return "\n".join(lines)
