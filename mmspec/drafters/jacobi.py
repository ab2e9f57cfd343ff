"""The Jacobi window as a drafter (SJD, MC-SJD, Gumbel-SJD; METHODS.md §4): the target's own previous pass drafts.

A session holds, per row, a window of K draft slots after the pending token with the proposal distribution each
slot was drawn from. The first window is fresh (``init`` "random": uniform tokens; "repeat": copies of the pending
token, a spatial prior), with one-hot proposals. After each round the next window is either the verifier's own
(the Jacobi rules sample it coupled with their acceptance test: :attr:`Verdict.next_window`), or, for rules that do
not make one (LANTERN, GSD on Jacobi drafts), SJD's re-initialisation from this pass's target distributions: the
carried slots take fresh samples of p (proposal p), the rest are fresh (one-hot). Any draft drawn from a known law
independent of the next acceptance test is valid, which is all speculative sampling needs.

The window is resampled lazily, at the next :meth:`propose` (which has the generator): the loop draws nothing in
between, so the randomness is consumed in the same order as drawing it right after the verification.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..types import Commit, Proposal
from ..window import FRESH_INIT, check_init, race, shift_window
from .base import DRAFTERS, DraftRequest, DraftSession, Drafter


def initial_window(init: str, pending: torch.Tensor, k: int, vocab: int, generator=None) -> tuple:
    """The first window after the pending tokens ``pending [B]``: K fresh slots with one-hot proposals.

    ``init`` "random": uniform tokens; "repeat": copies of the pending token (spatial prior: the left neighbour).
    -> (tokens [B, K] int64, probs [B, K, V])."""
    check_init(init)
    b = pending.shape[0]
    if init == "random":
        tokens = FRESH_INIT["random"](b, k, vocab, pending.device, generator)  # [B, K]
    else:
        tokens = pending[:, None].expand(b, k).clone()  # [B, K]
    return tokens, F.one_hot(tokens, vocab).float()


def resample_window(p: torch.Tensor, n: torch.Tensor, init: str, generator=None) -> tuple:
    """SJD's re-initialisation as a window: after committing ``n [B]`` drafts plus one token, the next window's
    carried slots take fresh samples of this pass's ``p [B, K+1, V]`` (proposal p), the rest are fresh (one-hot).
    -> (tokens [B, K], probs [B, K, V])."""
    b, big_l, v = p.shape
    e = torch.empty(p.shape, dtype=torch.float32, device=p.device).exponential_(generator=generator)  # [B, L, V]
    fresh = FRESH_INIT[check_init(init)](b, big_l - 1, v, p.device, generator)  # [B, K] | None
    return shift_window(race(p, e), p, n, fresh)


class JacobiSession(DraftSession):
    forwards = 0  # the target drafts for itself: no drafter forwards

    def __init__(self, request: DraftRequest, init: str):
        if request.num_draft_tokens < 1:
            raise ValueError(f"num_draft_tokens: the Jacobi window needs K >= 1 slots, got {request.num_draft_tokens}")
        self.init, self.vocab, self.size = init, request.vocab_size, request.num_draft_tokens
        self.tokens: torch.Tensor | None = None  # [B, K'] the window's drafts
        self.probs: torch.Tensor | None = None  # [B, K', V] their proposals
        self._resample: tuple | None = None  # (p [B, K+1, V], n [B]): the window to draw at the next propose

    def propose(self, pending, k, generator=None, stop_below=None) -> Proposal:
        if self.tokens is None:
            self.tokens, self.probs = initial_window(self.init, pending, self.size, self.vocab, generator)
        elif self._resample is not None:
            self.tokens, self.probs = resample_window(*self._resample, self.init, generator)
        self._resample = None
        return Proposal(tokens=self.tokens[:, :k], probs=self.probs[:, :k])

    def accept(self, commit: Commit) -> None:
        window = commit.verdict.next_window if commit.verdict is not None else None
        if window is not None:  # the rule's own next window (coupled with its acceptance test), already shifted
            self.tokens, self.probs = window.tokens, window.probs
        else:
            self._resample = (commit.scores.probs, commit.num_accepted)


@DRAFTERS.register("jacobi")
class JacobiDrafter(Drafter):
    """Speculative Jacobi decoding's draft: the target's previous pass over a window of ``num_draft_tokens`` slots.
    ``init``: how fresh slots are filled, "random" (uniform) or "repeat" (the left neighbour)."""

    name = "jacobi"
    proposes_window = True

    def __init__(self, init: str = "random"):
        self.init = check_init(init)

    def start(self, request: DraftRequest) -> JacobiSession:
        return JacobiSession(request, self.init)
