"""The drafter contract.

A :class:`Drafter` holds what is fixed (models, options). ``start(request)`` opens a per-generation
:class:`DraftSession` that owns all mutable state (its own cache, history, carry-over tokens), so nothing is
stored on the models. Each round the engine calls ``session.propose(pending, k)`` and then
``session.accept(commit)`` with what every row kept (:class:`~mmspec.types.Commit`: per-row counts; in lock-step
every row keeps the same count and ``commit.uniform`` says so), so the session can roll back its own state.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..registry import Registry
from ..sampling import SamplingParams
from ..types import Commit, Proposal


@dataclass
class DraftRequest:
    """What a drafter sees of one generation request (the target's own prefill inputs)."""

    input_ids: torch.Tensor  # [B, T] left-padded prompt ids, image placeholders expanded
    attention_mask: torch.Tensor  # [B, T]
    model_kwargs: dict = field(default_factory=dict)  # pixel_values, image_grid_thw, ...
    placeholder_ids: tuple[int, ...] = ()  # image/video placeholder token ids (excluded by text drafters)
    sampling: SamplingParams = field(default_factory=SamplingParams)
    vocab_size: int = 0  # the shared (unpadded) vocabulary width
    pad_token_id: int = 0
    need_probs: bool = False  # whether proposals must carry q (the verifier uses it)
    target_runner: object = None  # the target's ModelRunner right after its prefill (read-only: for KV reuse)
    num_draft_tokens: int = 0  # K: the most drafts a round will ask for (a Jacobi window's size)


class DraftSession:
    forwards: int = 0  # drafter model forwards so far
    forward_seconds: float = 0.0  # wall time inside them

    def propose(self, pending: torch.Tensor, k: int, generator: torch.Generator | None = None,
                stop_below: float | None = None) -> Proposal:  # fmt: skip
        """Propose up to ``k`` tokens following ``pending [B]`` (the last committed token, not yet scored).

        ``stop_below``: stop drafting early once every row's top draft probability falls below it.
        """
        raise NotImplementedError  # abstract

    def propose_tree(self, pending: torch.Tensor, tree, generator: torch.Generator | None = None) -> Proposal:
        """Propose a token tree shaped like ``tree`` (a TreeSpec) below ``pending``."""
        raise ValueError(f"{type(self).__name__} proposes chains only; drop the `tree` option or use a model drafter")

    def accept(self, commit: Commit) -> None:
        """The round committed ``commit.emitted[b, :commit.num_accepted[b] + 1]`` on row b (accepted drafts, then the
        correction or bonus); ``commit.path`` [B, n] for a tree proposal (the accepted nodes, root first)."""
        raise NotImplementedError  # abstract


class Drafter:
    name: str = "drafter"
    needs_target_features: bool = False  # the engine's target runner records features (EAGLE-style heads)
    needs_target_attention: bool = False  # ... and its verification attention (verifier-attention feedback)
    indexes_target_cache: bool = False  # reads the target's cache by position (STD views): never compact its holes
    proposes_window: bool = False  # a Jacobi window (the target's previous pass): Jacobi verification rules apply

    def start(self, request: DraftRequest) -> DraftSession:
        raise NotImplementedError  # abstract

    def check_compatible(self, target, vocab_size: int) -> None:
        """Raise a clear error if this drafter cannot serve ``target`` (vocabulary, device)."""


DRAFTERS: Registry[type[Drafter]] = Registry("drafter")


def strip_placeholders(input_ids: torch.Tensor, attention_mask: torch.Tensor, placeholder_ids, pad_token_id: int):
    """Remove padding and placeholder spans per row, then left-pad again -> (ids [B, T'], mask [B, T'])."""
    drop = torch.zeros_like(input_ids, dtype=torch.bool)
    for pid in placeholder_ids:
        drop |= input_ids == pid
    keep = (attention_mask.bool()) & ~drop
    rows = [input_ids[i][keep[i]] for i in range(input_ids.shape[0])]
    width = max(1, max(len(r) for r in rows))
    ids = input_ids.new_full((len(rows), width), pad_token_id)
    mask = torch.zeros_like(ids)
    for i, r in enumerate(rows):
        if len(r):
            ids[i, width - len(r) :] = r
            mask[i, width - len(r) :] = 1
    return ids, mask


def right_align(values: torch.Tensor, counts: torch.Tensor, fill=0) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Row b's first ``counts[b]`` entries of ``values [B, L, ...]``, right-aligned in [B, W, ...] with W = max(counts)
    (``fill`` before them) -> (aligned, valid [B, W] bool, or None when every row has W entries)."""
    b = values.shape[0]
    width = int(counts.max()) if b else 0
    slots = torch.arange(width, device=values.device)[None, :]  # [1, W]
    src = slots - (width - counts)[:, None]  # [B, W] source index, negative = padding
    valid = src >= 0
    idx = src.clamp_min(0).view(b, width, *([1] * (values.dim() - 2))).expand(b, width, *values.shape[2:])
    out = values[:, :width].new_full((b, width, *values.shape[2:]), fill) if width else values[:, :0]
    out = torch.where(valid.view(b, width, *([1] * (values.dim() - 2))), values.gather(1, idx), out) if width else out
    return out, (None if bool(valid.all()) else valid)
