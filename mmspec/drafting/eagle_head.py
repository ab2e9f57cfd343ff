"""The EAGLE-style drafter head (METHODS.md §2; Li et al. 2024, EAGLE, arXiv:2401.15077): one Llama decoder layer
over ``fc([embed(x_{i+1}); f_i])`` that predicts the target's next final-norm feature. A model, not a drafter: the
drafter that runs it is :class:`mmspec.drafters.eagle.EagleDrafter`; it is trained by
:func:`mmspec.training.distill.distill_eagle_head`."""

from __future__ import annotations

import torch
from huggingface_hub import PyTorchModelHubMixin
from transformers import DynamicCache, LlamaConfig
from transformers.masking_utils import create_causal_mask
from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

from ..models import text_config_of, with_cache


class EagleHead(torch.nn.Module, PyTorchModelHubMixin):
    """fc(2H -> H) + one Llama decoder layer; saved/loaded with ``save_pretrained`` / ``from_pretrained`` (safetensors
    + config.json)."""

    def __init__(self, hidden_size: int, num_attention_heads: int, intermediate_size: int,
                 num_key_value_heads: int | None = None, rms_norm_eps: float = 1e-6, rope_theta: float = 10000.0,
                 max_position_embeddings: int = 4096):  # fmt: skip
        super().__init__()
        self.layer_config = LlamaConfig(
            vocab_size=1, hidden_size=hidden_size, num_attention_heads=num_attention_heads,
            num_key_value_heads=num_key_value_heads or num_attention_heads, intermediate_size=intermediate_size,
            num_hidden_layers=1, rms_norm_eps=rms_norm_eps, max_position_embeddings=max_position_embeddings,
            rope_parameters={"rope_type": "default", "rope_theta": rope_theta},
            bos_token_id=None, eos_token_id=None, pad_token_id=None,  # the head has no vocabulary of its own
        )  # fmt: skip
        self.layer_config._attn_implementation = "sdpa"
        self.fc = torch.nn.Linear(2 * hidden_size, hidden_size, bias=False)
        self.layer = LlamaDecoderLayer(self.layer_config, layer_idx=0)
        self.rotary = LlamaRotaryEmbedding(self.layer_config)

    @classmethod
    def for_target(cls, target, intermediate_size: int | None = None) -> "EagleHead":
        """A head sized like one of ``target``'s decoder layers."""
        tc = text_config_of(target)
        return cls(hidden_size=tc.hidden_size, num_attention_heads=tc.num_attention_heads,
                   intermediate_size=intermediate_size or tc.intermediate_size,
                   num_key_value_heads=getattr(tc, "num_key_value_heads", None),
                   rms_norm_eps=getattr(tc, "rms_norm_eps", 1e-6))  # fmt: skip

    def forward(self, token_embeds: torch.Tensor, features: torch.Tensor, attention_mask=None,
                position_ids: torch.Tensor | None = None, cache: DynamicCache | None = None) -> torch.Tensor:  # fmt: skip
        """token_embeds [B, L, H] = embed(x_{i+1}), features [B, L, H] = f_i -> predicted features f^_{i+1} [B, L, H].

        ``attention_mask``: [B, S] padding mask (S = cached + L) or an additive 4-D mask (trees); ``position_ids``
        [B, L] (default: 0..L-1).
        """
        h = self.fc(torch.cat([token_embeds, features.to(token_embeds.dtype)], dim=-1))  # [B, L, H]
        if position_ids is None:
            position_ids = torch.arange(h.shape[1], device=h.device).expand(h.shape[0], -1)
        mask = create_causal_mask(config=self.layer_config, inputs_embeds=h, attention_mask=attention_mask,
                                  position_ids=position_ids, **with_cache(create_causal_mask, cache))  # fmt: skip
        out = self.layer(h, attention_mask=mask, position_ids=position_ids, **with_cache(self.layer, cache),
                         use_cache=cache is not None, position_embeddings=self.rotary(h, position_ids))  # fmt: skip
        return out[0] if isinstance(out, tuple) else out
