"""Prompt-lookup / n-gram drafting: propose what followed the longest (then most recent) earlier match of the
current suffix. Deterministic (no q). Image-placeholder spans never match and are never proposed."""

from __future__ import annotations

import torch

from ..types import Proposal
from .base import DRAFTERS, DraftRequest, DraftSession, Drafter, right_align

_BLOCKED = -1  # stands in for placeholder / padding positions in the history


def lookup(history: torch.Tensor, k: int, max_ngram: int, min_ngram: int) -> torch.Tensor:
    """history [T] (int64, -1 = blocked) -> up to k tokens that followed the best earlier suffix match."""
    t = history.shape[0]
    for n in range(min(max_ngram, t - 1), min_ngram - 1, -1):
        suffix = history[t - n :]
        if bool((suffix == _BLOCKED).any()):
            continue
        windows = history[: t - 1].unfold(0, n, 1) if t - 1 >= n else history[:0].view(0, n)  # [W, n]
        hits = (windows == suffix).all(-1).nonzero().flatten()  # starts of earlier matches
        for start in hits.flip(0).tolist():  # most recent first
            follow = history[start + n : start + n + k]
            blocked = (follow == _BLOCKED).nonzero()
            if len(blocked):
                follow = follow[: int(blocked[0])]
            if len(follow):
                return follow
    return history[:0]


class NgramDraftSession(DraftSession):
    forwards = 0

    def __init__(self, request: DraftRequest, max_ngram: int, min_ngram: int):
        ids = request.input_ids.clone()
        blocked = request.attention_mask == 0
        for pid in request.placeholder_ids:
            blocked |= ids == pid
        self.history = ids.masked_fill(blocked, _BLOCKED)  # [B, T]
        self.pad = request.pad_token_id
        self.max_ngram, self.min_ngram = max_ngram, min_ngram

    def propose(self, pending, k, generator=None, stop_below=None) -> Proposal:
        context = self._context = torch.cat([self.history, pending[:, None]], 1)  # [B, T+1]
        found = [lookup(row, k, self.max_ngram, self.min_ngram) for row in context]
        width = max(len(f) for f in found)
        tokens = pending.new_full((len(found), width), self.pad)  # rows with shorter matches: filler, rejected
        for i, f in enumerate(found):
            tokens[i, : len(f)] = f
        return Proposal(tokens=tokens, probs=None)

    def accept(self, commit) -> None:
        # history gains this round's pending token and each row's accepted drafts (not the new pending token); rows
        # that kept fewer are left-padded with blocked entries (never matched), so every row's history stays contiguous
        if commit.uniform is not None:
            self.history = torch.cat([self._context, commit.emitted[:, : commit.uniform]], 1)
            return
        grown = torch.cat([self._context, commit.emitted], 1)  # [B, T+1 + K+1]
        self.history, _ = right_align(grown, self._context.shape[1] + commit.num_accepted, fill=_BLOCKED)


@DRAFTERS.register("ngram")
class NgramDrafter(Drafter):
    """Prompt lookup decoding over the prompt and everything generated so far."""

    name = "ngram"

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1):
        if min_ngram < 1 or max_ngram < min_ngram:
            raise ValueError(f"max_ngram/min_ngram: expected 1 <= min_ngram <= max_ngram, got {min_ngram}, {max_ngram}")
        self.max_ngram, self.min_ngram = max_ngram, min_ngram

    def start(self, request: DraftRequest) -> DraftSession:
        return NgramDraftSession(request, self.max_ngram, self.min_ngram)
