"""Timing that no speed figure is allowed to skip: every callable warmed up once, then timed over interleaved
repetitions in a rotated order; figures are medians. The benchmarks, the demos and the app all time with this."""

from __future__ import annotations

import statistics
import time
from typing import Callable

from tqdm import tqdm

from .checks import check_int


def interleave(runs: dict[str, Callable[[], object]], reps: int, progress: bool = False) -> tuple[dict, dict]:
    """Call each callable once as a warm-up (not timed), then ``reps`` interleaved repetitions, each in a rotated
    order (no fixed position bias). -> (wall seconds per name: a list over repetitions, outputs per name: the
    warm-up's first, then one per repetition)."""
    check_int("reps", reps, 1)
    names = list(runs)
    outputs, seconds = {name: [runs[name]()] for name in names}, {name: [] for name in names}
    bar = tqdm(total=reps * len(names), desc="bench", disable=not progress)
    for rep in range(reps):
        for name in names[rep % len(names) :] + names[: rep % len(names)]:
            t0 = time.perf_counter()
            outputs[name].append(runs[name]())
            seconds[name].append(time.perf_counter() - t0)
            bar.update(1)
    bar.close()
    return seconds, outputs


def interleaved_seconds(runs: dict[str, Callable[[], object]], reps: int = 3) -> dict[str, float]:
    """Median wall seconds of each callable over ``reps`` interleaved repetitions (after a warm-up call of each):
    the timing the demos print, so that no speed figure comes from a single run."""
    return {name: statistics.median(v) for name, v in interleave(runs, reps)[0].items()}
