"""A learned query adaptor (Q-Former-style) that compresses N visual tokens to M learned queries for a drafter.

M query vectors cross-attend to the visual tokens (pre-norm multi-head attention + MLP, residual), giving M tokens
in the drafter's embedding space. The visual tokens are the drafter's own (``input_size`` = its hidden size) or the
target's, read from the target's prefill (``input_size`` = the target's hidden size; see
:class:`~mmspec.drafters.CompressedVLMDrafter`'s ``source``): then the drafter runs no vision tower at all.

It is a visual token compressor with the registry's call signature, so
``CompressedVLMDrafter(drafter, compressor=adaptor, budget=M)`` uses it like the training-free ones; carried features
(e.g. 3-D rotary positions) become the attention-weighted mean over the visual tokens each query reads.

Trained jointly with its drafter by :func:`mmspec.training.distill.distill_compressed_drafter` (the zoo recipe for
shapes-video does this); saved with ``save_pretrained`` (safetensors + config.json).
"""

from __future__ import annotations

import torch
from huggingface_hub import PyTorchModelHubMixin


class QueryAdaptor(torch.nn.Module, PyTorchModelHubMixin):
    def __init__(self, hidden_size: int, num_queries: int, num_heads: int = 4, mlp_ratio: int = 2,
                 input_size: int | None = None, source: str = "drafter"):  # fmt: skip
        super().__init__()
        if hidden_size % num_heads:
            raise ValueError(f"num_heads: expected a divisor of hidden_size {hidden_size}, got {num_heads}")
        self.num_queries = num_queries
        self.input_size = input_size or hidden_size  # E: width of the visual tokens it reads
        self.source = source  # whose visual tokens it was trained on: "drafter", "target-features", "target-embeds"
        self.queries = torch.nn.Parameter(torch.randn(num_queries, hidden_size) * 0.02)  # [M, D]
        self.norm_q = torch.nn.LayerNorm(hidden_size)
        self.norm_kv = torch.nn.LayerNorm(self.input_size)
        self.attn = torch.nn.MultiheadAttention(hidden_size, num_heads, batch_first=True, kdim=self.input_size,
                                                vdim=self.input_size)  # fmt: skip
        self.norm_mlp = torch.nn.LayerNorm(hidden_size)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(hidden_size, mlp_ratio * hidden_size), torch.nn.GELU(),
                                       torch.nn.Linear(mlp_ratio * hidden_size, hidden_size))  # fmt: skip
        self.scale = torch.nn.Parameter(torch.ones(1))  # output scale: matches the drafter's embedding norms

    def forward(self, tokens: torch.Tensor, budget: int | None = None, scores=None, grid=None, carry=None):
        """tokens [B, N, E] -> [B, M, D] (and carried [B, M, P] when ``carry [B, N, P]`` is given)."""
        if tokens.dim() != 3 or tokens.shape[-1] != self.input_size:
            raise ValueError(f"tokens: expected [B, N, {self.input_size}], got {tuple(tokens.shape)}")
        if budget is not None and budget != self.num_queries:
            raise ValueError(f"budget: this adaptor has {self.num_queries} learned queries, got budget={budget}")
        kv = self.norm_kv(tokens.to(self.queries.dtype))
        q = self.norm_q(self.queries).expand(tokens.shape[0], -1, -1)  # [B, M, D]
        read, weights = self.attn(q, kv, kv, need_weights=carry is not None)  # [B, M, D], [B, M, N]
        h = self.queries + read
        h = h + self.mlp(self.norm_mlp(h))
        out = (self.scale * h).to(tokens.dtype)
        if carry is None:
            return out
        return out, weights.to(carry.dtype) @ carry  # [B, M, P] attention-weighted carried features
