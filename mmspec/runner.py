"""ModelRunner: one Hugging Face causal model, its KV cache and per-row positions, kept in step.

The engine never calls a model directly. A runner

- prefills a (left-padded) prompt, computing position ids itself: ``cumsum(mask) - 1`` for ordinary models,
  the model's own ``get_rope_index`` for M-RoPE models (Qwen2-VL family) — so no rope state lives on the model;
- ``extend``s the cache with new tokens (a chain) and returns their logits, tentatively;
- ``commit``s the first ``keep`` tentative tokens and crops the rest (KV rollback), advancing positions and the
  attention mask by exactly what was kept.

Tentative tokens may form a tree: ``extend(tokens, parents)`` gives each new token a parent among the tentative
tokens (or -1: the committed context); the runner then builds the tree attention mask (each node sees the context,
its ancestors and itself) and depth positions (siblings share a position), and ``commit(indices)`` gathers the
accepted path's KV entries into contiguous positions.

One ``commit`` serves every case: an int keeps the same chain prefix on every row (a crop: the cache stays
rectangular); per-row counts [B] let rows advance independently (rejected entries stay as masked holes, squeezed
out now and then); a [B, n] path keeps a tree branch.

Every layer of the cache keeps its whole history (see :mod:`mmspec.layout`): sliding-window and chunked layers are
windowed by explicit attention masks built from each token's ordinal, so rollback and tree compaction are exact for
them too; models whose cache cannot be rolled back are refused when the runner is built.
"""

from __future__ import annotations

import time
from contextlib import ExitStack

import torch
from transformers import DynamicCache

from .cache import compact as gather_path, crop, new_cache
from .layout import FULL, attention_layout, local_masks, model_mask
from .models import (FeatureTap, decoder_of, eager_attention, logits_width, output_logits, rotary_embeddings, uses_mrope,
                     with_cache)
from .tree import ancestor_matrix
from .types import LayerReuse


def next_positions(position_ids: torch.Tensor) -> torch.Tensor:
    """[B] position of the first token after a left-padded prompt: its last token's position + 1, as Hugging Face
    ``generate`` continues. With M-RoPE ([3, B, T]) a text token has one position on all three axes; it is not the
    prompt's largest position when a video has more temporal patches than spatial ones (Qwen2-VL places the text
    after a video at its start + max(h, w), while its temporal positions run to start + t - 1)."""
    last = position_ids[..., -1]  # [B], or [3, B]
    return (last.amax(0) if position_ids.dim() == 3 else last) + 1


class ModelRunner:
    def __init__(self, model, vocab_size: int | None = None, keep_features: bool = False,
                 keep_attention: bool = False):  # fmt: skip
        self.model = model
        # keep_attention: verification passes (extend) run with eager attention and record ``attention`` [L, B, S]:
        # per layer, the new tokens' attention over the cache, averaged over heads and new tokens (drafters that
        # choose visual tokens from the verifier's attention read it).
        self.keep_attention = keep_attention
        self.attention: torch.Tensor | None = None
        # keep_features: record the target's final-norm hidden states (EAGLE-style drafters read them):
        # ``features`` [B, n, H] of the tokens committed last (the whole prompt after a prefill), and after a prefill
        # ``prompt_embeds`` [B, T, H] (the decoder's input embeddings).
        self.keep_features = keep_features
        self.features: torch.Tensor | None = None
        self.prompt_embeds: torch.Tensor | None = None
        self._tentative_features: torch.Tensor | None = None
        self.vocab_size = vocab_size or logits_width(model)
        self.layout = attention_layout(model, "model")  # refuses caches that cannot roll back
        self.mrope = uses_mrope(model)
        self.device = next(model.parameters()).device
        self.cache: DynamicCache | None = None
        self.mask: torch.Tensor | None = None  # [B, cache_len] 1 = real token (includes tentative tokens)
        self.padded = False  # whether any row has left padding (otherwise masks can be omitted)
        self.next_pos: torch.Tensor | None = None  # [B] position of the first tentative token
        self.pending = 0  # tentative tokens in the cache, not yet committed
        self.parents: list[int] = []  # per tentative token: parent among tentative tokens, -1 = context
        self.depth: list[int] = []  # per tentative token: depth below the context (0 = next position)
        self.tentative_valid: torch.Tensor | None = None  # [B, pending] bool, None = no holes among tentative tokens
        self.forwards = 0
        self.forward_seconds = 0.0  # wall time inside model calls (the rest of a round is the loop's own work)

    def _counted(self, t0: float) -> None:
        """One model call finished (started at ``t0``, a perf_counter time)."""
        self.forwards += 1
        self.forward_seconds += time.perf_counter() - t0

    # -- positions -------------------------------------------------------------------------------------------
    def prompt_positions(self, input_ids, attention_mask, model_kwargs) -> torch.Tensor:
        """Position ids of a left-padded prompt: [B, T], or [3, B, T] for M-RoPE models."""
        if self.mrope and (model_kwargs.get("image_grid_thw") is not None or model_kwargs.get("video_grid_thw") is not None):
            cfg = self.model.config
            types = model_kwargs.get("mm_token_type_ids")
            if types is None:
                types = (input_ids == cfg.image_token_id).int() + 2 * (input_ids == getattr(cfg, "video_token_id", -1)).int()
            pos, _ = self.model.model.get_rope_index(
                input_ids,
                mm_token_type_ids=types,
                image_grid_thw=model_kwargs.get("image_grid_thw"),
                video_grid_thw=model_kwargs.get("video_grid_thw"),
                attention_mask=attention_mask,
            )  # [3, B, T]
            return pos
        pos = (attention_mask.long().cumsum(-1) - 1).clamp_min(0)  # [B, T]
        return pos[None].expand(3, -1, -1) if self.mrope else pos

    def _reset_tentative(self) -> None:
        self.pending, self.parents, self.depth, self.tentative_valid = 0, [], [], None

    def _positions(self, offsets: list[int] | torch.Tensor) -> torch.Tensor:
        """Positions of tentative tokens ``offsets`` ([L] or [B, L]) past the committed context."""
        pos = self.next_pos[:, None] + torch.as_tensor(offsets, device=self.device)  # [B, L]
        return pos[None].expand(3, -1, -1) if self.mrope else pos

    @property
    def is_chain(self) -> bool:
        return all(p == i - 1 for i, p in enumerate(self.parents))

    def _visibility(self, length: int) -> torch.Tensor:
        """[B, L, S] bool: what each of the last ``length`` tentative tokens may attend to (the committed context's
        real entries, then its ancestors among the tentative tokens and itself; holes hidden)."""
        committed = self.length - self.pending
        anc = ancestor_matrix(self.parents, self.device)[-length:]  # [L, P] (a chain: lower triangular)
        b = self.mask.shape[0]
        ctx = self.mask[:, None, :committed].bool().expand(b, length, committed)  # [B, L, C]
        tentative = anc[None].expand(b, length, self.pending)
        if self.tentative_valid is not None:
            tentative = tentative & self.tentative_valid[:, None, :]
        return torch.cat([ctx, tentative], dim=-1)

    def _tree_mask(self, length: int, dtype) -> torch.Tensor:
        """Additive 4-D mask [B, 1, L, S] for the last ``length`` tentative tokens of a tree (full attention)."""
        see = self._visibility(length)[:, None]
        return torch.zeros(see.shape, dtype=dtype, device=self.device).masked_fill(~see, torch.finfo(dtype).min)

    def _layer_masks(self, length: int, dtype) -> dict[str, torch.Tensor]:
        """Additive 4-D masks ``{layer type: [B, 1, L, S]}`` for the last ``length`` tentative tokens: visibility, plus
        the window / chunk of local layers over ordinals (each token's index among its row's real tokens)."""
        committed = self.length - self.pending
        ctx = self.mask[:, :committed]
        key_ordinal = ctx.cumsum(1) - 1  # [B, C] (padding / holes: masked anyway)
        if self.tentative_valid is not None:
            offsets = (self.tentative_valid.long().cumsum(1) - 1).clamp_min(0)  # [B, P] holes take no ordinal
        else:
            offsets = torch.tensor(self.depth, device=self.device).expand(ctx.shape[0], self.pending)  # siblings share one
        tentative = ctx.sum(1, keepdim=True) + offsets  # [B, P]
        key_ordinal = torch.cat([key_ordinal, tentative], dim=1)  # [B, S]
        return local_masks(self.layout, self._visibility(length), key_ordinal, tentative[:, -length:], dtype)

    # -- model calls ------------------------------------------------------------------------------------------
    @torch.no_grad()
    def prefill(self, input_ids: torch.Tensor | None, attention_mask: torch.Tensor | None = None, *,
                inputs_embeds: torch.Tensor | None = None, **model_kwargs):  # fmt: skip
        """Run the prompt; returns the logits of its last position [B, V]. Resets the cache.

        ``inputs_embeds [B, T, D]`` instead of ``input_ids``: a prompt given as embeddings (e.g. a drafter's prompt
        with compressed visual tokens); positions follow ``attention_mask``, or ``position_ids=`` ([B, T], or
        [3, B, T] for M-RoPE models, which require them).
        """
        if input_ids is None:
            if inputs_embeds is None:
                raise ValueError("input_ids/inputs_embeds: expected one of them, got neither")
            if self.mrope and (model_kwargs.get("position_ids") is None or model_kwargs["position_ids"].dim() != 3):
                raise ValueError("position_ids: prefilling an M-RoPE model from embeddings needs 3-D positions [3, B, T]")
            model_kwargs["inputs_embeds"] = inputs_embeds
        if attention_mask is None:
            attention_mask = torch.ones((input_ids if input_ids is not None else inputs_embeds).shape[:2], dtype=torch.long,
                                        device=self.device)  # fmt: skip
        self.cache = new_cache()
        position_ids = model_kwargs.pop("position_ids", None)
        if position_ids is None:
            position_ids = self.prompt_positions(input_ids, attention_mask, model_kwargs)
        self.padded = bool((attention_mask == 0).any())
        self.mask = attention_mask.long()
        self.next_pos = next_positions(position_ids)  # [B]
        self._reset_tentative()
        t0 = time.perf_counter()
        logits = self._forward(input_ids, attention_mask if self.padded else None, position_ids, logits_to_keep=1,
                               **model_kwargs)  # fmt: skip
        self._counted(t0)
        return logits[:, -1, : self.vocab_size]

    def prefill_from(self, other: "ModelRunner", num_layers: int | None = None,
                     index: list[torch.Tensor] | None = None) -> None:  # fmt: skip
        """Start from ``other``'s committed state instead of running a prefill, sharing its KV entries.

        ``num_layers``: take only the first n layers (an early-exit draft of the same target); None = all.
        ``index``: per layer, ``[B, S]`` positions of ``other``'s cache to keep, in that order (a sparse view, e.g.
        STD's top visual entries); the attention mask is gathered with the first layer's index, so every layer's
        index must select padding at the same slots.
        """
        if other.pending:
            raise ValueError(f"prefill_from: the source runner has {other.pending} uncommitted tokens; commit first")
        num_layers = len(other.cache.layers) if num_layers is None else num_layers
        if index is not None and len(index) != num_layers:
            raise ValueError(f"index: expected one [B, S] index per layer ({num_layers}), got {len(index)}")
        self.cache = new_cache()
        for i in range(num_layers):
            src = other.cache.layers[i]
            keys, values = src.keys, src.values  # [B, H, T, D]; shared, never modified in place
            if index is not None:
                idx = index[i][:, None, :, None].expand(keys.shape[0], keys.shape[1], -1, keys.shape[3])
                keys, values = keys.gather(2, idx), values.gather(2, idx)
            self.cache.update(keys, values, i)
        self.mask = other.mask.clone() if index is None else other.mask.gather(1, index[0])
        self.padded, self.next_pos = bool((self.mask == 0).any()), other.next_pos.clone()
        self._reset_tentative()

    def append_from(self, other: "ModelRunner", start: int) -> None:
        """Append ``other``'s committed entries from cache position ``start`` on (dense KV of tokens the other runner
        has committed since), every layer; positions follow ``other``. This runner must have nothing pending."""
        if self.pending or other.pending:
            raise ValueError("append_from: both runners must have committed all their tokens first")
        end = other.length
        if end > start:
            for i, layer in enumerate(self.cache.layers):
                src = other.cache.layers[i]
                self.cache.update(src.keys[:, :, start:end], src.values[:, :, start:end], i)
            self.mask = torch.cat([self.mask, other.mask[:, start:end]], dim=1)
            self.padded = self.padded or not bool(other.mask[:, start:end].all())  # holes of per-row commits
        self.next_pos = other.next_pos.clone()

    @torch.no_grad()
    def extend(self, tokens: torch.Tensor, parents: list[int] | tuple[int, ...] | None = None,
               reuse: "LayerReuse | None" = None, valid: torch.Tensor | None = None) -> torch.Tensor:  # fmt: skip
        """Append ``tokens [B, L]`` tentatively; returns their logits [B, L, V].

        ``parents``: per new token, the index of its parent among all tentative tokens (-1 = the committed context);
        None = a chain continuing the tentative tokens.
        ``reuse``: layers below ``reuse.layer`` already hold these tokens' KV in this runner's cache (written by an
        early-exit draft sharing it) and ``reuse.hidden`` is their input to that layer: only the layers from
        ``reuse.layer`` up run (self-speculative verification that reuses the draft layers' KV).
        ``valid [B, L]`` (chains only): False marks a hole — a filler token no one attends to and that takes no
        position (rows feeding different numbers of tokens in one call, e.g. a per-row carried token).
        """
        b, length = tokens.shape
        holes = valid is not None or self.tentative_valid is not None
        if holes and (parents is not None or reuse is not None):
            raise ValueError("valid: holes are supported in chains without layer reuse only")
        if parents is None:
            parents = [self.pending + i - 1 for i in range(length)]
        if len(parents) != length or any(not -1 <= p < self.pending + i for i, p in enumerate(parents)):
            raise ValueError(f"parents: expected {length} indices, each < its own index, got {list(parents)}")
        new_depth = []
        for p in parents:
            new_depth.append(0 if p < 0 else (self.depth + new_depth)[p] + 1)
        if holes:  # a hole takes no position: offsets count the real tokens before each
            valid = torch.ones_like(tokens, dtype=torch.bool) if valid is None else valid.to(self.device).bool()
            before = self.tentative_valid
            if before is None:
                before = torch.ones(b, self.pending, dtype=torch.bool, device=self.device)
            self.tentative_valid = torch.cat([before, valid], dim=1)  # [B, pending + L]
            offsets = (self.tentative_valid.long().cumsum(1)[:, -length:] - 1).clamp_min(0)  # [B, L]
            positions = self._positions(offsets)
            self.padded = self.padded or not bool(valid.all())
        else:
            valid, positions = tokens.new_ones(b, length), self._positions(new_depth)
        self.parents += list(parents)
        self.depth += new_depth
        self.pending += length
        self.mask = torch.cat([self.mask, valid.long()], dim=1)
        if self.layout.local:  # windows over ordinals, never the cache's own eviction (it keeps every entry)
            attention_mask = model_mask(self.layout, self._layer_masks(length, self.model.dtype))
        elif self.is_chain:
            attention_mask = self.mask if self.padded else None
        else:
            attention_mask = self._tree_mask(length, self.model.dtype)
        t0 = time.perf_counter()
        if reuse is None:
            logits = self._forward(tokens, attention_mask, positions)
        else:
            logits = self._forward_from_layer(reuse, positions)
        self._counted(t0)
        return logits[..., : self.vocab_size]

    def _forward_from_layer(self, reuse: "LayerReuse", position_ids) -> torch.Tensor:
        """Run decoder layers ``reuse.layer..`` on ``reuse.hidden [B, L, H]`` (the last L tentative tokens)."""
        decoder = decoder_of(self.model)
        h = reuse.hidden
        if self.cache.layers[0].keys.shape[2] != self.length:
            raise ValueError("reuse: the shared lower layers must already hold every tentative token's KV")
        # {type: [B, 1, L, S]}: explicit, the layers differ in length now
        masks = self._layer_masks(h.shape[1], h.dtype) if self.layout.local else {FULL: self._tree_mask(h.shape[1], h.dtype)}
        types = self.layout.layer_types
        rope = {t: rotary_embeddings(decoder, h, position_ids, t) for t in set(types[reuse.layer :])}
        text_positions = None if position_ids.dim() == 3 else position_ids
        for i in range(reuse.layer, len(decoder.layers)):
            h = decoder.layers[i](h, attention_mask=masks[types[i]], position_embeddings=rope[types[i]],
                                  position_ids=text_positions, use_cache=True, **with_cache(decoder.layers[i], self.cache))  # fmt: skip
            h = h[0] if isinstance(h, tuple) else h
        with ExitStack() as stack:
            tap = stack.enter_context(FeatureTap(self.model)) if self.keep_features else None
            h = decoder.norm(h)
        if tap is not None:
            earlier = self.pending - h.shape[1]
            prev = self._tentative_features
            self._tentative_features = tap.features if earlier == 0 else torch.cat([prev, tap.features], dim=1)
        return output_logits(self.model, h)

    def _forward(self, input_ids, attention_mask, position_ids, **kwargs) -> torch.Tensor:
        """One model call on the runner's cache -> logits [B, L, width]. Subclasses may replace the model."""
        attend = self.keep_attention and self.pending > 0  # a verification pass whose attention is recorded
        with ExitStack() as stack:
            tap = stack.enter_context(FeatureTap(self.model)) if self.keep_features else None
            if attend:
                stack.enter_context(eager_attention(self.model))
                kwargs["output_attentions"] = True
            out = self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                             use_cache=True, **with_cache(self.model, self.cache), **kwargs)  # fmt: skip
        if attend:
            self.attention = torch.stack([a.float().mean(dim=(1, 2)) for a in out.attentions])  # [L, B, S]
        if tap is not None:
            if self.pending == 0:  # a prefill: every prompt position is committed
                self.features, self.prompt_embeds = tap.features, tap.embeds
            else:  # tentative: append to this round's earlier tentative features, if any
                earlier = self.pending - input_ids.shape[1]
                prev = self._tentative_features
                self._tentative_features = tap.features if earlier == 0 else torch.cat([prev, tap.features], dim=1)
        return out.logits

    def commit(self, keep: int | torch.Tensor, compact: bool = True) -> None:
        """Commit tentative tokens and roll back the rest (cache, mask and positions stay in step).

        ``keep`` an int: the first ``keep`` tentative tokens of every row (a chain prefix: a crop). A tensor [B]: per
        row, its own chain prefix length (0..pending): rows advancing independently keep the rejected entries as holes
        the attention mask hides, each row's positions advance by its own count, and :meth:`compact_holes` squeezes
        the holes out once they pile up (``compact=False``: never here, for a cache whose positions others index, e.g.
        the target's under an STD draft view). A tensor [B, n]: per row, the indices of a root-to-node path among the
        tentative tokens (a tree), gathered into contiguous positions.
        """
        if isinstance(keep, torch.Tensor) and keep.dim() == 1:
            return self._commit_rows(keep, compact)
        if isinstance(keep, int) and self.tentative_valid is not None:  # a chain with holes: kept holes stay masked
            return self._commit_rows(torch.full((self.mask.shape[0],), keep, dtype=torch.long, device=self.device), compact)
        if isinstance(keep, int):
            if not 0 <= keep <= self.pending or not all(p == i - 1 for i, p in enumerate(self.parents[:keep])):
                raise ValueError(f"keep: expected a chain prefix length in 0..{self.pending}, got {keep}")
            n = keep
            crop(self.cache, self.pending - keep)
        else:
            n = keep.shape[1]
            crop_only = bool((keep == torch.arange(n, device=keep.device)).all()) and all(
                p == i - 1 for i, p in enumerate(self.parents[:n]))  # fmt: skip
            if crop_only:
                crop(self.cache, self.pending - n)
            else:
                committed = self.length - self.pending
                gather_path(self.cache, committed, keep.to(self.device))
        if self.keep_features:  # features of the committed tokens (the tentative block's first n, or the path)
            t = self._tentative_features
            self.features = t[:, :n] if isinstance(keep, int) else t.gather(1, keep[..., None].expand(-1, -1, t.shape[-1]))
        self.mask = self.mask[:, : self.length - self.pending + n]
        self.next_pos = self.next_pos + n
        self._reset_tentative()

    def _commit_rows(self, keep: torch.Tensor, compact: bool) -> None:
        """Per-row chain prefixes ``keep [B]`` (0..pending); see :meth:`commit`."""
        if not self.is_chain:
            raise ValueError("keep: per-row commits take a chain of tentative tokens, got a tree")
        keep = keep.to(self.device)
        if keep.shape != (self.mask.shape[0],) or bool((keep < 0).any()) or bool((keep > self.pending).any()):
            raise ValueError(f"keep: expected [B] counts in 0..{self.pending}, got {keep.tolist()}")
        block = torch.arange(self.pending, device=self.device)[None, :] < keep[:, None]  # [B, L] kept entries
        if self.tentative_valid is not None:
            block = block & self.tentative_valid  # holes stay holes
        if self.keep_features:  # row b's committed features: the first keep[b] of the block
            self.features = self._tentative_features
        self.mask = torch.cat([self.mask[:, : self.length - self.pending], block.long()], dim=1)
        self.next_pos = self.next_pos + block.long().sum(1)
        self.padded = self.padded or bool((~block).any())
        self._reset_tentative()
        if compact and self.length - int(self.mask.sum(1).min()) > max(64, self.length // 2):
            self.compact_holes()

    def compact_holes(self) -> None:
        """Drop masked-out cache entries: every row's real entries, in order, right-aligned (left padding for rows
        with fewer). A cache with a multiple of B rows (e.g. classifier-free guidance's doubled batch: the same
        tokens in every block of B rows) is gathered with the same index in each block."""
        if self.pending:
            raise ValueError(f"compact_holes: {self.pending} tentative tokens are pending; commit first")
        real = self.mask.bool()  # [B, S]
        width = int(real.sum(1).max())
        order = torch.sort(real.long(), dim=1, stable=True).indices  # [B, S] holes first, then real entries in order
        index = order[:, -width:]  # [B, S'] right-aligned real entries
        self.mask = real.gather(1, index).long()
        for layer in self.cache.layers:
            if not getattr(layer, "is_initialized", False) or layer.keys is None or layer.keys.numel() == 0:
                continue  # a layer nobody wrote (e.g. above an early-exit draft's n layers)
            b, h, _, d = layer.keys.shape
            rows = index.repeat(b // index.shape[0], 1)  # [b, S'] the same index for every block of B rows
            idx = rows[:, None, :, None].expand(b, h, width, d)
            layer.keys, layer.values = layer.keys.gather(2, idx), layer.values.gather(2, idx)
        self.padded = bool((self.mask == 0).any())

    @property
    def length(self) -> int:
        """Tokens in the cache (padding and tentative tokens included)."""
        return self.mask.shape[1]
