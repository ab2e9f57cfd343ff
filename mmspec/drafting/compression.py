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

``grid`` may also be ``(t, h, w)`` for a video (grid pooling then pools over time as well, keeping as many temporal
slots as the budget allows). ``carry [B, N, E]``: features that follow the tokens through the compression (e.g.
3-D rotary positions): selected, pooled or merged exactly like them, never used to decide; the compressor then
returns ``(tokens [B, M, D], carry [B, M, E])``.
"""

from __future__ import annotations

import math
from typing import Callable

import torch

from ..checks import check_int
from ..registry import Registry
from ..models import eager_attention

Compressor = Callable[..., torch.Tensor]
COMPRESSORS: Registry[Compressor] = Registry("visual token compressor")


def _check_budget(tokens: torch.Tensor, budget: int) -> None:
    if tokens.dim() != 3:
        raise ValueError(f"tokens: expected visual tokens [B, N, D], got shape {tuple(tokens.shape)}")
    n = tokens.shape[1]
    check_int("budget", budget, 1, n, f" (the image has {n} visual tokens)")


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


def _with_carry(out: torch.Tensor, carry, carry_out):
    return out if carry is None else (out, carry_out)


def output_grid_3d(grid: tuple[int, int, int], budget: int) -> tuple[int, int, int]:
    """(t', h', w') with t' * h' * w' == budget inside ``grid``: the most temporal slots, then the aspect ratio."""
    t = grid[0]
    for slots in range(min(t, budget), 0, -1):
        if budget % slots == 0:
            try:
                return (slots, *output_grid(grid[1:], budget // slots))
            except ValueError:
                continue
    raise ValueError(f"budget: {budget} tokens cannot tile a {'x'.join(map(str, grid))} grid")


@COMPRESSORS.register("grid-pool")
def grid_pool(tokens: torch.Tensor, budget: int, scores=None, grid: tuple[int, ...] | None = None, carry=None):
    _check_budget(tokens, budget)
    b, n, d = tokens.shape
    grid = tuple(grid) if grid else (math.isqrt(n), n // math.isqrt(n))
    if math.prod(grid) != n or len(grid) not in (2, 3):
        raise ValueError(f"grid: expected (h, w) or (t, h, w) with a product of {n} visual tokens, got {grid}")
    x = tokens if carry is None else torch.cat([tokens, carry.to(tokens.dtype)], dim=-1)
    x = x.transpose(1, 2).reshape(b, x.shape[-1], *grid).float()  # [B, D(+E), (t,) h, w]
    if len(grid) == 2:
        pooled = torch.nn.functional.adaptive_avg_pool2d(x, output_grid(grid, budget))  # [B, D, h', w']
    else:
        pooled = torch.nn.functional.adaptive_avg_pool3d(x, output_grid_3d(grid, budget))  # [B, D, t', h', w']
    out = pooled.flatten(2).transpose(1, 2)  # [B, M, D(+E)]
    return _with_carry(out[..., :d].to(tokens.dtype), carry, out[..., d:])


def _gather(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    return x.gather(1, idx[..., None].expand(-1, -1, x.shape[-1]))


@COMPRESSORS.register("top-k")
def topk_tokens(tokens: torch.Tensor, budget: int, scores=None, grid=None, carry=None):
    _check_budget(tokens, budget)
    scores = _need_scores(scores, tokens, "top-k")
    keep = scores.topk(budget, dim=-1).indices.sort(-1).values  # [B, M] in original (spatial) order
    return _with_carry(_gather(tokens, keep), carry, None if carry is None else _gather(carry, keep))


@COMPRESSORS.register("merge")
def merge_similar(tokens: torch.Tensor, budget: int, scores=None, grid=None, carry=None):
    """ToMe bipartite soft matching on cosine similarity: each step splits the tokens alternately into sets A and B,
    links every A token to its most similar B token, and merges the r most similar links (merged = size-weighted
    mean), r = min(|A|, tokens still to remove). Vectorised over the batch; a loop over merge steps only."""
    _check_budget(tokens, budget)
    dim = tokens.shape[-1]  # similarity on the tokens only; carried features ride along
    x = tokens.float() if carry is None else torch.cat([tokens.float(), carry.float()], dim=-1)  # [B, N, D(+E)]
    size = torch.ones(x.shape[:2], device=x.device)  # [B, N] tokens merged into each
    while x.shape[1] > budget:
        a, b = x[:, ::2], x[:, 1::2]  # [B, Na, D], [B, Nb, D]
        sa, sb = size[:, ::2], size[:, 1::2]
        r = min(a.shape[1], x.shape[1] - budget)
        unit_a, unit_b = (torch.nn.functional.normalize(v[..., :dim], dim=-1) for v in (a, b))
        sim = unit_a @ unit_b.transpose(1, 2)
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
    return _with_carry(x[..., :dim].to(tokens.dtype), carry, x[..., dim:])


@COMPRESSORS.register("two-stage")
def two_stage_prune(tokens: torch.Tensor, budget: int, scores=None, grid=None, mass: float = 0.4, carry=None):
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
    return _with_carry(_gather(tokens, idx), carry, None if carry is None else _gather(carry, idx))


@torch.no_grad()
def visual_attention_scores(model, input_ids, attention_mask, visual: torch.Tensor, last_rows: int = 4,
                            position_ids: torch.Tensor | None = None, **model_kwargs):  # fmt: skip
    """Importance of each visual token: attention of the last ``last_rows`` query rows (the prompt's text end) to
    the visual positions, averaged over layers and heads. ``visual [B, T]`` marks the visual positions (N per row).
    One eager forward of ``model`` -> [B, N]. ``position_ids``: the prompt's positions (needed by M-RoPE models).
    """
    with eager_attention(model):
        out = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                    output_attentions=True, **model_kwargs)  # fmt: skip
    att = torch.stack([a[:, :, -last_rows:].float() for a in out.attentions]).mean(dim=(0, 2, 3))  # [B, T]
    n = int(visual[0].sum())
    return att[visual].view(att.shape[0], n)
