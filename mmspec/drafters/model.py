"""Draft with a smaller Hugging Face model: an independent LM, a text-only LM for a VLM target, or a small VLM."""

from __future__ import annotations

import torch

from ..layout import attention_layout
from ..models import logits_width
from ..runner import ModelRunner
from ..sampling import process_logits, sample
from ..tree import TreeSpec
from ..types import Commit, Proposal
from .base import DRAFTERS, DraftRequest, DraftSession, Drafter, strip_placeholders


class ModelDraftSession(DraftSession):
    carry_valid: torch.Tensor | None = None  # [B, c] bool when rows carry different counts (per-row commits)
    _feed_valid: torch.Tensor | None = None  # [B, c+1] this round's feed validity (None: no holes)

    def __init__(self, model, request: DraftRequest, text_only: bool):
        self.runner = ModelRunner(model, request.vocab_size)
        self.sampling = request.sampling
        self.need_probs = request.need_probs
        ids, mask, kwargs = request.input_ids, request.attention_mask, request.model_kwargs
        if text_only:  # SPD-MLLM: the drafter never sees image tokens
            ids, mask = strip_placeholders(ids, mask, request.placeholder_ids, request.pad_token_id)
            kwargs = {}
        self.runner.prefill(ids.to(self.runner.device), mask.to(self.runner.device), **kwargs)
        self.carry = ids.new_zeros((ids.shape[0], 0))  # [B, c] committed tokens not yet fed to the drafter
        self._feed = self.carry  # [B, c+1] what this round fed before drafting
        self._drafts = self.carry  # [B, k] this round's drafts
        self._k = 0

    @property
    def forwards(self) -> int:
        return self.runner.forwards

    @property
    def forward_seconds(self) -> float:
        return self.runner.forward_seconds

    def propose(self, pending, k, generator=None, stop_below=None) -> Proposal:
        feed = torch.cat([self.carry, pending[:, None]], dim=1)  # [B, c+1]
        valid = None if self.carry_valid is None else torch.cat([self.carry_valid, torch.ones_like(pending[:, None], dtype=torch.bool)], 1)
        self._feed, self._feed_valid, tokens, probs = feed, valid, [], []
        if k == 0:
            self._k = 0
            return Proposal(tokens=pending.new_zeros((pending.shape[0], 0)))
        for i in range(k):
            logits = self.runner.extend(feed, valid=valid if i == 0 else None)[:, -1]  # [B, V]
            if self.sampling.greedy:
                x = logits.argmax(-1)
                top = torch.softmax(logits.float(), -1).amax(-1) if stop_below is not None else None
            else:
                q = process_logits(logits, self.sampling)  # [B, V]
                x = sample(q, generator)
                top = q.amax(-1)
                if self.need_probs:
                    probs.append(q)
            tokens.append(x)
            feed = x[:, None]
            if i + 1 < k and stop_below is not None and bool((top < stop_below).all()):
                break
        self._k = len(tokens)
        self._drafts = torch.stack(tokens, 1)  # [B, k]
        return Proposal(tokens=self._drafts, probs=torch.stack(probs, 1) if probs else None)

    def propose_tree(self, pending, tree: TreeSpec, generator=None) -> Proposal:
        """Expand ``tree`` level by level: each node's children are the top-b tokens of the drafter's distribution
        there (distinct, deterministic: verified with one-hot q). One drafter forward per level but the last."""
        feed = torch.cat([self.carry, pending[:, None]], dim=1)  # [B, c+1]
        self._feed, self._k = feed, tree.depth
        logits = self.runner.extend(feed)[:, -1:]  # [B, 1, V] at x_t
        base, parents = feed.shape[1], tree.parents
        tokens = []
        for depth, level in enumerate(tree.levels):
            width = tree.branching[depth]
            scores = logits if self.sampling.greedy else process_logits(logits, self.sampling)
            children = torch.topk(scores, width, dim=-1).indices.flatten(1)  # [B, nodes at this depth]
            tokens.append(children)
            if depth + 1 < tree.depth:
                block_parents = [base + parents[i] if parents[i] >= 0 else base - 1 for i in level]
                logits = self.runner.extend(children, parents=block_parents)  # [B, nodes, V]
        return Proposal(tokens=torch.cat(tokens, 1), probs=None, parents=parents)

    def accept(self, commit: Commit) -> None:
        """Keep the fed context and the fed accepted drafts d_1..d_min(n_b, k-1) of each row (d_k was never fed); a row
        that accepted all k drafts carries d_k into the next round, the others a hole (none when no row did)."""
        if self._k == 0:  # nothing was fed this round: carry and the old pending token are still owed
            self.carry, self.carry_valid = self._feed, self._feed_valid
            self.runner.commit(0)
            return
        width = self._feed.shape[1]
        if commit.path is not None:  # a tree (lock-step): keep the fed context and the fed nodes of the accepted path
            n = commit.uniform
            ctx = torch.arange(width, device=commit.path.device).expand(commit.path.shape[0], width)
            self.runner.commit(torch.cat([ctx, width + commit.path[:, : min(n, self._k - 1)]], dim=1))
            self.carry, self.carry_valid = commit.emitted[:, self._k - 1 : self._k] if n == self._k else commit.emitted[:, :0], None
            return
        if commit.uniform is not None:  # every row kept the same count: a crop
            n = commit.uniform
            self.runner.commit(width + min(n, self._k - 1))
            self.carry, self.carry_valid = commit.emitted[:, self._k - 1 : self._k] if n == self._k else commit.emitted[:, :0], None
            return
        n = commit.num_accepted.to(self._drafts.device)  # [B]
        self.runner.commit(width + n.clamp_max(self._k - 1))
        all_in = n >= self._k  # [B]
        if bool(all_in.any()):
            self.carry, self.carry_valid = self._drafts[:, -1:], (None if bool(all_in.all()) else all_in[:, None])
        else:
            self.carry, self.carry_valid = self._drafts[:, :0], None


@DRAFTERS.register("model")
class ModelDrafter(Drafter):
    """An independent drafter model sharing the target's vocabulary.

    ``text_only=True`` feeds it the prompt with image-placeholder spans removed and no pixels (SPD-MLLM); use it
    for a text LM drafting for a VLM. A small VLM drafter gets the same processed inputs as the target.
    """

    def __init__(self, model, text_only: bool = False):
        self.model = model.eval()
        self.text_only = text_only
        self.name = "text-only" if text_only else "model"

    def check_compatible(self, target, vocab_size: int) -> None:
        attention_layout(self.model, "drafter")  # a drafter whose cache cannot roll back is refused too
        width = logits_width(self.model)
        if width < vocab_size:
            raise ValueError(
                f"drafter: vocabulary mismatch — the drafter's logits are {width} wide but the target's vocabulary "
                f"has {vocab_size} tokens; drafter and target must share one tokenizer"
            )
        t_dev, d_dev = next(target.parameters()).device, next(self.model.parameters()).device
        if t_dev != d_dev:
            raise ValueError(f"drafter: expected the drafter on the target's device {t_dev}, got {d_dev}")

    def start(self, request: DraftRequest) -> DraftSession:
        return ModelDraftSession(self.model, request, self.text_only)
