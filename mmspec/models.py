"""What mmspec needs to know about Hugging Face model classes, in one place: configs, the decoder stack, logits width,
M-RoPE, rotary embeddings per layer type, the output head's scalings, eager attention, feature taps and multimodal
prompt embeddings. Runners, drafters and training code ask here instead of poking at model internals themselves."""

from __future__ import annotations

import functools
import inspect
from contextlib import contextmanager

import torch

from .layout import FULL


def text_config_of(model):
    cfg = model.config
    return cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg


@functools.lru_cache(maxsize=None)
def _cache_keyword(fn) -> str:
    return "cache" if "cache" in inspect.signature(fn).parameters else "past_key_values"


def with_cache(callee, cache) -> dict:
    """``{keyword: cache}`` for calling ``callee`` (a module or a function such as ``create_causal_mask``) with a KV
    cache: transformers 5.2x takes it as ``cache`` (``past_key_values`` is deprecated, to go in 5.40), earlier releases
    as ``past_key_values`` — the keyword is read off the callee's signature."""
    fn = type(callee).forward if isinstance(callee, torch.nn.Module) else callee
    return {_cache_keyword(fn): cache}


def decoder_of(model):
    """The model's decoder stack (the module holding ``layers``, ``norm`` and ``embed_tokens``): ``get_decoder()``,
    or its ``model`` / ``language_model`` when that is only a wrapper (Llama 4's causal LM)."""
    decoder = model.get_decoder()
    for candidate in (decoder, getattr(decoder, "model", None), getattr(decoder, "language_model", None)):
        if candidate is not None and hasattr(candidate, "layers") and hasattr(candidate, "norm"):
            return candidate
    raise ValueError(f"model: cannot find the decoder layers of {type(model).__name__} (expected a module with "
                     "`layers` and `norm`, as Llama-style decoders have)")


def logits_width(model) -> int:
    """Width of the model's output logits (the padded vocabulary size)."""
    head = model.get_output_embeddings()
    return head.weight.shape[0] if head is not None else text_config_of(model).vocab_size


def uses_mrope(model) -> bool:
    """Models whose language model takes 3-D (temporal, height, width) rotary positions."""
    inner = getattr(model, "model", None)
    return inner is not None and hasattr(inner, "get_rope_index")


@contextmanager
def eager_attention(model):
    """Temporarily switch a model to eager attention (SDPA does not return attention weights), then restore."""
    old = model.config._attn_implementation
    model.set_attn_implementation("eager")
    try:
        yield model
    finally:
        model.set_attn_implementation(old)


def rotary_embeddings(decoder, hidden: torch.Tensor, position_ids: torch.Tensor, layer_type: str = FULL):
    """The decoder's rotary (cos, sin) for ``position_ids``; decoders with one rotary embedding per layer type (Gemma 3)
    take the type."""
    rope = decoder.rotary_emb
    if _takes_layer_type(type(rope)):
        return rope(hidden, position_ids, layer_type)
    return rope(hidden, position_ids)


@functools.cache
def _takes_layer_type(rope_class) -> bool:
    return "layer_type" in inspect.signature(rope_class.forward).parameters


def output_logits(model, hidden: torch.Tensor) -> torch.Tensor:
    """The model's logits for final-norm ``hidden`` states computed outside its forward: the LM head, then the output
    scalings Hugging Face causal LMs apply after it (Gemma 2/3's ``final_logit_softcapping``, Cohere's
    ``logit_scale``, Granite's ``logits_scaling``)."""
    logits = model.get_output_embeddings()(hidden)
    cfg = text_config_of(model)
    if getattr(cfg, "logit_scale", None) is not None:
        logits = logits * cfg.logit_scale
    if getattr(cfg, "logits_scaling", None) is not None:
        logits = logits / cfg.logits_scaling
    cap = getattr(cfg, "final_logit_softcapping", None)
    return logits if cap is None else torch.tanh(logits / cap) * cap


class FeatureTap:
    """Forward hooks on a decoder that record its final-norm output (the features the LM head reads) and, for a
    prefill, its input embeddings (image/video features merged in)."""

    def __init__(self, model):
        self.decoder = decoder_of(model)
        self.features: torch.Tensor | None = None  # [B, L, H]
        self.embeds: torch.Tensor | None = None  # [B, L, H]

    def _pre(self, _module, args, kwargs):
        embeds = kwargs.get("inputs_embeds")
        if embeds is None:
            ids = kwargs.get("input_ids", args[0] if args else None)
            embeds = self.decoder.embed_tokens(ids)
        self.embeds = embeds

    def _post(self, _module, _args, output):
        self.features = output

    def __enter__(self):
        self.handles = [self.decoder.register_forward_pre_hook(self._pre, with_kwargs=True),
                        self.decoder.norm.register_forward_hook(self._post)]  # fmt: skip
        return self

    def __exit__(self, *exc):
        for h in self.handles:
            h.remove()


class _Embeds(Exception):
    def __init__(self, embeds):
        self.embeds = embeds


def prompt_embeddings(model, input_ids, attention_mask, position_ids, model_kwargs) -> torch.Tensor:
    """The language model's input embeddings for a (multimodal) prompt, from the model's own embedding path.

    Runs the model only up to its decoder (the decoder's forward pre-hook stops it there).
    """
    decoder = decoder_of(model)

    def grab(_module, args, kwargs):
        raise _Embeds(kwargs.get("inputs_embeds"))

    handle = decoder.register_forward_pre_hook(grab, with_kwargs=True)
    try:
        model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, **model_kwargs)
    except _Embeds as e:
        if e.embeds is not None:
            return e.embeds
    finally:
        handle.remove()
    return decoder.embed_tokens(input_ids)
