"""Target feature injection: an EAGLE-style drafter head (METHODS.md §2; Li et al. 2024, EAGLE, arXiv:2401.15077).

The head is one transformer layer over ``fc([embed(x_{i+1}); f_i])``: ``f_i`` is the target's feature (its final-norm
hidden state, what the LM head reads) at position i, ``x_{i+1}`` the token that followed. It predicts the next
feature ``f^_{i+1}``; the target's own (frozen, shared) LM head turns it into draft logits. While drafting, the head
feeds its own predicted features forward; each round starts again from the target's true features of the tokens the
target just verified, so errors do not accumulate across rounds.

Visual tokens need nothing special: for prompt positions the head reads the target's merged input embeddings (image
or video features in the placeholder slots), recorded during the target's prefill.

Drafting: chains, static trees (any :class:`~mmspec.tree.TreeSpec`), and dynamic trees (``tree_mode="dynamic"``):
confidence-guided width and depth (EAGLE-2 / SAGE style) with a shape shared by the batch: a node gets a child for
every token whose path confidence (product of draft probabilities from the root) reaches ``threshold`` in some row,
at most ``max(tree.branching)`` children per node, ``tree.depth`` levels and ``max_nodes`` nodes.
"""

from __future__ import annotations

import time

import torch

from ..checks import check_int
from ..cache import new_cache
from ..drafting.eagle_head import EagleHead
from ..layout import FULL, AttentionLayout
from ..models import text_config_of
from ..runner import ModelRunner
from ..sampling import process_logits
from ..tree import TreeSpec
from ..types import Proposal
from .base import DRAFTERS, DraftRequest, Drafter, right_align
from .model import ModelDraftSession


class EagleRunner(ModelRunner):
    """A ModelRunner whose "model" is the EAGLE head over the target's embeddings and LM head.

    Each new token's input feature is the head's own output at its parent (the previous token of a chain, or the
    tree parent), unless ``next_features`` is set: then those (the target's true features) are used, once.
    """

    def __init__(self, head: EagleHead, target, vocab_size: int):
        super().__init__(target, vocab_size)
        self.layout = AttentionLayout((FULL,))  # the head's one full-attention layer, whatever the target's layout
        self.mrope = False  # the head has its own 1-D positions over the (feature, token) pairs
        self.head = head
        self.embed = target.get_input_embeddings()
        self.lm_head = target.get_output_embeddings()
        self.next_features: torch.Tensor | None = None  # [B, L, H] for the next extend only
        self.outputs: torch.Tensor | None = None  # [B, pending, H] predicted features of the tentative tokens

    def prefill_pairs(self, token_embeds, features, mask) -> None:
        """Prefill with (f_i, embed(x_{i+1})) pairs of the prompt: token_embeds / features [B, P, H], mask [B, P]."""
        self.cache = new_cache()
        self.mask, self.padded = mask.long(), bool((mask == 0).any())
        self.next_pos = mask.long().sum(-1)  # [B] positions 0..P_real-1 used
        self.pending, self.parents, self.depth, self.outputs = 0, [], [], None
        if mask.shape[1]:
            pos = (mask.long().cumsum(-1) - 1).clamp_min(0)
            t0 = time.perf_counter()
            self.head(token_embeds, features, mask if self.padded else None, pos, self.cache)
            self._counted(t0)

    def _forward(self, input_ids, attention_mask, position_ids, **kwargs):
        length = input_ids.shape[1]
        if self.next_features is not None:
            feats, self.next_features = self.next_features, None
        else:  # the head's own prediction at each new token's parent
            parents = torch.tensor(self.parents[-length:], device=input_ids.device)
            if bool((parents < 0).any()) or self.outputs is None:
                raise ValueError("EagleRunner: a token without a drafted parent needs next_features (target features)")
            feats = self.outputs[:, parents]  # [B, L, H]
        out = self.head(self.embed(input_ids), feats, attention_mask, position_ids, self.cache)  # [B, L, H]
        earlier = self.pending - length
        self.outputs = out if earlier == 0 or self.outputs is None else torch.cat([self.outputs, out], dim=1)
        return self.lm_head(out)

    def commit(self, keep, compact: bool = True) -> None:
        super().commit(keep, compact)
        self.outputs = None


class EagleDraftSession(ModelDraftSession):
    def __init__(self, drafter: "EagleDrafter", request: DraftRequest):
        target = request.target_runner
        if target is None or target.features is None or target.model is not drafter.target:
            raise ValueError("EagleDrafter: needs the engine's target runner with features (keep_features=True)")
        self.drafter, self.target = drafter, target
        self.sampling, self.need_probs = request.sampling, request.need_probs
        self.runner = EagleRunner(drafter.head, drafter.target, request.vocab_size)
        feats, embeds, mask = target.features, target.prompt_embeds, request.attention_mask  # [B, T, H] x2, [B, T]
        self.runner.prefill_pairs(embeds[:, 1:], feats[:, :-1], mask[:, 1:] * mask[:, :-1])
        self.carry_features = feats[:, -1:]  # f of the last prompt token: pairs with the pending token
        self.carry = request.input_ids.new_zeros((request.input_ids.shape[0], 0))  # tokens pairing with carry_features
        self._feed, self._k = self.carry, 0

    def propose(self, pending, k, generator=None, stop_below=None) -> Proposal:
        self.runner.next_features = self.carry_features
        return super().propose(pending, k, generator, stop_below)

    def propose_tree(self, pending, tree: TreeSpec, generator=None) -> Proposal:
        self.runner.next_features = self.carry_features
        if self.drafter.tree_mode == "dynamic":
            return self._dynamic_tree(pending, tree)
        return super().propose_tree(pending, tree, generator)

    def _dynamic_tree(self, pending, tree: TreeSpec) -> Proposal:
        """Confidence-guided tree, one shape for the batch (see the module docstring)."""
        feed = torch.cat([self.carry, pending[:, None]], dim=1)  # [B, c+1]
        self._feed, self._k = feed, 1
        base = feed.shape[1]
        max_width, max_nodes, tau = max(tree.branching), self.drafter.max_nodes, self.drafter.threshold
        logits = self.runner.extend(feed)[:, -1:]  # [B, 1, V] at the pending token
        level_conf = torch.ones(feed.shape[0], 1, device=feed.device)  # [B, nodes in level] path confidence
        level_ids = [-1]  # node index of each level entry (-1 = the pending token)
        tokens, parents = [], []
        for depth in range(tree.depth):
            q = torch.softmax(logits.float(), -1) if self.sampling.greedy else process_logits(logits, self.sampling)
            top_q, top_tok = q.topk(max_width, dim=-1)  # [B, n, w]
            conf = level_conf[..., None] * top_q  # [B, n, w] path confidence of each candidate child
            wanted = (conf >= tau).any(0).sum(-1).tolist()  # [n] children per node (shared by the batch)
            wanted[0] = max(wanted[0], 1) if depth == 0 else wanted[0]  # always draft at least one token
            new_parents, new_tokens, new_conf = [], [], []
            for j, count in enumerate(wanted):
                count = min(count, max_nodes - len(tokens) - len(new_tokens))
                for c in range(max(count, 0)):
                    new_parents.append(level_ids[j])
                    new_tokens.append(top_tok[:, j, c])
                    new_conf.append(conf[:, j, c])
            if not new_tokens:
                break
            first = len(tokens)
            tokens += new_tokens
            parents += new_parents
            self._k = depth + 1
            if depth + 1 == tree.depth or len(tokens) >= max_nodes:
                break
            children = torch.stack(new_tokens, 1)  # [B, n']
            block_parents = [base + p if p >= 0 else base - 1 for p in new_parents]
            logits = self.runner.extend(children, parents=block_parents)  # [B, n', V]
            level_conf = torch.stack(new_conf, 1)
            level_ids = list(range(first, len(tokens)))
        return Proposal(tokens=torch.stack(tokens, 1), probs=None, parents=tuple(parents))

    def accept(self, commit) -> None:
        # keep only the pairs built from the target's true features; drop every drafted entry
        self.runner.commit(self._feed.shape[1] if self._k else 0)
        self.runner.next_features = None
        feats = self.target.features  # the committed tokens' features ([B, K+1, H] + features_valid when per row)
        if self._k == 0:  # nothing was fed: the old carry and pending token are still owed, and x_t now has a feature
            self.carry, self.carry_valid = self._feed, self._feed_valid
            self.carry_features = torch.cat([self.carry_features, feats[:, :1]], dim=1)
            return
        if commit.uniform is not None:
            self.carry_features = feats  # [B, n+1, H]: x_t and the accepted drafts, now verified
            # d_1..d_n pair with f(x_t)..f(d_{n-1}); f(d_n) pairs with the pending token
            self.carry, self.carry_valid = commit.emitted[:, : commit.uniform], None
            return
        n = commit.num_accepted  # [B]: each row's pairs, right-aligned (holes before the shorter rows' pairs)
        self.carry_features, _ = right_align(feats, 1 + n)  # [B, max n + 1, H]
        self.carry, self.carry_valid = right_align(commit.emitted, n)  # [B, max n]


@DRAFTERS.register("eagle")
class EagleDrafter(Drafter):
    """Draft with an :class:`EagleHead` on ``target``'s features (the engine records them for this drafter)."""

    needs_target_features = True

    def __init__(self, target, head: EagleHead, tree_mode: str = "static", threshold: float = 0.1,
                 max_nodes: int = 16):  # fmt: skip
        if tree_mode not in ("static", "dynamic"):
            raise ValueError(f"tree_mode: expected 'static' or 'dynamic', got {tree_mode!r}")
        if not 0 < threshold < 1:
            raise ValueError(f"threshold: expected a path confidence in (0, 1), got {threshold!r}")
        check_int("max_nodes", max_nodes, 1)
        hidden = text_config_of(target).hidden_size
        if head.fc.out_features != hidden:
            raise ValueError(f"head: expected an EagleHead of hidden size {hidden} (the target's), got {head.fc.out_features}")
        self.target, self.head = target.eval(), head.eval()
        self.tree_mode, self.threshold, self.max_nodes = tree_mode, threshold, max_nodes
        self.name = "eagle" if tree_mode == "static" else "eagle-dynamic"

    def check_compatible(self, target, vocab_size: int) -> None:
        if target is not self.target:
            raise ValueError("EagleDrafter: built for a different target model than the engine's")
        t_dev, h_dev = next(target.parameters()).device, next(self.head.parameters()).device
        if t_dev != h_dev:
            raise ValueError(f"head: expected the head on the target's device {t_dev}, got {h_dev}")

    def start(self, request: DraftRequest) -> EagleDraftSession:
        return EagleDraftSession(self, request)
