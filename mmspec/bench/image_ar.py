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

from dataclasses import dataclass

from ..metrics import Judge
from .harness import TOKEN_COLUMNS, Method, RunResult, fmt, markdown_table, per_rep_ratio, with_spread
from .peers import hf_generate
from .quality import QUALITY_COLUMNS, SampledRow, bench_conditions, run_sampling_bench, seeded_methods


@dataclass(kw_only=True)
class ImageARRow(SampledRow):
    step_compression: float  # tokens per target call of an image (plain = 1)
    batch_step_compression: float  # tokens per target call of a batch (the slowest row decides)
    speedup_vs_ar: float
    speedup_vs_hf: float
    speedup_vs_ar_range: tuple[float, float] | None = None  # min-max of the per-repetition ratios
    speedup_vs_hf_range: tuple[float, float] | None = None


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
    labels = bench_conditions(per_class, classes)
    configs = image_ar_methods(spec, window=window, plain_runs=plain_runs)
    if only:
        configs = [c for c in configs if c[1] == "plain" or any(o in c[0] for o in only)]

    def result_of(method: str, kw: dict, labels: list[int], seed: int) -> RunResult:
        out = spec.generate(labels, method, temperature=1.0, seed=seed, decode=False, **kw)
        forwards = out.stats.row_forwards or [out.stats.target_forwards] * len(labels)
        return RunResult(out.codes, out.codes.numel(), sum(forwards), batch_forwards=out.stats.target_forwards)

    def run_hf(x: dict) -> RunResult:
        codes = hf_generate(spec, spec.prefix_ids(x["labels"]), cfg_scale=cfg_scale, seed=x["seed"])
        return RunResult(codes, codes.numel(), codes.numel(), batch_forwards=codes.shape[1])

    methods = seeded_methods(configs, IMAGE_AR_METHODS, "ar", result_of)
    peer = "HF generate (CFG, sampling)"
    methods.insert(plain_runs, Method(peer, "hf", "none", True, run_hf, {}))
    results, judged = run_sampling_bench(methods, labels, batch, reps, Judge(models.judge),
                                         lambda codes: codes_to_images(spec.vq, codes, spec.grid), progress)  # fmt: skip
    rows = []
    for m in methods:
        rs = results[m.name]
        tokens = sum(r.committed for r in rs)
        vs_ar, vs_hf = per_rep_ratio(judged.seconds, m.name, judged.plain), per_rep_ratio(judged.seconds, m.name, [peer])
        rows.append(ImageARRow(
            **judged.row(m), step_compression=round(tokens / max(1, sum(r.verify_forwards for r in rs)), 3),
            batch_step_compression=round(tokens / max(1, sum(r.batch_forwards * r.new_tokens.shape[0] for r in rs)), 3),
            speedup_vs_ar=round(vs_ar.median, 3), speedup_vs_hf=round(vs_hf.median, 3),
            speedup_vs_ar_range=vs_ar.range, speedup_vs_hf_range=vs_hf.range,
        ))  # fmt: skip
    return rows, {**judged.meta, "batch": batch, "reps": reps, "cfg_scale": cfg_scale, "temperature": 1.0, "window": window}


IMAGE_AR_COLUMNS = [
    *TOKEN_COLUMNS[:2], ("step compression (per image)", lambda r: fmt(r.step_compression)),
    ("per batch", lambda r: fmt(r.batch_step_compression)), ("images/s", lambda r: fmt(r.images_per_s, ".1f")),
    ("wall speedup vs plain", lambda r: with_spread(r.speedup_vs_ar, r.speedup_vs_ar_range)),
    ("vs HF generate", lambda r: with_spread(r.speedup_vs_hf, r.speedup_vs_hf_range)), *QUALITY_COLUMNS,
]  # fmt: skip


def image_ar_table(rows: list[ImageARRow]) -> str:
    return markdown_table(rows, IMAGE_AR_COLUMNS)


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
