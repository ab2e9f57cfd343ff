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


def card_entry(model, losses: list[float], steps: int, lr: float, **extra) -> dict:
    """A trained model's entry in a zoo card: parameters, steps, peak lr, mean loss of the last 20 steps, ``extra``."""
    return {"parameters": count_parameters(model), "steps": steps, "lr": lr,
            "final_loss": round(sum(losses[-20:]) / len(losses[-20:]), 4), **extra}  # fmt: skip


def pack_answers(tokenizer, prompt_ids: list[list[int]], answers) -> dict:
    """Right-padded training batch from prompt token ids and answer strings: ``input_ids``, ``attention_mask`` and
    ``labels`` (-100 outside the answer; the answer is followed by EOS)."""
    seqs, labels = [], []
    for p, a in zip(prompt_ids, answers):
        a_ids = tokenizer(a, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        seqs.append(list(p) + a_ids)
        labels.append([-100] * len(p) + a_ids)
    width = max(map(len, seqs))
    input_ids = torch.full((len(seqs), width), tokenizer.pad_token_id)
    label_t = torch.full((len(seqs), width), -100)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, (seq, lab) in enumerate(zip(seqs, labels)):
        input_ids[i, : len(seq)] = torch.tensor(seq)
        label_t[i, : len(lab)] = torch.tensor(lab)
        mask[i, : len(seq)] = 1
    return {"input_ids": input_ids, "attention_mask": mask, "labels": label_t}
