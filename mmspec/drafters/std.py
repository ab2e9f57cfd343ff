"""STD, sparse-to-dense self-speculation for video/image LMs (METHODS.md §2): the target drafts attending only to
the top-``keep`` visual KV entries per layer, chosen from the prefill attention of the prompt's last text tokens, and
verifies densely. No second model and no second prefill: the draft reads a sparse view of the target's own cache.

Each round the session appends the target's newly committed (dense, exact) KV entries to its sparse view, drafts
K tokens after the pending token with sparse attention, and drops the drafted entries again: the dense KV of the
accepted tokens arrives with the next round's append. Draft cost per token = one target forward over
``T - N + keep`` cached entries instead of ``T``; worthwhile when visual tokens dominate the context (long clips).
"""

from __future__ import annotations

import torch

from ..checks import check_int
from ..drafting.kv_sharing import layer_visual_scores, sparse_kv_index, visual_mask
from ..runner import ModelRunner
from .base import DRAFTERS, DraftRequest, Drafter
from .model import ModelDraftSession


class STDDraftSession(ModelDraftSession):
    def __init__(self, drafter: "STDDrafter", request: DraftRequest):
        target = request.target_runner
        if target is None or target.model is not drafter.target:
            raise ValueError("STDDrafter: needs the engine's target runner (it drafts from the target's own cache)")
        self.target = target
        self.sampling, self.need_probs = request.sampling, request.need_probs
        visual = visual_mask(request.input_ids, request.attention_mask, request.placeholder_ids)
        scores = layer_visual_scores(target, request.input_ids, request.attention_mask, visual, request.model_kwargs,
                                     rows=drafter.query_rows)  # [L, B, N]  # fmt: skip
        self.runner = ModelRunner(drafter.target, request.vocab_size)
        self.keep, self.feedback, self.visual = drafter.keep, drafter.feedback, visual  # visual [B, T_prompt]
        self.runner.prefill_from(target, index=sparse_kv_index(visual, scores, drafter.keep))
        self.runner.forwards = 1  # the scoring pass
        self.synced = target.length  # target cache entries already in the sparse view
        self.visual_tokens = drafter.keep
        self.carry = request.input_ids.new_zeros((request.input_ids.shape[0], 0))  # always empty: see accept
        self._feed, self._k = self.carry, 0

    def _sync(self) -> None:
        """Bring in the dense KV of every token the target committed since the last round."""
        self.runner.append_from(self.target, self.synced)
        self.synced = self.target.length

    def propose(self, pending, k, generator=None, stop_below=None):
        self._sync()
        return super().propose(pending, k, generator, stop_below)

    def propose_tree(self, pending, tree, generator=None):
        self._sync()
        return super().propose_tree(pending, tree, generator)

    def accept(self, commit) -> None:
        # drop the sparse draft entries; the target's dense ones (per-row holes included, masked) come with the next sync
        self.runner.commit(0)
        if self.feedback and self.target.attention is not None:
            # verifier-attention feedback: this round's verification attention over the visual entries picks the
            # visual KV the next round's drafts read (per layer); the view is rebuilt from the target's cache
            b, t = self.visual.shape
            n = int(self.visual[0].sum())
            scores = self.target.attention[:, :, :t][:, self.visual].view(-1, b, n)  # [L, B, N]
            visual = torch.nn.functional.pad(self.visual, (0, self.target.length - t))  # [B, S] committed
            self.runner.prefill_from(self.target, index=sparse_kv_index(visual, scores, self.keep))
            self.synced = self.target.length


@DRAFTERS.register("std")
class STDDrafter(Drafter):
    """Sparse-to-dense self-drafting: the target with ``keep`` visual KV entries per layer drafts, the full target
    verifies. ``query_rows``: how many of the prompt's last text tokens rank the visual tokens. ``feedback``: after
    every round, re-rank the visual entries by the verification pass's own attention (verifier-attention feedback;
    verification then runs with eager attention to expose the weights)."""

    def __init__(self, target, keep: int = 16, query_rows: int = 8, feedback: bool = False):
        check_int("keep", keep, 1, note=" (visual KV entries kept per layer)")
        check_int("query_rows", query_rows, 1)
        self.target, self.keep, self.query_rows, self.feedback = target.eval(), keep, query_rows, bool(feedback)
        self.needs_target_attention = self.feedback  # the engine records the verifier's attention for us
        self.indexes_target_cache = True  # the view appends the target's entries by cache position
        self.name = f"std[{keep}]" + ("+feedback" if feedback else "")

    def check_compatible(self, target, vocab_size: int) -> None:
        if target is not self.target:
            raise ValueError("STDDrafter: built for a different target model than the engine's")

    def start(self, request: DraftRequest) -> STDDraftSession:
        return STDDraftSession(self, request)
