"""A small-VLM drafter that sees a compressed image: M << N visual tokens per image (METHODS.md §2).

The drafter's own merged prompt embeddings (text embeddings with its image features in the placeholder span) are
taken from its own embedding path, the visual span is compressed by a registered compressor
(:mod:`mmspec.drafting.compression`), and the drafter is prefilled from the shorter embedding sequence. Only the
drafter's view changes: the target still verifies with every visual token, so decoding stays lossless, and the
drafter's prefill and KV cache shrink by N - M tokens per image.
"""

from __future__ import annotations

import torch

from ..drafting.compression import COMPRESSORS, visual_attention_scores
from ..runner import ModelRunner
from .base import DRAFTERS, DraftRequest
from .early_exit import prompt_embeddings
from .model import ModelDrafter, ModelDraftSession


def compress_prompt(embeds, input_ids, attention_mask, placeholder_ids, compress):
    """Replace each row's visual span (one image, N placeholders) by ``compress(visual [B, N, D]) -> [B, M, D]``.

    embeds [B, T, D], input_ids / attention_mask [B, T] -> (embeds [B, T - N + M, D], mask [B, T - N + M]).
    """
    visual = torch.zeros_like(input_ids, dtype=torch.bool)
    for pid in placeholder_ids:
        visual |= input_ids == pid
    visual &= attention_mask.bool()
    counts = visual.sum(-1)
    if int(counts.min()) != int(counts.max()) or int(counts.min()) == 0:
        raise ValueError(f"input_ids: compressed drafting needs one image (the same N visual tokens) per row, got {counts.tolist()}")
    b, t, d = embeds.shape
    n = int(counts[0])
    small = compress(embeds[visual].view(b, n, d), visual)  # [B, M, D]
    m = small.shape[1]
    first = visual.long().argmax(-1)  # [B] start of each row's span (contiguous placeholders)
    pos = torch.arange(t - n + m, device=embeds.device).expand(b, -1)  # [B, T'] output positions
    src = torch.where(pos < first[:, None], pos, pos + n - m)  # [B, T'] source position of each kept token
    in_span = (pos >= first[:, None]) & (pos < first[:, None] + m)  # [B, T'] compressed visual slots
    out = embeds.gather(1, src[..., None].expand(-1, -1, d))
    out = torch.where(in_span[..., None], small.gather(1, (pos - first[:, None]).clamp(0, m - 1)[..., None].expand(-1, -1, d)), out)
    return out, attention_mask.gather(1, src)


class CompressedDraftSession(ModelDraftSession):
    def __init__(self, drafter: "CompressedVLMDrafter", request: DraftRequest):
        model = drafter.model
        self.runner = ModelRunner(model, request.vocab_size)
        self.sampling, self.need_probs = request.sampling, request.need_probs
        ids, mask = request.input_ids, request.attention_mask
        pos = (mask.long().cumsum(-1) - 1).clamp_min(0)
        embeds = prompt_embeddings(model, ids, mask, pos, request.model_kwargs)  # [B, T, D] the drafter's own view

        def compress(visual_tokens, visual_mask):
            scores = None
            if drafter.needs_scores:
                scores = visual_attention_scores(model, ids, mask, visual_mask, **request.model_kwargs)
            return drafter.compressor(visual_tokens, drafter.budget, scores=scores, grid=drafter.grid)

        embeds, mask = compress_prompt(embeds, ids, mask, request.placeholder_ids, compress)
        self.runner.prefill(None, mask, inputs_embeds=embeds)
        self.visual_tokens = drafter.budget
        self.carry = ids.new_zeros((ids.shape[0], 0))
        self._feed, self._k = self.carry, 0


@DRAFTERS.register("compressed-vlm")
class CompressedVLMDrafter(ModelDrafter):
    """A small VLM drafter whose image is compressed to ``budget`` visual tokens by ``compressor`` ("grid-pool",
    "top-k", "merge", "two-stage"); score-based compressors rank tokens by the drafter's own text-to-image
    attention (one eager pass at prefill). ``grid`` = the (h, w) patch grid (default: square)."""

    def __init__(self, model, compressor: str = "grid-pool", budget: int = 4, grid: tuple[int, int] | None = None):
        super().__init__(model, text_only=False)
        self.compressor = COMPRESSORS.get(compressor)
        self.needs_scores = compressor in ("top-k", "two-stage")
        if not isinstance(budget, int) or budget < 1:
            raise ValueError(f"budget: expected an int >= 1 (visual tokens the drafter keeps), got {budget!r}")
        self.budget, self.grid = budget, grid
        self.name = f"compressed-vlm[{compressor}:{budget}]"

    def start(self, request: DraftRequest) -> CompressedDraftSession:
        return CompressedDraftSession(self, request)
