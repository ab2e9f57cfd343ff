"""A small-VLM drafter that sees a compressed image: M << N visual tokens per image (METHODS.md §2).

The drafter's own merged prompt embeddings (text embeddings with its image features in the placeholder span) are
taken from its own embedding path, the visual span is compressed by a registered compressor
(:mod:`mmspec.drafting.compression`), and the drafter is prefilled from the shorter embedding sequence. Only the
drafter's view changes: the target still verifies with every visual token, so decoding stays lossless, and the
drafter's prefill and KV cache shrink by N - M tokens per image.

With ``source="target-features"`` (or ``"target-embeds"``) a learned compressor reads the *target's* visual tokens
from the target's own prefill (its final-norm hidden states, or its LM input embeddings with the video features
merged in) instead of the drafter's: the drafter runs no vision tower and embeds only the text, so its set-up is the
compressor plus a prefill over T - N + M tokens (target-informed compression, survey §3.3).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.profiler import record_function

from ..checks import check_int
from ..drafting.compression import COMPRESSORS, visual_attention_scores
from ..registry import Registry
from ..runner import ModelRunner
from .base import DRAFTERS, DraftRequest
from ..models import prompt_embeddings
from .model import ModelDrafter, ModelDraftSession


@dataclass
class CompressedPrompt:
    embeds: torch.Tensor  # [B, T', D] with T' = T - N + M
    mask: torch.Tensor  # [B, T']
    positions: torch.Tensor | None = None  # [B, T', P] when positions were given
    labels: torch.Tensor | None = None  # [B, T'] when labels were given (-100 on the compressed visual slots)


def compress_prompt(embeds, input_ids, attention_mask, placeholder_ids, compress, positions=None,
                    labels=None, visual_source=None) -> CompressedPrompt:  # fmt: skip
    """Replace each row's visual span (one image or clip, N placeholders) by ``compress(visual [B, N, E], visual_mask,
    carry) -> [B, M, D]`` (or ``(tokens, carry)`` when ``positions`` are given).

    embeds [B, T, D], input_ids / attention_mask [B, T]. The visual tokens handed to ``compress`` are ``embeds``' own
    (E = D), or ``visual_source [B, T, E]``'s at the placeholder positions (e.g. the target's hidden states). ``positions [B, T, P]`` (e.g. 3-D rotary positions): text
    keeps its own, visual slots get what the compressor carried (the kept tokens' own, or group means rounded).
    ``labels [B, T]`` (training): text keeps its labels, compressed visual slots get -100.
    """
    visual = torch.zeros_like(input_ids, dtype=torch.bool)
    for pid in placeholder_ids:
        visual |= input_ids == pid
    visual &= attention_mask.bool()
    counts = visual.sum(-1)
    if int(counts.min()) != int(counts.max()) or int(counts.min()) == 0:
        raise ValueError(f"input_ids: compressed drafting needs one image or clip (the same N visual tokens) per row, "
                         f"got {counts.tolist()}")  # fmt: skip
    b, t, d = embeds.shape
    n = int(counts[0])
    carry = None if positions is None else positions[visual].view(b, n, -1).float()
    source = embeds if visual_source is None else visual_source  # [B, T, E]
    if source.shape[:2] != embeds.shape[:2]:
        raise ValueError(f"visual_source: expected [B, T, E] with (B, T) = {tuple(embeds.shape[:2])}, got "
                         f"{tuple(source.shape)}")  # fmt: skip
    small = compress(source[visual].view(b, n, source.shape[-1]), visual, carry)  # [B, M, D] (+ carried [B, M, P])
    small, small_pos = small if positions is not None else (small, None)
    m = small.shape[1]
    first = visual.long().argmax(-1)  # [B] start of each row's span (contiguous placeholders)
    pos = torch.arange(t - n + m, device=embeds.device).expand(b, -1)  # [B, T'] output positions
    src = torch.where(pos < first[:, None], pos, pos + n - m)  # [B, T'] source position of each kept token
    in_span = (pos >= first[:, None]) & (pos < first[:, None] + m)  # [B, T'] compressed visual slots
    slot = (pos - first[:, None]).clamp(0, m - 1)[..., None]  # [B, T', 1] index into the compressed span

    def place(full, span):  # full [B, T, E], span [B, M, E] -> [B, T', E]
        out = full.gather(1, src[..., None].expand(-1, -1, full.shape[-1]))
        return torch.where(in_span[..., None], span.gather(1, slot.expand(-1, -1, span.shape[-1])), out)

    if small.shape[-1] != d:
        raise ValueError(f"compress: expected visual tokens of the drafter's width {d}, got {tuple(small.shape)}")
    out = CompressedPrompt(place(embeds, small.to(embeds.dtype)), attention_mask.gather(1, src))
    if positions is not None:
        out.positions = place(positions, small_pos.round().to(positions.dtype))
    if labels is not None:
        out.labels = labels.gather(1, src).masked_fill(in_span, -100)
    return out


def visual_grid(model, model_kwargs) -> tuple[int, ...] | None:
    """The visual token grid of a Qwen2-VL-style input (after the spatial merge): (h, w) for an image, (t, h, w) for
    a clip; None when the inputs do not say (square grids are assumed then)."""
    merge = getattr(getattr(model.config, "vision_config", None), "spatial_merge_size", 1)
    for key in ("video_grid_thw", "image_grid_thw"):
        thw = model_kwargs.get(key)
        if thw is not None:
            t, h, w = (int(v) for v in thw[0])
            return (h // merge, w // merge) if t == 1 else (t, h // merge, w // merge)
    return None


# Where a compressed drafter's visual tokens come from: the target's prefill, read off the engine's target runner
# (recorded with keep_features). Each entry: runner -> [B, T, E] over the prompt. "drafter" (its own view) is the
# default and is not an entry: it needs the drafter's own embedding path.
TARGET_VIEWS: Registry = Registry("visual source")
TARGET_VIEWS.register("target-features")(lambda runner: runner.features)  # final-norm hidden states [B, T, H]
TARGET_VIEWS.register("target-embeds")(lambda runner: runner.prompt_embeds)  # LM input, video features merged


def text_embeddings(model, input_ids) -> torch.Tensor:
    """[B, T, D] the drafter's token embeddings (placeholder slots get the placeholder's embedding: they are
    replaced by the compressed visual tokens)."""
    return model.get_input_embeddings()(input_ids)


SETUP_STEPS = ("drafter set-up: embed", "drafter set-up: compress", "drafter set-up: LM prefill")  # profiler labels


class CompressedDraftSession(ModelDraftSession):
    def __init__(self, drafter: "CompressedVLMDrafter", request: DraftRequest):
        model = drafter.model
        self.runner = ModelRunner(model, request.vocab_size)
        self.sampling, self.need_probs = request.sampling, request.need_probs
        ids, mask = request.input_ids, request.attention_mask
        positions = self.runner.prompt_positions(ids, mask, request.model_kwargs)  # [B, T] or [3, B, T] (M-RoPE)
        with record_function(SETUP_STEPS[0]):
            if drafter.source == "drafter":
                embeds = prompt_embeddings(model, ids, mask, positions, request.model_kwargs)  # [B, T, D] its own view
                source = None
            else:  # the target's view: no vision tower here, the text is embedded by the drafter
                if request.target_runner is None:
                    raise ValueError(f"CompressedVLMDrafter(source={drafter.source!r}): needs the engine's target runner")
                source = TARGET_VIEWS.get(drafter.source)(request.target_runner)  # [B, T, E]
                embeds = text_embeddings(model, ids)  # [B, T, D]
        grid = drafter.grid or visual_grid(model, request.model_kwargs)

        def compress(visual_tokens, visual_mask, carry):
            scores = None
            if drafter.needs_scores:
                scores = visual_attention_scores(model, ids, mask, visual_mask, position_ids=positions, **request.model_kwargs)
            return drafter.compressor(visual_tokens, drafter.budget, scores=scores, grid=grid, carry=carry)

        mrope = self.runner.mrope  # 3-D rotary positions travel with the visual tokens they belong to; 1-D: renumbered
        with record_function(SETUP_STEPS[1]):
            out = compress_prompt(embeds, ids, mask, request.placeholder_ids, compress if mrope else lambda v, m, c: compress(v, m, None),
                                  positions.permute(1, 2, 0) if mrope else None, visual_source=source)  # fmt: skip
        with record_function(SETUP_STEPS[2]):
            self.runner.prefill(None, out.mask, inputs_embeds=out.embeds,
                                **({"position_ids": out.positions.permute(2, 0, 1)} if mrope else {}))  # fmt: skip
        self.visual_tokens = drafter.budget
        self.carry = ids.new_zeros((ids.shape[0], 0))
        self._feed, self._k = self.carry, 0


@DRAFTERS.register("compressed-vlm")
class CompressedVLMDrafter(ModelDrafter):
    """A small VLM drafter whose image is compressed to ``budget`` visual tokens by ``compressor`` ("grid-pool",
    "top-k", "merge", "two-stage"); score-based compressors rank tokens by the drafter's own text-to-image
    attention (one eager pass at prefill); or a learned compressor module such as a
    :class:`~mmspec.drafting.query_adaptor.QueryAdaptor` (``budget`` = its query count). ``grid`` = the (h, w) or
    (t, h, w) visual token grid (default: from ``image_grid_thw`` / ``video_grid_thw``, else square).

    ``source``: whose visual tokens are compressed: ``"drafter"`` (its own vision tower), or the target's from its
    prefill, ``"target-features"`` (final-norm hidden states) / ``"target-embeds"`` (LM input embeddings); a target
    source needs a learned compressor mapping the target's width to the drafter's (a QueryAdaptor with
    ``input_size`` = the target's hidden size). Default: the compressor's own ``source`` (what a QueryAdaptor was
    trained on), else ``"drafter"``."""

    def __init__(self, model, compressor="grid-pool", budget: int = 4, grid: tuple[int, ...] | None = None,
                 source: str | None = None):  # fmt: skip
        super().__init__(model, text_only=False)
        source = source or getattr(compressor, "source", None) or "drafter"
        if callable(compressor):  # a learned compressor, e.g. a QueryAdaptor
            self.compressor, self.needs_scores = compressor, False
            compressor = type(compressor).__name__
        else:
            self.compressor = COMPRESSORS.get(compressor)
            self.needs_scores = compressor in ("top-k", "two-stage")
        check_int("budget", budget, 1, note=" (visual tokens the drafter keeps)")
        if source != "drafter":
            if source not in TARGET_VIEWS:
                raise ValueError(f"source: expected 'drafter' or one of {TARGET_VIEWS.names()}, got {source!r}")
            if not isinstance(self.compressor, torch.nn.Module):
                raise ValueError(f"source: {source!r} reads the target's visual tokens, which only a learned compressor "
                                 f"(e.g. a QueryAdaptor with input_size = the target's width) can map to the drafter; "
                                 f"got compressor {compressor!r}")  # fmt: skip
        self.budget, self.grid, self.source = budget, grid, source
        self.needs_target_features = source != "drafter"  # the engine's target runner records its prefill view
        self.name = f"compressed-vlm[{compressor}:{budget}]" + ("" if source == "drafter" else f"<-{source}")

    def start(self, request: DraftRequest) -> CompressedDraftSession:
        return CompressedDraftSession(self, request)
