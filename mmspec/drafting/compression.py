"""Visual token compression for drafters (METHODS.md §2): the drafter sees M << N visual tokens, the target all N.

Only the drafter's input shrinks, so every compressor keeps speculative decoding lossless (the target verifies).
Each compressor maps one image's visual tokens ``tokens [B, N, D]`` (row-major over a ``grid = (h, w)`` patch grid)
to ``[B, M, D]`` with M = ``budget``; some use per-token importance ``scores [B, N]`` (e.g. from
:func:`visual_attention_scores`). Registered by name in ``COMPRESSORS``:

- ``grid-pool``   average pooling over the patch grid (the output grid is the factorisation of M closest to the
                  image's aspect ratio);
- ``top-k``       the M highest-scoring tokens, in their original order (attention-guided selection);
- ``merge``       ToMe-style cosine-similarity merging: bipartite soft matching, merged tokens averaged, repeated
                  until M remain;
- ``two-stage``   SpecVLM-style pruning: keep the highest-scoring tokens until they hold ``mass`` (40%) of the
                  attention mass, then fill the rest of the budget with spatially uniform picks.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from typing import Callable

import torch

from ..registry import Registry

Compressor = Callable[..., torch.Tensor]
COMPRESSORS: Registry[Compressor] = Registry("visual token compressor")


def _check_budget(tokens: torch.Tensor, budget: int) -> None:
    if tokens.dim() != 3:
        raise ValueError(f"tokens: expected visual tokens [B, N, D], got shape {tuple(tokens.shape)}")
    n = tokens.shape[1]
    if not isinstance(budget, int) or isinstance(budget, bool) or not 1 <= budget <= n:
        raise ValueError(f"budget: expected an int in [1, {n}] (the image has {n} visual tokens), got {budget!r}")


def _need_scores(scores, tokens, name: str) -> torch.Tensor:
    if scores is None or scores.shape != tokens.shape[:2]:
        got = None if scores is None else tuple(scores.shape)
        raise ValueError(f"scores: the {name!r} compressor needs per-token scores [B, N] = {tuple(tokens.shape[:2])}, got {got}")
    return scores


def output_grid(grid: tuple[int, int], budget: int) -> tuple[int, int]:
    """(h', w') with h' * w' == budget, h' <= h, w' <= w, closest to the grid's aspect ratio."""
    h, w = grid
    options = [(a, budget // a) for a in range(1, budget + 1) if budget % a == 0 and a <= h and budget // a <= w]
    if not options:
        raise ValueError(f"budget: {budget} tokens cannot tile a {h}x{w} patch grid; choose a product a*b with a <= {h}, b <= {w}")
    return min(options, key=lambda o: abs(math.log(o[0] / o[1]) - math.log(h / w)))


@COMPRESSORS.register("grid-pool")
def grid_pool(tokens: torch.Tensor, budget: int, scores=None, grid: tuple[int, int] | None = None) -> torch.Tensor:
    _check_budget(tokens, budget)
    b, n, d = tokens.shape
    h, w = grid or (math.isqrt(n), n // math.isqrt(n))
    if h * w != n:
        raise ValueError(f"grid: expected h * w == {n} visual tokens, got {grid}")
    oh, ow = output_grid((h, w), budget)
    x = tokens.transpose(1, 2).reshape(b, d, h, w)  # [B, D, h, w]
    pooled = torch.nn.functional.adaptive_avg_pool2d(x.float(), (oh, ow)).to(tokens.dtype)  # [B, D, h', w']
    return pooled.flatten(2).transpose(1, 2)  # [B, M, D]


@COMPRESSORS.register("top-k")
def topk_tokens(tokens: torch.Tensor, budget: int, scores=None, grid=None) -> torch.Tensor:
    _check_budget(tokens, budget)
    scores = _need_scores(scores, tokens, "top-k")
    keep = scores.topk(budget, dim=-1).indices.sort(-1).values  # [B, M] in original (spatial) order
    return tokens.gather(1, keep[..., None].expand(-1, -1, tokens.shape[-1]))


@COMPRESSORS.register("merge")
def merge_similar(tokens: torch.Tensor, budget: int, scores=None, grid=None) -> torch.Tensor:
    """ToMe bipartite soft matching on cosine similarity: each step splits the tokens alternately into sets A and B,
    links every A token to its most similar B token, and merges the r most similar links (merged = size-weighted
    mean), r = min(|A|, tokens still to remove). Vectorised over the batch; a loop over merge steps only."""
    _check_budget(tokens, budget)
    x = tokens.float()  # [B, N, D]
    size = torch.ones(x.shape[:2], device=x.device)  # [B, N] tokens merged into each
    while x.shape[1] > budget:
        a, b = x[:, ::2], x[:, 1::2]  # [B, Na, D], [B, Nb, D]
        sa, sb = size[:, ::2], size[:, 1::2]
        r = min(a.shape[1], x.shape[1] - budget)
        sim = torch.nn.functional.normalize(a, dim=-1) @ torch.nn.functional.normalize(b, dim=-1).transpose(1, 2)
        best, dst = sim.max(-1)  # [B, Na] most similar B token per A token
        order = best.argsort(-1, descending=True)  # [B, Na]
        merged, kept = order[:, :r], order[:, r:]  # A tokens to fold into B, A tokens that stay
        dst_m = dst.gather(1, merged)  # [B, r]
        wa = sa.gather(1, merged)[..., None]  # [B, r, 1]
        b = b * sb[..., None]  # size-weighted sums in B
        b = b.scatter_add(1, dst_m[..., None].expand(-1, -1, x.shape[-1]), a.gather(1, merged[..., None].expand(-1, -1, x.shape[-1])) * wa)
        sb = sb.scatter_add(1, dst_m, wa[..., 0])
        b = b / sb[..., None]
        kept = kept.sort(-1).values
        x = torch.cat([a.gather(1, kept[..., None].expand(-1, -1, x.shape[-1])), b], 1)
        size = torch.cat([sa.gather(1, kept), sb], 1)
    return x.to(tokens.dtype)


@COMPRESSORS.register("two-stage")
def two_stage_prune(tokens: torch.Tensor, budget: int, scores=None, grid=None, mass: float = 0.4) -> torch.Tensor:
    """Stage 1: the highest-scoring tokens until they hold ``mass`` of the (normalised) score mass, at most
    ``budget``; stage 2: the rest of the budget as evenly spaced picks among the tokens left. Original order kept."""
    _check_budget(tokens, budget)
    scores = _need_scores(scores, tokens, "two-stage")
    b, n, _ = tokens.shape
    w = scores.float().clamp_min(0)
    w = w / w.sum(-1, keepdim=True).clamp_min(1e-12)  # [B, N]
    order = w.argsort(dim=-1, descending=True)  # [B, N]
    before = w.gather(1, order).cumsum(-1) - w.gather(1, order)  # mass held before each pick
    n_top = (before < mass).sum(-1).clamp(1, budget)  # [B] stage-1 picks
    rank = torch.empty_like(order).scatter_(1, order, torch.arange(n, device=tokens.device).expand(b, n))  # [B, N]
    top = rank < n_top[:, None]  # [B, N] stage-1 tokens
    # stage 2: among the rest (in spatial order), evenly spaced picks to fill the budget
    rest_pos = (~top).long().cumsum(-1) - 1  # [B, N] index among the rest
    n_rest = n - n_top  # [B]
    fill = budget - n_top  # [B]
    step = n_rest.double() / fill.clamp_min(1).double()  # [B]
    # rest index j is picked iff floor(k * step) == j for some k < fill  <=>  ceil(j / step) * step < j + 1
    j = rest_pos.double()
    k = torch.ceil(j / step[:, None])
    picked = (~top) & (k < fill[:, None]) & (k * step[:, None] < j + 1)
    keep = top | picked  # [B, N], exactly `budget` per row
    idx = keep.long().argsort(dim=-1, descending=True, stable=True)[:, :budget].sort(-1).values  # [B, M]
    return tokens.gather(1, idx[..., None].expand(-1, -1, tokens.shape[-1]))


@contextmanager
def eager_attention(model):
    """Temporarily switch a model to eager attention (SDPA does not return attention weights), then restore."""
    old = model.config._attn_implementation
    model.set_attn_implementation("eager")
    try:
        yield model
    finally:
        model.set_attn_implementation(old)


@torch.no_grad()
def visual_attention_scores(model, input_ids, attention_mask, visual: torch.Tensor, last_rows: int = 4, **model_kwargs):
    """Importance of each visual token: attention of the last ``last_rows`` query rows (the prompt's text end) to
    the visual positions, averaged over layers and heads. ``visual [B, T]`` marks the visual positions (N per row).
    One eager forward of ``model`` -> [B, N]."""
    with eager_attention(model):
        out = model(input_ids=input_ids, attention_mask=attention_mask, output_attentions=True, **model_kwargs)
    att = torch.stack([a[:, :, -last_rows:].float() for a in out.attentions]).mean(dim=(0, 2, 3))  # [B, T]
    n = int(visual[0].sum())
    return att[visual].view(att.shape[0], n)
