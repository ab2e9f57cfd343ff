"""KV cache rollback: crop to a prefix, or gather an accepted tree path into contiguous positions."""

from __future__ import annotations

import torch
from transformers import DynamicCache


def new_cache() -> DynamicCache:
    """A cache whose every layer is a plain ``DynamicLayer`` that keeps its whole history (created lazily per layer).

    Built without the model config on purpose: a config would give sliding-window layers, which evict entries a
    rollback can need and track a length that crops and gathers must keep in step; mmspec applies windows through
    attention masks instead (:mod:`mmspec.layout`).
    """
    return DynamicCache()


def crop(cache, drop: int) -> None:
    """Remove the last ``drop`` tokens from every layer."""
    if drop:
        cache.crop(-drop)


def compact(cache, base: int, keep: torch.Tensor) -> None:
    """Keep the first ``base`` positions plus, per row, the tentative positions ``base + keep[b]`` (in that order).

    keep [B, n] int64 indices into the tentative block; every row keeps the same count, so the cache stays
    rectangular. Layers without KV (not initialised) are skipped.
    """
    for layer in cache.layers:
        if not getattr(layer, "is_initialized", False) or layer.keys is None or layer.keys.numel() == 0:
            continue
        b, h, _, d = layer.keys.shape
        idx = (base + keep)[:, None, :, None].expand(b, h, keep.shape[1], d)  # [B, H, n, D]
        layer.keys = torch.cat([layer.keys[:, :, :base], layer.keys.gather(2, idx)], dim=2)
        layer.values = torch.cat([layer.values[:, :, :base], layer.values.gather(2, idx)], dim=2)
