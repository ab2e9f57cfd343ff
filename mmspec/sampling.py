"""Logits processing shared by target and drafter (temperature, top-k, top-p) and sync-free sampling.

Speculative sampling is only lossless when ``p`` and ``q`` are the *processed* distributions, processed the
same way: both sides call :func:`process_logits` with the same :class:`SamplingParams`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .checks import check_int, check_param, is_number


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.0  # 0 = greedy
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1 = off

    def __post_init__(self):
        t, p = self.temperature, self.top_p
        check_param("temperature", t, is_number(t) and t >= 0, "a finite number >= 0 (0 = greedy)")
        check_int("top_k", self.top_k, 0, note=" (0 = off)")
        check_param("top_p", p, is_number(p) and 0 < p <= 1, "a number in (0, 1]")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def process_logits(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """logits [..., V] -> processed probabilities [..., V] in float32 (temperature, then top-k, then top-p).

    Greedy params give the one-hot distribution of the argmax.
    """
    logits = logits.float()
    if params.greedy:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).float()
    logits = logits / params.temperature
    if params.top_k and params.top_k < logits.shape[-1]:
        kth = torch.topk(logits, params.top_k, dim=-1).values[..., -1:]  # [..., 1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    if params.top_p < 1.0:
        sorted_p, order = torch.sort(probs, dim=-1, descending=True)
        cum = sorted_p.cumsum(-1)
        drop_sorted = (cum - sorted_p) >= params.top_p  # keep the smallest prefix whose mass reaches top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        probs = probs.masked_fill(drop, 0.0)
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


def sample(weights: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """Sample an index from non-negative, not necessarily normalised ``weights [..., V]`` -> int64 [...].

    Exponential race: argmax(w / E) with E ~ Exp(1) i.i.d. is distributed as w / sum(w). No sort, no CDF, no
    host synchronisation, and no normalisation needed (so residuals can be sampled as they are).
    """
    e = torch.empty(weights.shape, dtype=torch.float32, device=weights.device).exponential_(generator=generator)
    return (weights.float() / e).argmax(-1)


def sample_tokens(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None = None):
    """logits [..., V] -> tokens [...]: argmax when greedy, else a sample from the processed distribution."""
    if params.greedy:
        return logits.argmax(-1)
    return sample(process_logits(logits, params), generator)
