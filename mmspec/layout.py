"""What a decoder's layers attend to, which KV caches mmspec can roll back, and the explicit masks for local layers.

Speculative decoding appends tentative tokens to the KV cache and rolls back the rejected ones (a crop, a tree-path
gather, or per-row holes). That is exact for attention layers that keep every key, so every runner holds a plain
``DynamicCache`` whose layers all keep their **whole history**, whatever the model's own cache would evict:

- ``full_attention``: as the model does;
- ``sliding_attention`` (Mistral, Gemma 2/3, Qwen2 with ``use_sliding_window``, ...) and ``chunked_attention``
  (Llama 4): the cache keeps the evicted entries too (so a rollback never needs them back), and the window is applied
  by the attention mask instead: :func:`local_masks` builds it from each token's *ordinal* (its index among the row's
  real tokens), which is what Hugging Face's own masks use (cache index minus left padding). The price is memory: such
  a layer's cache grows like a full-attention layer's instead of stopping at the window.

Layers that keep recurrent state (linear attention, Mamba-style ``conv`` / ``hybrid`` layers) cannot be cropped back
to an earlier token, and KV-sharing ``dummy`` layers read other layers' caches in ways the runner does not model:
:func:`attention_layout` refuses such models up front with :class:`UnsupportedModelError` rather than return tokens
that differ from the model's own decoding.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

FULL, SLIDING, CHUNKED = "full_attention", "sliding_attention", "chunked_attention"
SUPPORTED_LAYER_TYPES = (FULL, SLIDING, CHUNKED)


class UnsupportedModelError(ValueError):
    """A model the engine cannot decode exactly (its cache cannot be rolled back); raised before any generation."""


@dataclass(frozen=True)
class AttentionLayout:
    layer_types: tuple[str, ...]  # per decoder layer: one of SUPPORTED_LAYER_TYPES
    window: int | None = None  # sliding_attention: a query sees the keys whose ordinal is > its own - window
    chunk: int | None = None  # chunked_attention: a query sees the keys in its own chunk of ordinals

    @property
    def types(self) -> tuple[str, ...]:
        """The distinct layer types, in order of first use."""
        return tuple(dict.fromkeys(self.layer_types))

    @property
    def local(self) -> bool:
        """Whether any layer attends to a window or chunk (the runner then passes explicit masks)."""
        return any(t != FULL for t in self.layer_types)

    def truncated(self, num_layers: int) -> "AttentionLayout":
        return AttentionLayout(self.layer_types[:num_layers], self.window, self.chunk)


def _layer_types(config) -> list[str]:
    try:  # transformers >= 5: the same inference the model's own DynamicCache uses
        from transformers.cache_utils import get_layer_types_and_kwargs

        return list(get_layer_types_and_kwargs(config)[0])
    except ImportError:  # older releases
        types = getattr(config, "layer_types", None)
        if types is not None:
            return list(types)
        kind = SLIDING if getattr(config, "sliding_window", None) else CHUNKED if getattr(config, "attention_chunk_size", None) else FULL
        return [kind] * config.num_hidden_layers


def attention_layout(model, role: str = "target") -> AttentionLayout:
    """The decoder's :class:`AttentionLayout`; raises :class:`UnsupportedModelError` for caches that cannot roll back."""
    cfg = model.config
    name = type(model).__name__
    if getattr(cfg, "is_encoder_decoder", False):
        raise UnsupportedModelError(f"{role}: {name} is an encoder-decoder model; the engine decodes decoder-only causal LMs "
                                    "and image/video-text-to-text models")  # fmt: skip
    if getattr(model, "_is_stateful", False):
        raise UnsupportedModelError(
            f"{role}: {name} keeps recurrent (state-space / linear-attention) state, which cannot be rolled back to an "
            "earlier token; speculative decoding would not reproduce its output")
    text = cfg.get_text_config(decoder=True) if hasattr(cfg, "get_text_config") else cfg
    types = _layer_types(text)
    bad = sorted(set(types) - set(SUPPORTED_LAYER_TYPES))
    if bad:
        raise UnsupportedModelError(
            f"{role}: {name} has decoder layers of type {bad}; mmspec rolls back attention KV caches only "
            f"(layer types {list(SUPPORTED_LAYER_TYPES)}). Recurrent / linear-attention state and KV-sharing layers "
            "cannot be cropped back to an earlier token, so speculative decoding would not reproduce the model's output")
    window = getattr(text, "sliding_window", None) if SLIDING in types else None
    chunk = getattr(text, "attention_chunk_size", None) if CHUNKED in types else None
    if SLIDING in types and not (isinstance(window, int) and window >= 1):
        raise UnsupportedModelError(f"{role}: sliding_attention layers without a valid config.sliding_window ({window!r})")
    if CHUNKED in types and not (isinstance(chunk, int) and chunk >= 1):
        raise UnsupportedModelError(f"{role}: chunked_attention layers without a valid config.attention_chunk_size ({chunk!r})")
    return AttentionLayout(tuple(types), window, chunk)


def local_masks(layout: AttentionLayout, see: torch.Tensor, key_ordinal: torch.Tensor, query_ordinal: torch.Tensor,
                dtype: torch.dtype) -> dict[str, torch.Tensor]:  # fmt: skip
    """Additive 4-D masks ``{layer type: [B, 1, L, S]}`` from what each query may see.

    see [B, L, S] bool: causal / tree visibility and padding (holes); key_ordinal [B, S], query_ordinal [B, L]: each
    token's index among its row's real tokens. Sliding layers also hide keys ``window`` or more ordinals back; chunked
    layers hide keys outside the query's chunk.
    """
    q, k = query_ordinal[:, :, None], key_ordinal[:, None, :]  # [B, L, 1], [B, 1, S]
    allowed = {FULL: see}
    if layout.window is not None:
        allowed[SLIDING] = see & (q - k < layout.window)
    if layout.chunk is not None:
        allowed[CHUNKED] = see & (torch.div(q, layout.chunk, rounding_mode="floor") == torch.div(k, layout.chunk, rounding_mode="floor"))
    neg = torch.finfo(dtype).min
    return {t: torch.zeros(a.shape, dtype=dtype, device=a.device).masked_fill(~a, neg)[:, None] for t, a in allowed.items()
            if t in layout.types}  # fmt: skip


def model_mask(layout: AttentionLayout, masks: dict[str, torch.Tensor]):
    """What the model's forward takes as ``attention_mask``: the one 4-D mask when every layer has the same type (a
    4-D mask is used as given), else the per-type mapping that hybrid decoders (Gemma 2/3, Qwen2, Llama 4) accept."""
    return masks[layout.types[0]] if len(layout.types) == 1 else masks
