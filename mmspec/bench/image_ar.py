"""``mmspec bench image-ar``: visual-AR methods on shapes-t2i, side by side with plain AR sampling.

Every method generates the same fixed set of conditions (all 108 classes x ``per_class`` images, fixed seeds)
at temperature 1 with classifier-free guidance, in batches, with interleaved timed repetitions after a warm-up
(the harness of :mod:`mmspec.bench`). Reported per method:

- step compression: image tokens per sequential target call of an image (plain AR = 1.00);
- wall-clock speedup vs plain AR (images/s ratio of medians, same batches, same seeds);
- condition accuracy: the judge (a ResNet trained on the same data) classifies the image as the requested class;
- Fréchet distance between the judge's pooled features of the generated images and of real images of the same
  conditions (held-out seeds);
- whether the method is lossless. Plain AR runs ``plain_runs`` times with different seeds: the spread of its
  quality figures is the yardstick ("within spread": |value - mean of the plain runs| <= their range).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

import torch

from ..metrics import Judge, frechet_distance, within_spread
from .harness import Method, RunResult, baseline_drift, machine_description, per_rep_ratio, run_interleaved, with_spread
from .peers import hf_generate
from .quality import bench_conditions, real_features


@dataclass
class ImageARRow:
    method: str
    family: str  # "ar" (plain sampling) or "mmspec"
    lossless: bool
    params: dict
    step_compression: float  # tokens per target call of an image (plain = 1)
    batch_step_compression: float  # tokens per target call of a batch (the slowest row decides)
    images_per_s: float
    seconds_median: float
    speedup_vs_ar: float
    speedup_vs_hf: float
    condition_accuracy: float
    frechet_distance: float
    within_spread: bool | None = None  # both quality figures within the plain-AR run-to-run spread
    extras: dict = field(default_factory=dict)
    speedup_vs_ar_range: tuple[float, float] | None = None  # min-max of the per-repetition ratios
    speedup_vs_hf_range: tuple[float, float] | None = None
    unstable_baseline: bool = False  # plain throughput drifted by more than 20 % across repetitions


def image_ar_methods(spec, *, window: int = 32, init: str = "repeat", deltas=(0.1, 0.2, 0.4, 0.8),
                     gsd_tols=(0.05, 0.15, 0.3, 0.6), plain_runs: int = 3, num_draft_tokens: int = 4) -> list[tuple[str, str, dict]]:  # fmt: skip
    """(row name, registered method, generate() keyword arguments) for every benchmarked configuration. Jacobi rows
    use ``window`` slots and ``init`` for fresh slots (the SJD/MC-SJD rows also show the other init)."""
    other = "random" if init == "repeat" else "repeat"
    jw = {"num_draft_tokens": window, "init": init}  # the Jacobi window
    rows = [(f"plain (run {i + 1})" if i else "plain", "plain", {"seed_offset": 1000 * i}) for i in range(plain_runs)]
    rows += [
        (f"sjd W={window} {init}-init", "sjd", jw),
        (f"sjd W={window} {other}-init", "sjd", {**jw, "init": other}),
        (f"sjd W={window} {init}-init reuse>=0.5 (SJD++)", "sjd", {**jw, "reuse": 0.5}),
        (f"mc-sjd W={window} {init}-init", "mc-sjd", jw),
        (f"mc-sjd W={window} {other}-init", "mc-sjd", {**jw, "init": other}),
        (f"gumbel-sjd W={window} {init}-init", "gumbel-sjd", jw),
    ]
    if spec.drafter is not None:
        rows.append((f"speculative K={num_draft_tokens} (AR drafter)", "speculative", {"num_draft_tokens": num_draft_tokens}))
        rows += [(f"lantern δ={d} (AR drafter)", "lantern", {"num_draft_tokens": num_draft_tokens, "delta": d}) for d in deltas]
    rows += [(f"lantern-jacobi δ={d}", "lantern-jacobi", {**jw, "delta": d}) for d in deltas]
    rows += [(f"lantern-jacobi λ={lam}", "lantern-jacobi", {**jw, "lam": lam}) for lam in (2.0, 4.0)]
    rows += [(f"gsd tol={t}", "gsd", {**jw, "prob_tol": t}) for t in gsd_tols]
    return rows


def bench_image_ar(models, *, per_class: int = 4, batch: int = 54, reps: int = 3, cfg_scale: float = 2.0,
                   window: int = 32, only: list[str] | None = None, plain_runs: int = 3, classes: int | None = None,
                   progress: bool = True) -> tuple[list[ImageARRow], dict]:  # fmt: skip
    """Run the benchmark on a :class:`~mmspec.zoo.ShapesT2I` entry -> (rows, meta)."""
    from ..modalities.image_ar import IMAGE_AR_METHODS, codes_to_images

    spec = models.speculator(cfg_scale=cfg_scale)
    judge = Judge(models.judge)
    labels = bench_conditions(per_class, classes)
    batches = [labels[i : i + batch] for i in range(0, len(labels), batch)]
    configs = image_ar_methods(spec, window=window, plain_runs=plain_runs)
    if only:
        configs = [c for c in configs if c[1] == "plain" or any(o in c[0] for o in only)]

    def make_run(method: str, kw: dict):
        kw = dict(kw)
        offset = kw.pop("seed_offset", 0)

        def run(x: dict) -> RunResult:
            out = spec.generate(x["labels"], method, temperature=1.0, seed=x["seed"] + offset, decode=False, **kw)
            forwards = out.stats.row_forwards or [out.stats.target_forwards] * len(x["labels"])
            return RunResult(out.codes, out.codes.numel(), sum(forwards), batch_forwards=out.stats.target_forwards)

        return run

    methods = [Method(name, "ar" if m == "plain" else "mmspec", m, IMAGE_AR_METHODS.get(m).lossless, make_run(m, kw), kw)
               for name, m, kw in configs]  # fmt: skip

    def run_hf(x: dict) -> RunResult:
        codes = hf_generate(spec, spec.prefix_ids(x["labels"]), cfg_scale=cfg_scale, seed=x["seed"])
        return RunResult(codes, codes.numel(), codes.numel(), batch_forwards=codes.shape[1])

    methods.insert(plain_runs, Method("HF generate (CFG, sampling)", "hf", "none", True, run_hf, {}))
    inputs = [{"labels": b, "seed": 17 + i} for i, b in enumerate(batches)]
    seconds, results, _ = run_interleaved(methods, inputs, reps, progress=progress)

    real = real_features(judge, labels)
    quality = {}
    for m in methods:
        codes = torch.cat([r.new_tokens for r in results[m.name]])  # [N, 64]
        quality[m.name] = judge.quality(lambda a, b: codes_to_images(spec.vq, codes[a:b], spec.grid), labels, real)
    plain_names = [m.name for m in methods if m.family == "ar"]  # the plain runs (different seeds)
    n_images = len(labels)
    ips = {k: n_images / statistics.median(v) for k, v in seconds.items()}
    unstable = baseline_drift(seconds, plain_names) > 0.2
    acc_p = [quality[n][0] for n in plain_names]
    fd_p = [quality[n][1] for n in plain_names]

    rows = []
    for m in methods:
        rs = results[m.name]
        acc, fd = quality[m.name]
        tokens = sum(r.committed for r in rs)
        ok = within_spread(acc, acc_p)
        vs_ar, vs_hf = per_rep_ratio(seconds, m.name, plain_names), per_rep_ratio(seconds, m.name, ["HF generate (CFG, sampling)"])
        rows.append(ImageARRow(
            method=m.name, family=m.family, lossless=m.lossless, params={k: v for k, v in m.params.items() if k != "seed_offset"},
            step_compression=round(tokens / max(1, sum(r.verify_forwards for r in rs)), 3),
            batch_step_compression=round(tokens / max(1, sum(r.batch_forwards * r.new_tokens.shape[0] for r in rs)), 3),
            images_per_s=round(ips[m.name], 2), seconds_median=round(statistics.median(seconds[m.name]), 3),
            speedup_vs_ar=round(vs_ar.median, 3), speedup_vs_hf=round(vs_hf.median, 3), condition_accuracy=round(acc, 4),
            frechet_distance=round(fd, 3), within_spread=None if ok is None else bool(ok and within_spread(fd, fd_p)),
            speedup_vs_ar_range=vs_ar.range, speedup_vs_hf_range=vs_hf.range, unstable_baseline=unstable,
        ))  # fmt: skip
    floor = frechet_distance(real_features(judge, labels, seed_offset=5_000_000), real)
    meta = {"machine": machine_description(), "images": n_images, "batch": batch, "reps": reps, "cfg_scale": cfg_scale,
            "temperature": 1.0, "window": window, "plain_accuracy": acc_p, "plain_frechet": fd_p,
            "real_vs_real_frechet": round(floor, 3)}  # fmt: skip
    return rows, meta


def image_ar_table(rows: list[ImageARRow]) -> str:
    lines = ["| method | lossless | step compression (per image) | per batch | images/s | wall speedup vs plain | vs HF generate | "
             "condition accuracy | Fréchet distance | quality within plain spread |", "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        spread = "—" if r.within_spread is None or r.family != "mmspec" else ("yes" if r.within_spread else "no")
        lines.append(f"| {r.method} | {'yes' if r.lossless else 'no'} | {r.step_compression:.2f} | {r.batch_step_compression:.2f} | "
                     f"{r.images_per_s:.1f} | {with_spread(r.speedup_vs_ar, r.speedup_vs_ar_range)} | {with_spread(r.speedup_vs_hf, r.speedup_vs_hf_range)} | {r.condition_accuracy:.3f} | {r.frechet_distance:.2f} | "
                     f"{spread} |")  # fmt: skip
    return "\n".join(lines)


def save_sweep_plot(rows: list[ImageARRow], path, meta: dict) -> None:
    """Speedup vs quality for the relaxed-acceptance sweeps (LANTERN δ, GSD tolerance), plain AR and the exact
    methods as reference points; one panel per quality figure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(11, 8), layout="constrained")
    families = {"lantern-jacobi δ": "LANTERN (Jacobi drafts), δ sweep", "lantern δ": "LANTERN (AR drafter), δ sweep",
                "gsd tol": "GSD, tolerance sweep"}  # fmt: skip
    speeds = [("step_compression", "step compression (image tokens per target call)"),
              ("speedup_vs_ar", "wall-clock speedup vs plain AR")]  # fmt: skip
    metrics = [("frechet_distance", "Fréchet distance (judge features, lower is better)"),
               ("condition_accuracy", "condition accuracy (higher is better)")]  # fmt: skip
    for row, (sx, sx_label) in enumerate(speeds):
        for col, (key, label) in enumerate(metrics):
            ax = axes[row, col]
            for prefix, name in families.items():
                pts = [r for r in rows if r.method.startswith(prefix)]
                if pts:
                    ax.plot([getattr(r, sx) for r in pts], [getattr(r, key) for r in pts], "o-", label=name)
                    for r in pts:
                        ax.annotate(r.method.split()[1], (getattr(r, sx), getattr(r, key)), fontsize=7, xytext=(3, 3),
                                    textcoords="offset points")  # fmt: skip
            exact = [r for r in rows if r.lossless]
            ax.scatter([getattr(r, sx) for r in exact], [getattr(r, key) for r in exact], marker="s", color="grey",
                       label="lossless methods (plain runs, HF, SJD family, speculative)")  # fmt: skip
            plain = [getattr(r, key) for r in rows if r.family == "ar"]
            ax.axhspan(min(plain), max(plain), color="grey", alpha=0.15, label="plain AR run-to-run range")
            ax.set_xlabel(sx_label)
            ax.set_ylabel(label)
    axes[0, 0].legend(fontsize=7)
    fig.suptitle(f"shapes-t2i, temperature 1, CFG {meta.get('cfg_scale')}: relaxed acceptance trades quality for speed", fontsize=10)
    fig.savefig(path, dpi=110)
    plt.close(fig)
