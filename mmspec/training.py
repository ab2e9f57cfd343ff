"""The training loop every zoo recipe and alignment utility shares: AdamW, linear warm-up, cosine decay, gradient clipping, tqdm."""

from __future__ import annotations

import math
import random
from typing import Callable, Iterable

import torch
from tqdm import tqdm


def fit(loss_fn: Callable[[random.Random], torch.Tensor], params: Iterable[torch.nn.Parameter], *, steps: int,
        lr: float, seed: int, desc: str, weight_decay: float = 0.01) -> list[float]:  # fmt: skip
    """Minimise ``loss_fn(rng)`` (which draws its own fresh batch from ``rng``) for ``steps`` steps.

    Returns the per-step loss curve. The caller switches its modules between train() and eval().
    """
    if steps < 1:
        raise ValueError(f"steps: expected an int >= 1, got {steps!r}")
    torch.manual_seed(seed)
    rng = random.Random(seed)
    params = [p for p in params if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, betas=(0.9, 0.98))
    warmup = max(1, steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(1.0, s / steps)))
    )
    losses: list[float] = []
    bar = tqdm(range(steps), desc=desc)
    for step in bar:
        loss = loss_fn(rng)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
        if step % 20 == 0:
            bar.set_postfix(loss=f"{sum(losses[-20:]) / len(losses[-20:]):.4f}")
    return losses


def count_parameters(model) -> int:
    return sum(p.numel() for p in model.parameters())
