"""Per-op dispatch: the Triton kernel where it runs (CUDA tensors, Triton installed, the dtypes it handles), else the
torch reference. Both compute the same verdicts from the same pre-drawn randomness (tests/test_kernels.py)."""

from __future__ import annotations

import importlib.util

import torch

from .chain import greedy_chain_ref, greedy_chain_triton, speculative_chain_ref, speculative_chain_triton

HAS_TRITON = importlib.util.find_spec("triton") is not None


def use_triton(*tensors: torch.Tensor | None) -> bool:
    """Whether the Triton kernel serves these inputs: Triton installed and every tensor on a CUDA device."""
    return HAS_TRITON and all(t is None or t.is_cuda for t in tensors)


def greedy_chain(x: torch.Tensor, target_argmax: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Greedy chain verification: x [B, K], target_argmax [B, K+1] -> (n [B], next token [B])."""
    if use_triton(x, target_argmax):
        return greedy_chain_triton(x, target_argmax)
    return greedy_chain_ref(x, target_argmax)


def speculative_chain(x, p, q, u, e) -> tuple[torch.Tensor, torch.Tensor]:
    """Speculative-sampling chain verification + recovered-token sampling: x [B, K], p [B, K+1, V], q [B, K, V] or
    None, u [B, K] float64, e [B, V] -> (n [B], next token [B])."""
    f32 = p.dtype == torch.float32 and (q is None or q.dtype == torch.float32) and e.dtype == torch.float32
    if f32 and use_triton(x, p, q, u, e):
        return speculative_chain_triton(x, p, q, u, e)
    return speculative_chain_ref(x, p, q, u, e)
