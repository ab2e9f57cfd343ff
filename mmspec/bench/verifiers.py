"""``mmspec bench verifiers``: every registered acceptance rule, vectorised vs its per-position reference loop.

Each verifier family module exposes ``bench_cases(batch, k, vocab_or_dim, seed) -> [BenchCase]``: the vectorised
rule and its reference loop closed over identical inputs and identical pre-drawn randomness. Per case we check
that both give the same verdict, then time them interleaved (median over repetitions, warm-up excluded) and
report rows/s (batch rows verified per second) and the speedup of the vectorised rule.
"""

from __future__ import annotations

import dataclasses
import importlib
import statistics
import time

import torch
from tqdm import tqdm

from .harness import machine_description, markdown_table, save_json

FAMILIES = ("exact", "tolerance", "action", "codebook", "phrase", "spans", "jacobi", "continuous.reflection", "continuous.density",
            "continuous.forecast")  # modules of mmspec.verifiers with bench_cases


def same_result(a, b) -> bool:
    """Structural equality of two results (dataclasses, dicts, sequences; integer tensors exactly, float64 tensors
    to 1e-9 relative, float32 ones to 1e-4)."""
    if dataclasses.is_dataclass(a) and dataclasses.is_dataclass(b):
        return all(same_result(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a))
    if isinstance(a, dict) and isinstance(b, dict):  # extras: reference loops may report fewer diagnostics
        return all(same_result(a[key], b[key]) for key in a.keys() & b.keys())
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(same_result(x, y) for x, y in zip(a, b))
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        a, b = a.cpu(), b.cpu()
        if a.is_floating_point() or b.is_floating_point():  # float32 sums in another order: ~1e-6 relative
            rtol = 1e-4 if torch.float32 in (a.dtype, b.dtype) else 1e-9
            return a.shape == b.shape and torch.allclose(a.double(), b.double(), rtol=rtol, atol=1e-6)
        return torch.equal(a, b)
    return a == b


def collect_cases(batch: int, k: int, vocab: int):
    cases = []
    for family in FAMILIES:
        module = importlib.import_module(f"mmspec.verifiers.{family}")
        cases += [(family.split(".")[0], c) for c in module.bench_cases(batch, k, vocab)]
    return cases


def _time(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def bench_verifiers(*, batch: int = 8, k: int = 8, vocab: int = 16384, reps: int = 5, json_path=None, progress=True):
    if min(batch, k, vocab, reps) < 1:
        raise ValueError(f"batch/k/vocab/reps: expected ints >= 1, got {batch}, {k}, {vocab}, {reps}")
    cases = collect_cases(batch, k, vocab)
    rows = []
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one core for both sides: a fair ratio on a shared machine (restored below)
    try:
        rows = _run(cases, reps, batch, progress)
    finally:
        torch.set_num_threads(threads)
    meta = {"benchmark": "verifiers", "batch": batch, "k": k, "vocab_or_dim": vocab, "reps": reps,
            "machine": machine_description() + " (timed with 1 torch thread)"}  # fmt: skip
    if json_path:
        save_json(rows, json_path, meta)
    return rows, meta


def _run(cases, reps: int, batch: int, progress: bool) -> list[dict]:
    rows = []
    with torch.inference_mode():
        for family, case in tqdm(cases, desc="bench verifiers", disable=not progress):
            fast, slow = case.vectorised(), case.reference()  # warm-up + equality check
            t_fast, t_slow = [], []
            for _ in range(reps):  # interleaved
                t_fast.append(_time(case.vectorised))
                t_slow.append(_time(case.reference))
            vec, ref = statistics.median(t_fast), statistics.median(t_slow)
            rows.append({"verifier": case.name, "family": family, "rows_per_s": round(batch / vec, 1),
                         "reference_rows_per_s": round(batch / ref, 1), "speedup": round(ref / vec, 1),
                         "vectorised_ms": round(1e3 * vec, 3), "reference_ms": round(1e3 * ref, 3),
                         "same_result": same_result(fast, slow)})  # fmt: skip
    return rows


def markdown(rows, meta) -> str:
    head = (f"batch {meta['batch']} x K {meta['k']} x vocab (or state dim) {meta['vocab_or_dim']}, median of "
            f"{meta['reps']} interleaved repetitions; {meta['machine']}\n\n")  # fmt: skip
    return head + markdown_table(rows, [
        ("verifier", lambda r: r["verifier"]), ("family", lambda r: r["family"]),
        ("vectorised rows/s", lambda r: f"{r['rows_per_s']:.0f}"), ("reference loop rows/s", lambda r: f"{r['reference_rows_per_s']:.0f}"),
        ("speedup", lambda r: f"{r['speedup']:.1f}x"), ("same verdict", lambda r: "yes" if r["same_result"] else "NO")])  # fmt: skip
