"""Data contracts of the propose -> score -> verify -> commit loop. B = batch rows, K = draft length, V = vocab."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class LayerReuse:
    """Verification inputs an early-exit draft already computed in the target's own cache: the target runs only its
    layers from ``layer`` up, on ``hidden`` (see :meth:`mmspec.runner.ModelRunner.extend`)."""

    layer: int  # first layer the target still has to run
    hidden: torch.Tensor  # [B, L, H] the tokens' hidden states entering that layer


@dataclass
class Proposal:
    """What a drafter proposes for one round. The loop reads the typed fields; ``meta`` carries rule-specific inputs
    only (e.g. the confidence-skip rule's ``confidence`` [B, K], the action rule's ``tolerance`` [B]), never read by
    the loop itself."""

    tokens: torch.Tensor  # [B, K] int64 draft tokens (K may be 0); a tree: K nodes in BFS order
    probs: torch.Tensor | None = None  # [B, K, V] q each token was drawn from, or None (deterministic draft)
    parents: tuple[int, ...] | None = None  # tree only: parent node per token, -1 = the pending token x_t
    meta: dict = field(default_factory=dict)  # rule-specific inputs (see above)
    # [B] int64 index of the pending token x_t among each row's generated tokens (0 = the first; -1 = before it, when
    # the first token itself is sampled by the rule); drafts sit at pending_position + 1 .. + K. Filled in by the loop
    # (position-keyed rules: Gumbel noise); None = -1 for every row
    pending_position: torch.Tensor | None = None
    noise_keys: torch.Tensor | None = None  # [B] int64 per-row key of position-keyed noise (default arange(B))
    layer_reuse: LayerReuse | None = None  # early exit in the target's cache: verification runs the upper layers only

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
class Window:
    """A Jacobi window: the next round's drafts and the proposal distribution each was drawn from."""

    tokens: torch.Tensor  # [B, K] int64
    probs: torch.Tensor  # [B, K, V]


@dataclass
class Verdict:
    """A verifier's decision, per row. ``extras`` carries rule-specific diagnostics only (skip counts, distances, ...),
    never read by the loop."""

    num_accepted: torch.Tensor  # [B] int64, 0..K: accepted draft prefix length (tree: accepted path length)
    next_tokens: torch.Tensor  # [B] int64: correction token at position num_accepted (bonus if all accepted)
    path: torch.Tensor | None = None  # [B, depth] tree only: accepted node indices root-down, -1 padded
    # Jacobi rules: the next window, already shifted by each row's commit (its sampling is coupled with this round's)
    next_window: Window | None = None
    extras: dict = field(default_factory=dict)  # rule-specific diagnostics (see above)


@dataclass
class Commit:
    """What one round committed, as the engine tells the drafter session (:meth:`DraftSession.accept`): row b keeps
    its first ``num_accepted[b]`` drafts and then ``emitted[b, num_accepted[b]]`` (the correction or bonus token, the
    row's new pending token)."""

    num_accepted: torch.Tensor  # [B] int64 drafts each row keeps (finished rows: 0)
    emitted: torch.Tensor  # [B, K+1] int64: row b's committed tokens are emitted[b, :num_accepted[b] + 1]
    uniform: int | None = None  # the common count when every row keeps the same number (lock-step), else None
    path: torch.Tensor | None = None  # [B, n] tree only: the accepted nodes, root first (lock-step)
    verdict: Verdict | None = None  # this round's verdict (Jacobi windows read its next_window)
    scores: TargetScores | None = None  # this round's target scores (Jacobi windows resample from p)


@dataclass
class RoundStats:
    draft_len: int  # K proposed this round
    accepted: list[int]  # per row: draft tokens accepted by the verifier
    committed: float  # tokens committed per row this round (bonus/correction included): the same on every row when
    # rows commit aligned, the mean over the rows still running when they commit independently
    draft_forwards: int
    draft_seconds: float
    verify_seconds: float
    overhead_seconds: float = 0.0  # the round's wall time outside model calls: the loop's own work


class Stats:
    """The vocabulary every output's statistics share (Spec-Bench terms), whatever the modality:

    - ``num_rounds``: verification rounds (diffusion: sequential batched target calls);
    - ``target_forwards``: sequential target calls, the prefill included (diffusion: the rounds);
    - ``mean_accepted_tokens``: units committed per row per round, the bonus / correction included (tokens; diffusion:
      sampler steps); plain decoding = 1.00;
    - ``compression``: units per target call a row needed, averaged over rows (plain = 1.00; image tokens per call of
      an image, sampler steps per call of a sample); ``batch_compression``: the same for the batch, which runs until
      its slowest row is done;
    - ``total_seconds``: wall time.

    Each statistics class defines these (fields or properties); this base gives them one ``summary()``.
    """

    def summary(self) -> dict:
        return {"rounds": self.num_rounds, "target_forwards": self.target_forwards,
                "mean_accepted_tokens": round(self.mean_accepted_tokens, 3), "compression": round(self.compression, 3),
                "batch_compression": round(self.batch_compression, 3), "total_seconds": round(self.total_seconds, 4)}  # fmt: skip


@dataclass
class SpecStats(Stats):
    """Statistics of one token generation (see :class:`Stats`); ``rounds`` holds each verification round."""

    rounds: list[RoundStats] = field(default_factory=list)
    target_forwards: int = 0  # including the prefill
    draft_forwards: int = 0
    prefill_seconds: float = 0.0  # target prefill + drafter set-up (time to the first token)
    draft_prefill_seconds: float = 0.0  # the drafter's set-up alone (its prefill, compression, KV views)
    total_seconds: float = 0.0
    new_tokens: int = 0  # tokens generated per row (max over rows, before EOS trimming)
    row_forwards: list[int] = field(default_factory=list)  # per row, the target forwards it took part in (prefill
    # included); empty = every row needed target_forwards
    row_tokens: list[int] = field(default_factory=list)  # per row, tokens generated (empty = new_tokens each)

    @property
    def num_rounds(self) -> int:
        return len(self.rounds)

    @property
    def mean_accepted_tokens(self) -> float:
        """Committed tokens per target verification forward (plain decoding = 1.00)."""
        if not self.rounds:
            return 1.0
        return sum(r.committed for r in self.rounds) / len(self.rounds)

    @property
    def overhead_per_round(self) -> float:
        """Mean seconds per round spent outside model forwards (masks, positions, verification, commits, drafting
        logic): the loop's own cost."""
        return sum(r.overhead_seconds for r in self.rounds) / len(self.rounds) if self.rounds else 0.0

    @property
    def acceptance_rate(self) -> float:
        proposed = sum(r.draft_len for r in self.rounds)
        return sum(r.committed - 1 for r in self.rounds) / proposed if proposed else 0.0

    @property
    def compression(self) -> float:
        forwards = self.row_forwards or [self.target_forwards]
        tokens = self.row_tokens or [self.new_tokens] * len(forwards)
        return sum(tokens) / max(1, sum(forwards))

    @property
    def batch_compression(self) -> float:
        return max(self.row_tokens or [self.new_tokens]) / max(1, self.target_forwards)

    def summary(self) -> dict:
        return {**super().summary(), "draft_forwards": self.draft_forwards, "acceptance_rate": round(self.acceptance_rate, 3),
                "overhead_ms_per_round": round(1000 * self.overhead_per_round, 3),
                "new_tokens": self.new_tokens, "prefill_seconds": round(self.prefill_seconds, 4),
                "draft_prefill_seconds": round(self.draft_prefill_seconds, 4)}  # fmt: skip


@dataclass
class GenerationOutput:
    sequences: torch.Tensor  # [B, T_prompt + T_new] prompt ids (as given) followed by generated ids, pad after EOS
    new_tokens: torch.Tensor  # [B, T_new]
    stats: SpecStats
