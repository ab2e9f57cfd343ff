"""Jacobi window bookkeeping shared by the window drafter (:mod:`mmspec.drafters.jacobi`) and the Jacobi verification
rules (:mod:`mmspec.verifiers.jacobi`): the exponential race, fresh-slot initialisation and the shift of a window
after a commit (see the rules' module docstring for the layout: slot i = 1..K-n carries position t+n+1+i, the last n
slots are fresh, with one-hot proposals)."""

from __future__ import annotations

from typing import Callable

import torch


def race(weights: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
    """Exponential race: argmax(w / E), E ~ Exp(1), samples w / sum(w) (as :func:`mmspec.sampling.sample`)."""
    return (weights.float() / e.clamp_min(torch.finfo(torch.float32).tiny)).argmax(-1)  # [...]


def shift_window(samples: torch.Tensor, p: torch.Tensor, n: torch.Tensor, fresh: torch.Tensor | None) -> tuple:
    """The next window after committing n + 1 tokens (see the module docstring).

    samples [B, L] S_j per scored position, p [B, L, V], n [B], fresh [B, K] tokens for fresh slots or None
    ("repeat": S_K) -> (tokens [B, K], probs [B, K, V]).
    """
    b, big_l = samples.shape
    k = big_l - 1
    slot = torch.arange(1, k + 1, device=samples.device)  # [K] new slot index i
    src = slot[None, :] + n[:, None]  # [B, K] scored position j = n + i this slot inherits
    carried = src <= k  # [B, K] slots 1..K-n
    src = src.clamp_max(k)  # [B, K] (fresh slots: any valid index, overwritten below)
    fresh = samples[:, k:].expand(b, k) if fresh is None else fresh  # [B, K]
    tokens = torch.where(carried, samples.gather(1, src), fresh)  # [B, K]
    probs = p.gather(1, src[..., None].expand(b, k, p.shape[-1])).masked_fill(~carried[..., None], 0)  # [B, K, V]
    probs.scatter_add_(-1, fresh[..., None], (~carried[..., None]).to(p.dtype))  # [B, K, V] one-hot on fresh slots
    return tokens, probs


def _fresh_random(b: int, k: int, vocab: int, device, generator) -> torch.Tensor:
    return torch.randint(vocab, (b, k), device=device, generator=generator)  # [B, K]


def _fresh_repeat(b: int, k: int, vocab: int, device, generator) -> None:
    return None  # the core copies S_K into the fresh slots


FRESH_INIT: dict[str, Callable] = {"random": _fresh_random, "repeat": _fresh_repeat}


def check_init(init) -> str:
    if not isinstance(init, str) or init not in FRESH_INIT:
        raise ValueError(f"init: expected one of {sorted(FRESH_INIT)} (how fresh window slots are filled), got {init!r}")
    return init
