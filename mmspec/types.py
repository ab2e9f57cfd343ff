"""Data contracts of the propose -> score -> verify -> commit loop. B = batch rows, K = draft length, V = vocab."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class Proposal:
    """What a drafter proposes for one round."""

    tokens: torch.Tensor  # [B, K] int64 draft tokens (K may be 0); a tree: K nodes in BFS order
    probs: torch.Tensor | None = None  # [B, K, V] q each token was drawn from, or None (deterministic draft)
    parents: tuple[int, ...] | None = None  # tree only: parent node per token, -1 = the pending token x_t
    meta: dict = field(default_factory=dict)  # rule-specific inputs, e.g. {"positions": [B, K] absolute positions}

    @property
    def k(self) -> int:
        return self.tokens.shape[1]

    @property
    def is_tree(self) -> bool:
        return self.parents is not None


@dataclass
class TargetScores:
    """The target's scores over [pending token, d_1..d_K]: position i scores draft i+1 (position K: the bonus).

    For a tree, position 0 is x_t and position i+1 is node i: it scores node i's children (or the bonus)."""

    logits: torch.Tensor  # [B, K+1, V] raw logits (vocabulary tail already masked)
    probs: torch.Tensor | None = None  # [B, K+1, V] processed target distributions p (None for greedy verifiers)


@dataclass
class Verdict:
    """A verifier's decision, per row."""

    num_accepted: torch.Tensor  # [B] int64, 0..K: accepted draft prefix length (tree: accepted path length)
    next_tokens: torch.Tensor  # [B] int64: correction token at position num_accepted (bonus if all accepted)
    path: torch.Tensor | None = None  # [B, depth] tree only: accepted node indices root-down, -1 padded
    extras: dict = field(default_factory=dict)  # rule-specific outputs (Jacobi's next window, skip counts, ...)


@dataclass
class RoundStats:
    draft_len: int  # K proposed this round
    accepted: list[int]  # per row: draft tokens accepted by the verifier
    committed: float  # tokens committed per row this round (bonus/correction included): the same on every row when
    # rows commit aligned, the mean over the rows still running when they commit independently
    draft_forwards: int
    draft_seconds: float
    verify_seconds: float


@dataclass
class SpecStats:
    """Statistics of one speculative generation; mean_accepted_tokens follows Spec-Bench (bonus counted)."""

    rounds: list[RoundStats] = field(default_factory=list)
    target_forwards: int = 0  # including the prefill
    draft_forwards: int = 0
    prefill_seconds: float = 0.0  # target prefill + drafter set-up (time to the first token)
    draft_prefill_seconds: float = 0.0  # the drafter's set-up alone (its prefill, compression, KV views)
    total_seconds: float = 0.0
    new_tokens: int = 0  # tokens generated per row (max over rows, before EOS trimming)
    row_forwards: list[int] = field(default_factory=list)  # per row, target forwards it needed when rows advance
    # independently (Jacobi loop; prefill included); empty = every row needed target_forwards

    @property
    def mean_accepted_tokens(self) -> float:
        """Committed tokens per target verification forward (plain decoding = 1.00)."""
        if not self.rounds:
            return 1.0
        return sum(r.committed for r in self.rounds) / len(self.rounds)

    @property
    def acceptance_rate(self) -> float:
        proposed = sum(r.draft_len for r in self.rounds)
        return sum(r.committed - 1 for r in self.rounds) / proposed if proposed else 0.0

    def summary(self) -> dict:
        return {
            "rounds": len(self.rounds),
            "target_forwards": self.target_forwards,
            "draft_forwards": self.draft_forwards,
            "mean_accepted_tokens": round(self.mean_accepted_tokens, 3),
            "acceptance_rate": round(self.acceptance_rate, 3),
            "new_tokens": self.new_tokens,
            "prefill_seconds": round(self.prefill_seconds, 4),
            "draft_prefill_seconds": round(self.draft_prefill_seconds, 4),
            "total_seconds": round(self.total_seconds, 4),
        }


@dataclass
class GenerationOutput:
    sequences: torch.Tensor  # [B, T_prompt + T_new] prompt ids (as given) followed by generated ids, pad after EOS
    new_tokens: torch.Tensor  # [B, T_new]
    stats: SpecStats
