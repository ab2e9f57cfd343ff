"""Draft-length policies: how many tokens to draft next round. Registered by name (SpecConfig.draft_length_policy)."""

from __future__ import annotations

from .registry import Registry


class DraftLengthPolicy:
    """``next_k()`` before a round; ``update(k, accepted)`` after it. ``stop_below`` asks the drafter to stop early
    once its top probability falls below it (None: never)."""

    stop_below: float | None = None
    adaptive: bool = False  # whether update() uses the accepted count (the loop then reads it back every round)

    def __init__(self, k: int, max_k: int):
        self.k, self.max_k = k, max_k

    def next_k(self) -> int:
        return self.k

    def update(self, k: int, accepted: int) -> None:
        pass


POLICIES: Registry[type[DraftLengthPolicy]] = Registry("draft length policy")


@POLICIES.register("constant")
class ConstantLength(DraftLengthPolicy):
    """Always K tokens."""


@POLICIES.register("heuristic")
class HeuristicLength(DraftLengthPolicy):
    """Hugging Face's assisted-generation heuristic: +2 after a fully accepted draft, -1 otherwise (min 1)."""

    adaptive = True

    def update(self, k: int, accepted: int) -> None:
        if k == 0:
            return
        self.k = min(self.max_k, self.k + 2) if accepted == k else max(1, self.k - 1)


@POLICIES.register("confidence")
class ConfidenceLength(DraftLengthPolicy):
    """Draft up to ``max_k`` tokens, stopping when the drafter's top probability drops below ``threshold``."""

    def __init__(self, k: int, max_k: int, threshold: float = 0.4):
        super().__init__(max_k, max_k)
        if not 0 < threshold < 1:
            raise ValueError(f"threshold: expected a probability in (0, 1), got {threshold!r}")
        self.stop_below = threshold
