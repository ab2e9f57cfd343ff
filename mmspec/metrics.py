"""Quality measures shared by benchmarks and zoo recipes: a classifier judge (condition accuracy and pooled features),
the Fréchet distance between feature sets, and the run-to-run spread test lossy methods are held to."""

from __future__ import annotations

import statistics
from typing import Callable, Sequence

import numpy as np
import torch


def within_spread(value: float, ref: list[float]) -> bool | None:
    """|value − mean(ref)| <= max(ref) − min(ref): inside the run-to-run spread of the plain runs (None: one run)."""
    return abs(value - statistics.mean(ref)) <= (max(ref) - min(ref)) if len(ref) > 1 else None


def frechet_distance(a: np.ndarray, b: np.ndarray) -> float:
    """Fréchet distance between Gaussians fitted to feature sets a [N, D] and b [M, D]."""
    from scipy import linalg

    mu_a, mu_b = a.mean(0), b.mean(0)
    cov_a, cov_b = np.cov(a, rowvar=False), np.cov(b, rowvar=False)
    covmean = np.real(linalg.sqrtm(cov_a @ cov_b))
    return float(((mu_a - mu_b) ** 2).sum() + np.trace(cov_a + cov_b - 2 * covmean))


class Judge:
    """The zoo's classifier as a quality judge: condition accuracy and pooled features for the Fréchet distance."""

    def __init__(self, model):
        self.model = model.eval()

    @torch.no_grad()
    def __call__(self, images: torch.Tensor) -> tuple[torch.Tensor, np.ndarray]:
        """images [B, 3, H, W] in [-1, 1] -> (predicted labels [B], features [B, D])."""
        out = self.model.resnet(images.to(self.model.dtype))
        feats = out.pooler_output.flatten(1)  # [B, D]
        labels = self.model.classifier(out.pooler_output).argmax(-1)
        return labels, feats.float().numpy()

    def quality(self, images, labels: list[int], real: np.ndarray, chunk: int = 256) -> tuple[float, float]:
        """(condition accuracy, Fréchet distance to ``real`` features) of ``images(start, stop)`` -> [n, 3, H, W]
        in [-1, 1] for the ``labels`` (judged ``chunk`` images at a time)."""
        preds, feats = [], []
        for start in range(0, len(labels), chunk):
            p, f = self(images(start, min(start + chunk, len(labels))))
            preds.append(p)
            feats.append(f)
        acc = float((torch.cat(preds) == torch.tensor(labels)).float().mean())
        return acc, frechet_distance(np.concatenate(feats), real)


@torch.no_grad()
def exact_match_accuracy(model, processor, items: Sequence, *, media: str, render: Callable, prompt: str,
                         truth: Callable, max_new_tokens: int, batch_size: int = 25) -> float:  # fmt: skip
    """Share of ``items`` for which greedy ``generate`` on ``processor(**{media: render(item)}, text=prompt)`` gives
    exactly ``truth(item)`` (the zoo cards' held-out caption accuracy; ``media`` "images" or "videos")."""
    correct = 0
    for start in range(0, len(items), batch_size):
        chunk = items[start : start + batch_size]
        enc = processor(**{media: [render(it) for it in chunk]}, text=[prompt] * len(chunk), padding=True, return_tensors="pt")
        out = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False)
        texts = processor.tokenizer.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
        correct += sum(t.strip() == truth(it) for t, it in zip(texts, chunk))
    return correct / len(items)
