"""Benchmark harness: side-by-side, interleaved timing of plain decoding, mmspec methods and their peers.

Conventions (Spec-Bench): every method decodes the same inputs on the same machine in one process; repetitions
are interleaved (each repetition runs every method once, in a rotated order) and a warm-up pass of every method
is excluded; the reported time is the median over repetitions. ``mean_accepted_tokens`` is the number of tokens
committed per target verification forward, bonus/correction token included (plain decoding = 1.00).
``speedup_vs_ar`` divides a method's tokens/s by plain greedy decoding's; ``speedup_vs_hf`` divides it by the
fastest Hugging Face configuration that uses the same draft source (the strongest peer a user could pick).

Robust to a loaded machine: every ratio is taken per repetition, against the baseline's run in the *same*
repetition, and reported as the median with its spread (min-max over repetitions, :class:`Ratio`); when the plain
baseline's own throughput drifts by more than 20 % across repetitions the harness warns and marks the rows
(``unstable_baseline``) — their ratios are then only as good as that spread.
"""

from __future__ import annotations

import json
import statistics
import sys
from dataclasses import asdict, dataclass, field, is_dataclass
from pathlib import Path
from typing import Callable

import torch

from ..timing import interleave


@dataclass
class RunResult:
    """One method on one input."""

    new_tokens: torch.Tensor  # [1, T] generated ids (EOS included, padding stripped when compared)
    committed: int  # tokens produced by verification forwards (speculative: all but the prefill's token)
    verify_forwards: int  # target forwards that verified drafts (plain decoding: one per token)
    prefill_seconds: float | None = None  # time to the first token (prompt pass, drafter set-up), when measured
    draft_prefill_seconds: float | None = None  # the drafter's own set-up, when measured
    batch_forwards: int | None = None  # target forwards of the whole batch (when rows advance independently)
    evaluations: int | None = None  # network evaluations summed over rows (diffusion: the compute a method spends)
    overhead_seconds: float | None = None  # time outside model forwards in verification rounds (the loop's own work)
    rounds: int | None = None  # verification rounds


@dataclass
class Method:
    name: str
    family: str  # "ar", "mmspec" or "hf": who implements it
    draft_source: str  # what drafts ("none", "small-vlm", "text-only", "ngram", "early-exit")
    lossless: bool
    run: Callable[[dict], RunResult]  # one input (processor outputs) -> result
    params: dict = field(default_factory=dict)


@dataclass
class BenchRow:
    method: str
    family: str
    draft_source: str
    lossless: bool
    mean_accepted_tokens: float
    tokens_per_s: float
    seconds_median: float
    speedup_vs_ar: float
    speedup_vs_hf: float | None
    identical_to_ar: bool
    params: dict
    prefill_seconds_median: float | None = None  # per repetition over all inputs (None: not measured)
    decode_seconds_median: float | None = None  # the rest of the time: drafting, verification, commits
    draft_prefill_seconds_median: float | None = None  # the drafter's set-up alone (part of prefill)
    speedup_vs_ar_range: tuple[float, float] | None = None  # min-max of the per-repetition ratios
    speedup_vs_hf_range: tuple[float, float] | None = None
    overhead_ms_per_round: float | None = None  # the loop's own time per round, outside model forwards
    unstable_baseline: bool = False  # plain throughput drifted by more than 20 % across repetitions


@dataclass(frozen=True)
class Ratio:
    """A speed ratio taken per repetition against the baseline's run in the same repetition."""

    median: float
    low: float
    high: float

    @property
    def range(self) -> tuple[float, float]:
        return (round(self.low, 3), round(self.high, 3))


def per_rep_ratio(seconds: dict[str, list[float]], name: str, baselines: list[str], work: float = 1.0) -> Ratio:
    """``name``'s speed over the baselines' (their median time in each repetition), per repetition; ``work``: how
    much more output ``name`` produced than the baseline (a tokens ratio; 1 for a fixed workload)."""
    ratios = [work * statistics.median(seconds[b][rep] for b in baselines) / t for rep, t in enumerate(seconds[name])]
    return Ratio(statistics.median(ratios), min(ratios), max(ratios))


def baseline_drift(seconds: dict[str, list[float]], baselines: list[str], limit: float = 0.2) -> float:
    """Relative spread of the baseline's throughput over repetitions (max/min - 1); warns loudly above ``limit``."""
    per_rep = [statistics.median(seconds[b][rep] for b in baselines) for rep in range(len(seconds[baselines[0]]))]
    drift = max(per_rep) / min(per_rep) - 1 if per_rep else 0.0
    if drift > limit:
        msg = (f"WARNING: the plain baseline's throughput drifted by {drift:.0%} across repetitions (> {limit:.0%}): the "
               "machine's load changed during the run; ratios are per repetition, but read them with their spread")
        print("\n" + "!" * 100 + f"\n{msg}\n" + "!" * 100, file=sys.stderr, flush=True)
    return drift


def _strip(tokens: torch.Tensor, pad_token_id: int) -> list[int]:
    return [t for t in tokens.flatten().tolist() if t != pad_token_id]


def drop_unsupported(methods: list[Method], inputs: list[dict]) -> tuple[list[Method], dict[str, str]]:
    """Run every peer (Hugging Face) method once on the first input; those that raise are dropped and reported
    (name -> error) instead of aborting the benchmark (e.g. a configuration the peer library does not support)."""
    kept, skipped = [], {}
    for m in methods:
        if m.family == "hf":
            try:
                m.run(inputs[0])
            except Exception as e:  # noqa: BLE001 - reported to the user with the peer's own message
                skipped[m.name] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
                continue
        kept.append(m)
    return kept, skipped


def run_interleaved(methods: list[Method], inputs: list[dict], reps: int, progress: bool = True):
    """Every method over all inputs: a warm-up pass, then ``reps`` interleaved repetitions (:func:`interleave`).

    Returns (seconds per method: list over reps, results per method: list over inputs from the warm-up pass,
    {"prefill", "draft_prefill"}: seconds per method, list over reps, empty when the method does not measure it).
    """
    seconds, outputs = interleave({m.name: (lambda m=m: [m.run(x) for x in inputs]) for m in methods}, reps, progress)

    def phase(key: str) -> dict[str, list[float]]:  # summed over the inputs, per repetition
        return {name: [sum(getattr(r, key) for r in runs) for runs in out[1:] if all(getattr(r, key) is not None for r in runs)]
                for name, out in outputs.items()}  # fmt: skip

    return seconds, {name: out[0] for name, out in outputs.items()}, {"prefill": phase("prefill_seconds"),
                                                                      "draft_prefill": phase("draft_prefill_seconds")}


def summarise(methods: list[Method], seconds, results, pad_token_id: int, phases=None) -> list[BenchRow]:
    by_name = {m.name: m for m in methods}
    ar = next(m for m in methods if m.family == "ar")
    ref = [_strip(r.new_tokens, pad_token_id) for r in results[ar.name]]
    n_tokens = {k: sum(len(_strip(r.new_tokens, pad_token_id)) for r in v) for k, v in results.items()}
    tps = {k: n_tokens[k] / statistics.median(seconds[k]) for k in seconds}
    best_hf: dict[str, str] = {}  # draft source -> the fastest HF configuration using it (by median throughput)
    for m in methods:
        if m.family == "hf" and tps[m.name] > tps.get(best_hf.get(m.draft_source, ""), 0.0):
            best_hf[m.draft_source] = m.name
    unstable = baseline_drift(seconds, [ar.name]) > 0.2
    phases = phases or {"prefill": {}, "draft_prefill": {}}
    rows = []
    for name, rs in results.items():
        m = by_name[name]
        forwards = sum(r.verify_forwards for r in rs)
        committed = sum(r.committed for r in rs)
        vs_ar = per_rep_ratio(seconds, name, [ar.name], n_tokens[name] / n_tokens[ar.name])
        peer = best_hf.get(m.draft_source)
        vs_hf = per_rep_ratio(seconds, name, [peer], n_tokens[name] / n_tokens[peer]) if peer else None
        pre, dpre = (statistics.median(phases[k][name]) if phases[k].get(name) else None for k in ("prefill", "draft_prefill"))
        overhead = None
        if all(r.overhead_seconds is not None and r.rounds for r in rs):
            overhead = round(1000 * sum(r.overhead_seconds for r in rs) / sum(r.rounds for r in rs), 3)
        rows.append(BenchRow(
            method=name, family=m.family, draft_source=m.draft_source, lossless=m.lossless,
            mean_accepted_tokens=round(committed / max(1, forwards), 3),
            tokens_per_s=round(tps[name], 1), seconds_median=round(statistics.median(seconds[name]), 4),
            speedup_vs_ar=round(vs_ar.median, 3), speedup_vs_hf=round(vs_hf.median, 3) if vs_hf else None,
            identical_to_ar=[_strip(r.new_tokens, pad_token_id) for r in rs] == ref,
            params=m.params,
            prefill_seconds_median=None if pre is None else round(pre, 4),
            decode_seconds_median=None if pre is None else round(statistics.median(seconds[name]) - pre, 4),
            draft_prefill_seconds_median=None if dpre is None else round(dpre, 4),
            speedup_vs_ar_range=vs_ar.range, speedup_vs_hf_range=vs_hf.range if vs_hf else None,
            overhead_ms_per_round=overhead, unstable_baseline=unstable,
        ))  # fmt: skip
    return rows


def with_spread(value: float, rng: tuple[float, float] | None) -> str:
    """``2.10x (1.95-2.20)``: a median ratio with its per-repetition min-max ("—" when there is none)."""
    if value is None:
        return "—"
    return f"{value:.2f}x" + (f" ({rng[0]:.2f}-{rng[1]:.2f})" if rng else "")


def fmt(value, spec: str = ".2f", scale: float = 1.0) -> str:
    """``value * scale`` formatted with ``spec``, "—" for None."""
    return "—" if value is None else format(scale * value, spec)


Column = tuple[str, Callable[[object], str]]  # (header, row -> cell)
TOKEN_COLUMNS: list[Column] = [
    ("method", lambda r: r.method),
    ("lossless", lambda r: "yes" if r.lossless else "no"),
    ("mean accepted tokens", lambda r: fmt(r.mean_accepted_tokens)),
    ("tokens/s", lambda r: fmt(r.tokens_per_s, ".1f")),
    ("speedup vs plain (min-max)", lambda r: with_spread(r.speedup_vs_ar, r.speedup_vs_ar_range)),
    ("speedup vs HF (min-max)", lambda r: with_spread(r.speedup_vs_hf, r.speedup_vs_hf_range)),
    ("loop ms/round", lambda r: fmt(r.overhead_ms_per_round)),
    ("identical to plain", lambda r: "yes" if r.identical_to_ar else "NO"),
]


def markdown_table(rows: list, columns: list[Column] = TOKEN_COLUMNS) -> str:
    """A Markdown table of bench rows (row dataclasses or dicts), one column per ``columns``; a note when the rows'
    ``unstable_baseline`` flag is set."""
    lines = ["| " + " | ".join(header for header, _ in columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(r) for _, cell in columns) + " |" for r in rows]
    if rows and getattr(rows[0], "unstable_baseline", False):
        lines.append("\n**unstable baseline**: plain throughput drifted by more than 20 % across repetitions")
    return "\n".join(lines)


def run_token_bench(methods: list[Method], inputs: list[dict], reps: int, pad_token_id: int, progress: bool = True):
    """The token benches' run: drop the peers that fail here, run everything interleaved, summarise.
    -> (rows, results per method, skipped peers {name: why})."""
    with torch.inference_mode():
        methods, skipped = drop_unsupported(methods, inputs)
        seconds, results, phases = run_interleaved(methods, inputs, reps, progress)
    return summarise(methods, seconds, results, pad_token_id, phases), results, skipped


def save_outputs(rows: list, meta: dict, json_path=None, plot_path=None, title: str = "") -> None:
    if json_path:
        save_json(rows, json_path, meta)
    if plot_path:
        save_plot(rows, plot_path, title)


def save_json(rows: list, path: str | Path, meta: dict) -> None:
    """``{"meta": meta, "rows": [...]}`` for rows of any of the benches' row dataclasses (or dicts)."""
    path = Path(path)
    tmp = path.with_suffix(path.suffix + ".tmp")
    rows = [asdict(r) if is_dataclass(r) else r for r in rows]
    tmp.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2, ensure_ascii=False) + "\n")
    tmp.replace(path)  # never leave a half-written file behind


def save_plot(rows: list[BenchRow], path: str | Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    colors = {"ar": "#888888", "mmspec": "#1f77b4", "hf": "#ff7f0e"}
    fig, ax = plt.subplots(figsize=(10, 0.32 * len(rows) + 1.4), layout="constrained")
    names = [r.method for r in rows][::-1]
    ax.barh(names, [r.speedup_vs_ar for r in rows][::-1], color=[colors[r.family] for r in rows][::-1])
    ax.axvline(1.0, color="black", lw=0.8)
    ax.set_xlim(left=0)
    ax.set_xlabel("speedup vs plain greedy (tokens/s ratio, medians)")
    fig.suptitle(title, fontsize=10)
    ax.legend(handles=[Patch(color=c, label=f) for f, c in colors.items()], loc="lower right")
    fig.savefig(path, dpi=110)
    plt.close(fig)


def machine_description() -> str:
    import platform

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    dev = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU"
    return f"{cpu}, {torch.get_num_threads()} torch threads, {dev}, torch {torch.__version__}"
