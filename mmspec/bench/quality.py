"""The shapes-t2i quality set-up shared by the image-AR and diffusion benches: the condition labels every method
generates, and the judge's features of real held-out images of those conditions."""

from __future__ import annotations

import numpy as np

from ..metrics import Judge


def bench_conditions(per_class: int, classes: int | None = None) -> list[int]:
    """Condition labels: each of the first ``classes`` (default all 108) ``per_class`` times."""
    from ..zoo.shapes_t2i import NUM_CLASSES

    classes = NUM_CLASSES if classes is None else classes
    if not 1 <= classes <= NUM_CLASSES:
        raise ValueError(f"classes: expected an int in [1, {NUM_CLASSES}], got {classes!r}")
    return [label for _ in range(per_class) for label in range(classes)]


def real_features(judge: Judge, labels: list[int], seed_offset: int = 0) -> np.ndarray:
    """Judge features of real held-out images of the given conditions."""
    from ..zoo.shapes_t2i import ALL_CONDITIONS, render, to_tensor

    feats = []
    for start in range(0, len(labels), 256):
        chunk = labels[start : start + 256]
        ims = [render(ALL_CONDITIONS[c], 20_000_000 + seed_offset + start + i) for i, c in enumerate(chunk)]
        feats.append(judge(to_tensor(ims))[1])
    return np.concatenate(feats)
