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
from dataclasses import dataclass, field

import torch

from .harness import Method, RunResult, baseline_drift, machine_description, per_rep_ratio, run_interleaved, with_spread
from ..metrics import Judge, frechet_distance, within_spread
from .peers import diffusers_loop
from .quality import bench_conditions, real_features


@dataclass
class DiffusionRow:
    method: str
    family: str  # "plain" (our plain sampler), "diffusers" (the peer loop) or "mmspec"
    lossless: bool
    params: dict
    rounds_per_batch: float  # sequential target calls per batch (mean over batches)
    round_compression: float  # steps / rounds of a batch
    sample_round_compression: float  # steps / rounds of a sample (mean over samples)
    evaluations_per_sample: float  # network evaluations per sample (plain: steps)
    images_per_s: float
    seconds_median: float
    speedup_vs_plain: float
    speedup_vs_diffusers: float
    condition_accuracy: float
    frechet_distance: float
    within_spread: bool | None = None
    extras: dict = field(default_factory=dict)
    speedup_vs_plain_range: tuple[float, float] | None = None  # min-max of the per-repetition ratios
    speedup_vs_diffusers_range: tuple[float, float] | None = None
    unstable_baseline: bool = False  # plain throughput drifted by more than 20 % across repetitions


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
    judge = Judge(models.judge)
    labels = bench_conditions(per_class, classes)
    batches = [labels[i : i + batch] for i in range(0, len(labels), batch)]
    kernel = spec.kernel(steps, sampler, eta)
    configs = diffusion_methods(sampler, lookaheads=lookaheads, plain_runs=plain_runs)
    if not kernel.stochastic:
        configs = [c for c in configs if not DIFFUSION_METHODS.get(c[1]).needs_stochastic]
    if only:
        configs = [c for c in configs if c[1] == "plain" or any(o in c[0] for o in only)]

    def make_run(method: str, kw: dict):
        kw = dict(kw)
        offset = kw.pop("seed_offset", 0)

        def run(x: dict) -> RunResult:
            out = spec.generate(x["labels"], method=method, num_inference_steps=steps, sampler=sampler, eta=eta,
                                seed=x["seed"] + offset, decode=False, **kw)  # fmt: skip
            st = out.stats
            return RunResult(out.samples, st.steps * len(x["labels"]), sum(st.row_rounds), batch_forwards=st.rounds,
                             evaluations=st.target_rows)  # fmt: skip

        return run

    methods = [Method(name, "plain" if m == "plain" else "mmspec", m, DIFFUSION_METHODS.get(m).lossless, make_run(m, kw), kw)
               for name, m, kw in configs]  # fmt: skip

    def run_peer(x: dict) -> RunResult:
        lab = torch.tensor(x["labels"])
        out = diffusers_loop(models.unet, models.scheduler, lab, steps=steps, sampler=sampler, cfg_scale=cfg_scale,
                             null=NULL_CLASS, seed=x["seed"], eta=eta)  # fmt: skip
        return RunResult(out, steps * len(x["labels"]), steps * len(x["labels"]), batch_forwards=steps,
                         evaluations=steps * len(x["labels"]))  # fmt: skip

    peer = "diffusers loop (scale_model_input + step)"
    methods.insert(plain_runs, Method(peer, "diffusers", "none", True, run_peer, {}))
    inputs = [{"labels": b, "seed": 17 + i} for i, b in enumerate(batches)]
    seconds, results, _ = run_interleaved(methods, inputs, reps, progress=progress)

    real = real_features(judge, labels)
    quality = {}
    for m in methods:
        samples = torch.cat([r.new_tokens for r in results[m.name]])  # [N, 3, 32, 32]
        quality[m.name] = judge.quality(lambda a, b: samples[a:b].clamp(-1, 1), labels, real)
    plain_names = [m.name for m in methods if m.family == "plain"]
    n_images = len(labels)
    ips = {k: n_images / statistics.median(v) for k, v in seconds.items()}
    unstable = baseline_drift(seconds, plain_names) > 0.2
    acc_p = [quality[n][0] for n in plain_names]
    fd_p = [quality[n][1] for n in plain_names]

    rows = []
    for m in methods:
        rs = results[m.name]
        acc, fd = quality[m.name]
        ok = within_spread(acc, acc_p)
        rounds = statistics.mean(r.batch_forwards for r in rs)
        vs_plain, vs_peer = per_rep_ratio(seconds, m.name, plain_names), per_rep_ratio(seconds, m.name, [peer])
        rows.append(DiffusionRow(
            method=m.name, family=m.family, lossless=m.lossless, params={k: v for k, v in m.params.items() if k != "seed_offset"},
            rounds_per_batch=round(rounds, 2), round_compression=round(steps / rounds, 3),
            sample_round_compression=round(sum(r.committed for r in rs) / max(1, sum(r.verify_forwards for r in rs)), 3),
            evaluations_per_sample=round(sum(r.evaluations for r in rs) / n_images, 1),
            images_per_s=round(ips[m.name], 3), seconds_median=round(statistics.median(seconds[m.name]), 3),
            speedup_vs_plain=round(vs_plain.median, 3), speedup_vs_diffusers=round(vs_peer.median, 3),
            speedup_vs_plain_range=vs_plain.range, speedup_vs_diffusers_range=vs_peer.range, unstable_baseline=unstable,
            condition_accuracy=round(acc, 4), frechet_distance=round(fd, 3),
            within_spread=None if ok is None else bool(ok and within_spread(fd, fd_p)),
        ))  # fmt: skip
    floor = frechet_distance(real_features(judge, labels, seed_offset=5_000_000), real)
    meta = {"machine": machine_description(), "images": n_images, "batch": batch, "reps": reps, "steps": steps,
            "sampler": kernel.sampler, "eta": eta, "cfg_scale": cfg_scale, "plain_accuracy": acc_p,
            "plain_frechet": fd_p, "real_vs_real_frechet": round(floor, 3)}  # fmt: skip
    return rows, meta


def diffusion_table(rows: list[DiffusionRow]) -> str:
    lines = ["| method | lossless | rounds per batch | round compression (batch) | per sample | network evals per sample | "
             "images/s | wall speedup vs plain | vs diffusers loop | condition accuracy | Fréchet distance | quality within plain spread |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        spread = "—" if r.within_spread is None or r.family != "mmspec" else ("yes" if r.within_spread else "no")
        lines.append(f"| {r.method} | {'yes' if r.lossless else 'no'} | {r.rounds_per_batch:.1f} | {r.round_compression:.2f} | "
                     f"{r.sample_round_compression:.2f} | {r.evaluations_per_sample:.0f} | {r.images_per_s:.2f} | "
                     f"{with_spread(r.speedup_vs_plain, r.speedup_vs_plain_range)} | {with_spread(r.speedup_vs_diffusers, r.speedup_vs_diffusers_range)} | "
                     f"{r.condition_accuracy:.3f} | "
                     f"{r.frechet_distance:.2f} | {spread} |")  # fmt: skip
    return "\n".join(lines)


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
