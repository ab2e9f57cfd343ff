"""What the sampling benches (image AR, diffusion) share: the condition labels every method generates, the judge's
features of real held-out images of those conditions, the seeded methods, the interleaved run and its judging, the
row fields and quality columns."""

from __future__ import annotations

import functools
import statistics
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from ..metrics import Judge, frechet_distance, within_spread
from .harness import Column, Method, baseline_drift, fmt, machine_description, run_interleaved


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


@dataclass(kw_only=True)
class SampledRow:
    """A row of a sampling bench (image AR, diffusion): speed and judged quality of one method."""

    method: str
    family: str  # the plain sampler's family, the peer's, or "mmspec"
    lossless: bool
    params: dict
    images_per_s: float
    seconds_median: float
    condition_accuracy: float
    frechet_distance: float
    within_spread: bool | None = None  # both quality figures within the plain runs' run-to-run spread
    unstable_baseline: bool = False  # plain throughput drifted by more than 20 % across repetitions


QUALITY_COLUMNS: list[Column] = [
    ("condition accuracy", lambda r: fmt(r.condition_accuracy, ".3f")),
    ("Fréchet distance", lambda r: fmt(r.frechet_distance)),
    ("quality within plain spread",
     lambda r: "—" if r.within_spread is None or r.family != "mmspec" else ("yes" if r.within_spread else "no")),
]  # fmt: skip


def seeded_methods(configs, registry, plain_family: str, result_of: Callable) -> list[Method]:
    """One :class:`Method` per config (row name, registered method, generate() keyword arguments): on an input
    ``{"labels", "seed"}`` it returns ``result_of(method, kwargs, labels, seed)``; a config's ``seed_offset`` shifts
    the seed (the repeated plain runs)."""
    methods = []
    for name, method, kw in configs:
        kw = dict(kw)
        offset = kw.pop("seed_offset", 0)
        run = functools.partial(lambda m, k, o, x: result_of(m, k, x["labels"], x["seed"] + o), method, kw, offset)
        methods.append(Method(name, plain_family if method == "plain" else "mmspec", method, registry.get(method).lossless,
                              run, kw))  # fmt: skip
    return methods


@dataclass
class Judged:
    """Times and judged quality of every method of a sampling bench; the plain runs (different seeds) are the
    yardstick: a method is "within spread" when both quality figures are (:func:`~mmspec.metrics.within_spread`)."""

    seconds: dict[str, list[float]]
    quality: dict[str, tuple[float, float]]  # name -> (condition accuracy, Fréchet distance)
    plain: list[str]
    images: int
    floor: float  # real-vs-real Fréchet distance: the estimator's floor at this sample size
    unstable: bool

    def within(self, name: str) -> bool | None:
        acc, fd = self.quality[name]
        ok = within_spread(acc, [self.quality[n][0] for n in self.plain])
        return None if ok is None else bool(ok and within_spread(fd, [self.quality[n][1] for n in self.plain]))

    def row(self, m: Method) -> dict:
        """The :class:`SampledRow` fields of method ``m``."""
        acc, fd = self.quality[m.name]
        median = statistics.median(self.seconds[m.name])
        return {"method": m.name, "family": m.family, "lossless": m.lossless, "params": m.params,
                "images_per_s": round(self.images / median, 3), "seconds_median": round(median, 3),
                "condition_accuracy": round(acc, 4), "frechet_distance": round(fd, 3), "within_spread": self.within(m.name),
                "unstable_baseline": self.unstable}  # fmt: skip

    @property
    def meta(self) -> dict:
        return {"images": self.images, "plain_accuracy": [self.quality[n][0] for n in self.plain],
                "plain_frechet": [self.quality[n][1] for n in self.plain], "real_vs_real_frechet": round(self.floor, 3),
                "machine": machine_description()}  # fmt: skip


def run_sampling_bench(methods: list[Method], labels: list[int], batch: int, reps: int, judge: Judge, to_images: Callable,
                       progress: bool = True) -> tuple[dict, Judged]:  # fmt: skip
    """Run ``methods`` interleaved on ``labels`` in batches (fixed seeds), then judge every method's samples
    (``to_images(samples) -> [n, 3, H, W]`` in [-1, 1]). -> (results per method, :class:`Judged`)."""
    inputs = [{"labels": labels[i : i + batch], "seed": 17 + j} for j, i in enumerate(range(0, len(labels), batch))]
    seconds, results, _ = run_interleaved(methods, inputs, reps, progress=progress)
    real = real_features(judge, labels)
    quality = {}
    for m in methods:
        samples = torch.cat([r.new_tokens for r in results[m.name]])
        quality[m.name] = judge.quality(lambda a, b: to_images(samples[a:b]), labels, real)
    plain = [m.name for m in methods if m.family == methods[0].family]  # the plain runs (different seeds)
    floor = frechet_distance(real_features(judge, labels, seed_offset=5_000_000), real)
    return results, Judged(seconds, quality, plain, len(labels), floor, baseline_drift(seconds, plain) > 0.2)
