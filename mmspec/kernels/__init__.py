"""Compute kernels: one dispatcher per op picks the Triton kernel for CUDA tensors when Triton is installed, else the
torch reference it is tested against (:mod:`.chain`: chain verification, the core of the exact token verifiers)."""

from .chain import (greedy_chain_ref, greedy_chain_triton, speculative_chain_ref, speculative_chain_triton)
from .dispatch import HAS_TRITON, greedy_chain, speculative_chain, use_triton

__all__ = [
    "HAS_TRITON", "greedy_chain", "greedy_chain_ref", "greedy_chain_triton", "speculative_chain", "speculative_chain_ref",
    "speculative_chain_triton", "use_triton",
]  # fmt: skip
