"""``mmspec bench diffusion``: diffusion sampling methods on shapes-ddpm, side by side with the plain sampler and
diffusers' own sampler loop.

Every method samples the same fixed set of conditions (the first ``classes`` of the 108 shapes-t2i conditions x
``per_class``, fixed seeds) with the same sampler and number of steps, in batches, with interleaved timed
repetitions after a warm-up (the harness of :mod:`mmspec.bench`). Reported per method:

- sequential rounds: batched target calls a batch needed (its slowest row decides) and per sample, and the
  round compression = sampler steps / rounds (plain sampling = 1.00);
- network evaluations per sample (the compute a method spends; CFG doubling not counted);
- wall-clock speedup vs our plain sampler and vs diffusers' loop (``scale_model_input`` + ``step()`` with the same
  UNet, scheduler and steps);
- quality: the shapes-t2i judge's condition accuracy and the Fréchet distance of its pooled features against real
  held-out images of the same conditions; plain sampling runs ``plain_runs`` times with different seeds and the
  spread of those runs is the yardstick ("within spread");
- whether the method is lossless.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import torch

from ..metrics import Judge
from .harness import TOKEN_COLUMNS, Method, RunResult, fmt, markdown_table, per_rep_ratio, with_spread
from .peers import diffusers_loop
from .quality import QUALITY_COLUMNS, SampledRow, bench_conditions, run_sampling_bench, seeded_methods


@dataclass(kw_only=True)
class DiffusionRow(SampledRow):
    rounds_per_batch: float  # sequential target calls per batch (mean over batches)
    round_compression: float  # steps / rounds of a batch
    sample_round_compression: float  # steps / rounds of a sample (mean over samples)
    evaluations_per_sample: float  # network evaluations per sample (plain: steps)
    speedup_vs_plain: float
    speedup_vs_diffusers: float
    speedup_vs_plain_range: tuple[float, float] | None = None  # min-max of the per-repetition ratios
    speedup_vs_diffusers_range: tuple[float, float] | None = None


@torch.no_grad()
def diffusion_methods(sampler: str, *, lookaheads=(2, 4, 8), plain_runs: int = 3, picard=(8, 0.1),
                      speca: bool = True) -> list[tuple[str, str, dict]]:  # fmt: skip
    """(row name, registered method, generate() keyword arguments) for every benchmarked configuration."""
    rows = [(f"plain (run {i + 1})" if i else "plain", "plain", {"seed_offset": 1000 * i}) for i in range(plain_runs)]
    rows += [(f"speculative L={lk}", "speculative", {"lookahead": lk}) for lk in lookaheads]
    mid = lookaheads[len(lookaheads) // 2]
    rows.append((f"speculative frozen-ε L={mid}", "speculative", {"lookahead": mid, "draft": "frozen-eps"}))
    rows += [(f"asd L={lk}", "asd", {"lookahead": lk}) for lk in lookaheads]
    rows.append((f"paradigms W={picard[0]} tol={picard[1]}", "paradigms", {"window": picard[0], "tolerance": picard[1]}))
    if speca:
        rows.append(("speca τ0=0.1", "speca", {"tau0": 0.1, "beta": 0.5, "floor": 0.02}))
    return rows


def bench_diffusion(models, *, per_class: int = 2, classes: int | None = None, batch: int = 54, reps: int = 1,
                    steps: int = 100, sampler: str = "ddpm", eta: float | None = None, cfg_scale: float = 1.0,
                    lookaheads=(2, 4, 8), only: list[str] | None = None, plain_runs: int = 3,
                    progress: bool = True) -> tuple[list[DiffusionRow], dict]:  # fmt: skip
    """Run the benchmark on a :class:`~mmspec.zoo.ShapesDDPM` entry -> (rows, meta)."""
    from ..modalities.diffusion import DIFFUSION_METHODS
    from ..zoo.shapes_ddpm import NULL_CLASS

    spec = models.speculator(cfg_scale=cfg_scale)
    labels = bench_conditions(per_class, classes)
    kernel = spec.kernel(steps, sampler, eta)
    configs = diffusion_methods(sampler, lookaheads=lookaheads, plain_runs=plain_runs)
    if not kernel.stochastic:
        configs = [c for c in configs if not DIFFUSION_METHODS.get(c[1]).needs_stochastic]
    if only:
        configs = [c for c in configs if c[1] == "plain" or any(o in c[0] for o in only)]

    def result_of(method: str, kw: dict, labels: list[int], seed: int) -> RunResult:
        out = spec.generate(labels, method=method, num_inference_steps=steps, sampler=sampler, eta=eta, seed=seed,
                            decode=False, **kw)  # fmt: skip
        st = out.stats
        return RunResult(out.samples, st.steps * len(labels), sum(st.row_rounds), batch_forwards=st.rounds,
                         evaluations=st.target_rows)  # fmt: skip

    def run_peer(x: dict) -> RunResult:
        out = diffusers_loop(models.unet, models.scheduler, torch.tensor(x["labels"]), steps=steps, sampler=sampler,
                             cfg_scale=cfg_scale, null=NULL_CLASS, seed=x["seed"], eta=eta)  # fmt: skip
        n = steps * len(x["labels"])
        return RunResult(out, n, n, batch_forwards=steps, evaluations=n)

    methods = seeded_methods(configs, DIFFUSION_METHODS, "plain", result_of)
    peer = "diffusers loop (scale_model_input + step)"
    methods.insert(plain_runs, Method(peer, "diffusers", "none", True, run_peer, {}))
    results, judged = run_sampling_bench(methods, labels, batch, reps, Judge(models.judge), lambda s: s.clamp(-1, 1),
                                         progress)  # fmt: skip
    rows = []
    for m in methods:
        rs = results[m.name]
        rounds = statistics.mean(r.batch_forwards for r in rs)
        vs_plain, vs_peer = per_rep_ratio(judged.seconds, m.name, judged.plain), per_rep_ratio(judged.seconds, m.name, [peer])
        rows.append(DiffusionRow(
            **judged.row(m), rounds_per_batch=round(rounds, 2), round_compression=round(steps / rounds, 3),
            sample_round_compression=round(sum(r.committed for r in rs) / max(1, sum(r.verify_forwards for r in rs)), 3),
            evaluations_per_sample=round(sum(r.evaluations for r in rs) / judged.images, 1),
            speedup_vs_plain=round(vs_plain.median, 3), speedup_vs_diffusers=round(vs_peer.median, 3),
            speedup_vs_plain_range=vs_plain.range, speedup_vs_diffusers_range=vs_peer.range,
        ))  # fmt: skip
    return rows, {**judged.meta, "batch": batch, "reps": reps, "steps": steps, "sampler": kernel.sampler, "eta": eta,
                  "cfg_scale": cfg_scale}  # fmt: skip


DIFFUSION_COLUMNS = [
    *TOKEN_COLUMNS[:2], ("rounds per batch", lambda r: fmt(r.rounds_per_batch, ".1f")),
    ("round compression (batch)", lambda r: fmt(r.round_compression)), ("per sample", lambda r: fmt(r.sample_round_compression)),
    ("network evals per sample", lambda r: fmt(r.evaluations_per_sample, ".0f")), ("images/s", lambda r: fmt(r.images_per_s)),
    ("wall speedup vs plain", lambda r: with_spread(r.speedup_vs_plain, r.speedup_vs_plain_range)),
    ("vs diffusers loop", lambda r: with_spread(r.speedup_vs_diffusers, r.speedup_vs_diffusers_range)), *QUALITY_COLUMNS,
]  # fmt: skip


def diffusion_table(rows: list[DiffusionRow]) -> str:
    return markdown_table(rows, DIFFUSION_COLUMNS)


def save_lookahead_plot(rows: list[DiffusionRow], path, meta: dict) -> None:
    """Round compression (batch and per sample), network evaluations and wall speedup against the lookahead L,
    for speculative sampling (frozen drift) and ASD (frozen x̂0)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8), layout="constrained")
    panels = [("round compression (steps per sequential call)", ("round_compression", "sample_round_compression")),
              ("network evaluations per sample", ("evaluations_per_sample",)),
              ("wall-clock speedup vs plain sampler", ("speedup_vs_plain",))]  # fmt: skip
    for ax, (label, keys) in zip(axes, panels):
        for prefix, name in (("speculative L=", "speculative (frozen drift)"), ("asd L=", "ASD (frozen x̂0)")):
            pts = sorted((int(r.method.split("=")[1]), r) for r in rows if r.method.startswith(prefix))
            for key, style in zip(keys, ("o-", "s--")):
                suffix = "" if len(keys) == 1 else (", batch" if key == "round_compression" else ", per sample")
                ax.plot([l for l, _ in pts], [getattr(r, key) for _, r in pts], style, label=name + suffix)
        plain = [getattr(r, keys[0]) for r in rows if r.family == "plain"]
        ax.axhline(statistics.mean(plain), color="grey", lw=1, label="plain sampler")
        ax.set_xlabel("lookahead L (drafted steps per round)")
        ax.set_ylabel(label)
        ax.legend(fontsize=7)
    fig.suptitle(f"shapes-ddpm, {meta['sampler']} {meta['steps']} steps, batch {meta['batch']}: lookahead sweep", fontsize=10)
    fig.savefig(path, dpi=110)
    plt.close(fig)
