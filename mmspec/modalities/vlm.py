"""VLM modality adapter: PIL images + prompts -> text, through the model's own processor and the engine.

>>> spec = VLMSpeculator(target, processor, drafter=small_vlm)          # or drafter=text_lm / NgramDrafter()
>>> out = spec.generate(image, "caption :", max_new_tokens=48)
>>> out.texts[0], out.stats.mean_accepted_tokens
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch
from PIL import Image

from ..config import SpecConfig
from ..drafters import Drafter, ModelDrafter
from ..engine import SpeculativeEngine
from ..types import SpecStats


@dataclass
class VLMOutput:
    texts: list[str]
    sequences: torch.Tensor  # [B, T_prompt + T_new]
    new_tokens: torch.Tensor  # [B, T_new]
    stats: SpecStats


def is_vlm(model) -> bool:
    return getattr(model.config, "vision_config", None) is not None


def as_drafter(drafter) -> Drafter:
    """A Drafter as given; a bare HF model becomes a ModelDrafter (text-only when it has no vision tower)."""
    if isinstance(drafter, Drafter):
        return drafter
    if isinstance(drafter, torch.nn.Module) and hasattr(drafter, "config"):
        return ModelDrafter(drafter, text_only=not is_vlm(drafter))
    raise TypeError(f"drafter: expected an mmspec Drafter or a Hugging Face model, got {type(drafter).__name__}")


def _as_list(value, name: str, kind, kind_name: str) -> list:
    items = value if isinstance(value, (list, tuple)) else [value]
    if not items:
        raise ValueError(f"{name}: expected at least one {kind_name}, got an empty list")
    for item in items:
        if not isinstance(item, kind):
            raise TypeError(f"{name}: expected {kind_name} (or a list of them), got {type(item).__name__}")
    return list(items)


def placeholder_token_ids(model, processor) -> tuple[int, ...]:
    """Ids of the tokens that stand for visual features in the *expanded* prompt (what the drafters must skip or
    compress): the model config's image / video token ids. Processors may name a different, user-facing token
    (Gemma 3's ``<start_of_image>`` expands to ``<image_soft_token>`` x N), so the processor is only a fallback."""
    cfg = model.config
    ids = [getattr(cfg, name, None) for name in ("image_token_id", "image_token_index", "video_token_id", "video_token_index")]
    ids = [i for i in ids if isinstance(i, int) and i >= 0]
    if ids:
        return tuple(dict.fromkeys(ids))
    tok = processor.tokenizer
    tokens = [getattr(processor, a, None) for a in ("image_token", "video_token")]
    return tuple(tok.convert_tokens_to_ids(t) for t in tokens if t)


def model_inputs(model, enc: dict) -> dict:
    """The processor outputs the model's forward takes for generation: no ``labels`` (PaliGemma's processor always
    makes them) and, for a forward without ``**kwargs``, nothing it does not name."""
    params = inspect.signature(model.forward).parameters
    open_kwargs = any(p.kind is p.VAR_KEYWORD for p in params.values())
    return {k: v for k, v in enc.items() if k != "labels" and (open_kwargs or k in params)}


def on_target(target, enc: dict) -> dict:
    """Processor outputs moved to the target's device; pixels (``pixel_values*``) in its dtype, other floats (e.g.
    Qwen2.5-VL's seconds per temporal patch, which feed positions) as they are."""
    param = next(target.parameters())

    def move(key, v):
        if not isinstance(v, torch.Tensor):
            return v
        return v.to(param.device, param.dtype if key.startswith("pixel_values") and v.is_floating_point() else None)

    return {k: move(k, v) for k, v in enc.items()}


def pair_prompts(media: list, prompts, kind: str, noun: str) -> list[str]:
    """One prompt per image / clip (a single prompt is repeated); empty prompts and count mismatches are refused."""
    prompts = _as_list(prompts, "prompt", str, "a str")
    if any(not p.strip() for p in prompts):
        raise ValueError("prompt: expected a non-empty string, got an empty prompt")
    prompts = prompts * len(media) if len(prompts) == 1 and len(media) > 1 else prompts
    if len(media) != len(prompts):
        raise ValueError(f"{kind}/prompt: expected one {noun} per prompt, got {len(media)} {noun}s and {len(prompts)} prompts")
    return prompts


class VLMSpeculator:
    """Speculative decoding for image-text-to-text models (LLaVA, Qwen2-VL and other HF classes)."""

    def __init__(self, target, processor, drafter, verifier: str | None = None, num_draft_tokens: int = 4,
                 **config_kwargs):  # fmt: skip
        self.target = target.eval()
        self.processor = processor
        tok = processor.tokenizer
        self.image_token = getattr(processor, "image_token", None) or "<image>"  # what a prompt writes per image
        placeholder_ids = placeholder_token_ids(target, processor)
        self._config_kwargs = dict(num_draft_tokens=num_draft_tokens, verifier=verifier, eos_token_id=tok.eos_token_id,
                                   **config_kwargs)  # fmt: skip
        self.config = SpecConfig(**self._config_kwargs)
        self._engine_kwargs = dict(placeholder_ids=placeholder_ids, pad_token_id=tok.pad_token_id, vocab_size=len(tok))
        self.engine = SpeculativeEngine(target, as_drafter(drafter), self.config, **self._engine_kwargs)

    def prepare(self, images, prompts) -> dict:
        """Processor inputs for a batch; one image per prompt; prompts get the image placeholder if missing."""
        images = _as_list(images, "image", Image.Image, "a PIL.Image.Image")
        prompts = pair_prompts(images, prompts, "image", "image")
        prompts = [p if self.image_token in p else f"{self.image_token} {p}" for p in prompts]
        # one list of images per prompt: processors that count images per sample (Gemma 3, Idefics3) need the nesting
        enc = self.processor(images=[[im.convert("RGB")] for im in images], text=prompts, padding=True, return_tensors="pt")
        return on_target(self.target, model_inputs(self.target, enc))

    def generate(self, image, prompt, *, max_new_tokens: int = 32, generator: torch.Generator | None = None,
                 drafter=None, **overrides) -> VLMOutput:  # fmt: skip
        """Caption / answer: ``image`` a PIL image (or list), ``prompt`` a str (or list).

        ``drafter``: another drafter for this call (default: the speculator's). ``overrides`` are SpecConfig fields for
        this call: num_draft_tokens, verifier, temperature, top_k, top_p, seed, rows, tree, draft_length_policy, ...
        """
        return self._decode(self.prepare(image, prompt), max_new_tokens, generator, overrides, drafter)

    def _decode(self, enc: dict, max_new_tokens: int, generator, overrides: dict, drafter=None) -> VLMOutput:
        """Run the engine on processor outputs ``enc`` with this call's config overrides; decode the new text."""
        cfg = SpecConfig(**{**self._config_kwargs, "max_new_tokens": max_new_tokens, **overrides})
        engine = self.engine if drafter is None else SpeculativeEngine(self.target, as_drafter(drafter), cfg, **self._engine_kwargs)
        ids, mask = enc.pop("input_ids"), enc.pop("attention_mask")
        out = engine.generate(ids, mask, config=cfg, generator=generator, **enc)
        texts = self.processor.tokenizer.batch_decode(out.new_tokens, skip_special_tokens=True)
        return VLMOutput([t.strip() for t in texts], out.sequences, out.new_tokens, out.stats)
