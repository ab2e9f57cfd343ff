"""Early-exit self-speculation (LayerSkip / Draft & Verify style): the target's first ``n`` decoder layers, its
final norm and its LM head draft; the full target verifies. No second model: the drafter is the target's own
weights. The draft keeps its own KV cache for those n layers (the target's cache is never touched by drafts), but
it starts from a copy of the target's prefill KV for those layers: no second prefill and, for a VLM, no second
pass of the vision tower. When no target runner is given, it prefills itself.

Works with decoders of the Llama family (``embed_tokens``, ``layers``, ``norm``, ``rotary_emb``) standing alone
or as the language model of a VLM, M-RoPE decoders (Qwen2-VL) included; for a VLM the prompt embeddings (with image features merged) are taken from
the target's own embedding path.
"""

from __future__ import annotations

import torch
from transformers.masking_utils import create_causal_mask

from ..runner import ModelRunner, text_config_of
from .base import DRAFTERS, DraftRequest, Drafter
from .model import ModelDraftSession


class _Embeds(Exception):
    def __init__(self, embeds):
        self.embeds = embeds


def prompt_embeddings(model, input_ids, attention_mask, position_ids, model_kwargs) -> torch.Tensor:
    """The language model's input embeddings for a (multimodal) prompt, from the model's own embedding path.

    Runs the model only up to its decoder (the decoder's forward pre-hook stops it there).
    """
    decoder = model.get_decoder()

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


class EarlyExitRunner(ModelRunner):
    def __init__(self, model, vocab_size, num_layers: int):
        super().__init__(model, vocab_size)
        self.decoder = model.get_decoder()
        self.head = model.get_output_embeddings()
        self.num_layers = num_layers
        self.text_config = text_config_of(model)

    def _forward(self, input_ids, attention_mask, position_ids, logits_to_keep=0, **model_kwargs):
        if model_kwargs:  # multimodal prefill: embeddings with image features merged
            h = prompt_embeddings(self.model, input_ids, attention_mask, position_ids, model_kwargs)
        else:
            h = self.decoder.embed_tokens(input_ids)
        text_positions = None if position_ids.dim() == 3 else position_ids  # M-RoPE: 3-D positions feed rope only
        mask = create_causal_mask(config=self.text_config, inputs_embeds=h, attention_mask=attention_mask,
                                  past_key_values=self.cache, position_ids=text_positions)  # fmt: skip
        rope = self.decoder.rotary_emb(h, position_ids)
        for layer in self.decoder.layers[: self.num_layers]:
            h = layer(h, attention_mask=mask, position_embeddings=rope, position_ids=text_positions,
                      past_key_values=self.cache, use_cache=True)  # fmt: skip
            h = h[0] if isinstance(h, tuple) else h
        h = self.decoder.norm(h[:, -logits_to_keep:] if logits_to_keep else h)
        return self.head(h)


class EarlyExitDraftSession(ModelDraftSession):
    def __init__(self, model, request: DraftRequest, num_layers: int):
        self.runner = EarlyExitRunner(model, request.vocab_size, num_layers)
        self.sampling, self.need_probs = request.sampling, request.need_probs
        if request.target_runner is not None and request.target_runner.model is model:
            self.runner.prefill_from(request.target_runner, num_layers)  # reuse the target's first n layers of KV
        else:
            self.runner.prefill(request.input_ids, request.attention_mask, **request.model_kwargs)
        self.carry = request.input_ids.new_zeros((request.input_ids.shape[0], 0))
        self._feed, self._k = self.carry, 0


@DRAFTERS.register("early-exit")
class EarlyExitDrafter(Drafter):
    """Self-speculation with the target's first ``num_layers`` layers + LM head."""

    name = "early-exit"

    def __init__(self, target, num_layers: int):
        decoder = target.get_decoder()
        total = len(decoder.layers)
        if not isinstance(num_layers, int) or not 1 <= num_layers < total:
            raise ValueError(f"num_layers: expected an int in [1, {total - 1}] (the target has {total} layers), got {num_layers!r}")
        self.target, self.num_layers = target, num_layers

    def check_compatible(self, target, vocab_size: int) -> None:
        if target is not self.target:
            raise ValueError("EarlyExitDrafter: built for a different target model than the engine's")

    def start(self, request: DraftRequest):
        return EarlyExitDraftSession(self.target, request, self.num_layers)
