"""Sample shapes-ddpm images with the plain DDPM sampler and with each speculative method, same conditions, same seed.

    python demos/diffusion.py --out out/diffusion.png [--conditions "red circle at top left,blue square at center"]

Writes a PNG grid: one row per method (plain sampler first), one column per condition, each row titled with its
wall time, the speedup over the plain sampler and its round compression (sampler steps per sequential target
call). Every method starts from the same initial noise (same seed). The lossless methods (speculative sampling with
reflection coupling, ASD) draw from the same distribution as the plain sampler, so their images differ sample by
sample but not in law; the lossy ones (Picard, forecast gating) say so.
"""

from __future__ import annotations

import argparse
import functools
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from mmspec import zoo  # noqa: E402
from mmspec.timing import interleaved_seconds  # noqa: E402
from mmspec.zoo.shapes_t2i import DEMO_CONDITIONS  # noqa: E402

METHODS = (
    ("plain DDPM", "plain", {}),
    ("speculative L=4", "speculative", {"lookahead": 4}),
    ("ASD L=8", "asd", {"lookahead": 8}),
    ("Picard W=8 tol=0.1", "paradigms", {"window": 8, "tolerance": 0.1}),
    ("forecast gating τ0=0.1", "speca", {"tau0": 0.1, "floor": 0.02}),
)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="out/diffusion.png")
    parser.add_argument("--conditions", default=",".join(DEMO_CONDITIONS), help="comma-separated captions")
    parser.add_argument("--steps", type=int, default=100, help="DDPM sampler steps")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cfg-scale", type=float, default=1.0)
    parser.add_argument("--reps", type=int, default=3, help="interleaved timed repetitions (medians are shown)")
    args = parser.parse_args(argv)

    models = zoo.load("shapes-ddpm")
    spec = models.speculator(cfg_scale=args.cfg_scale)
    conditions = [c.strip() for c in args.conditions.split(",") if c.strip()]
    runs = {title: functools.partial(spec.generate, conditions, method=method, num_inference_steps=args.steps,
                                     seed=args.seed, **kw) for title, method, kw in METHODS}  # fmt: skip
    seconds = interleaved_seconds(runs, args.reps)  # medians of interleaved repetitions
    rows = [(title, runs[title](), seconds[title]) for title, _, _ in METHODS]
    plain_s = rows[0][2]

    fig, axes = plt.subplots(len(rows), len(conditions), figsize=(1.5 * len(conditions) + 1.8, 1.6 * len(rows)),
                             squeeze=False, layout="constrained")  # fmt: skip
    for i, (title, out, seconds) in enumerate(rows):
        st = out.stats
        speed = f"{seconds:.2f} s, {plain_s / seconds:.2f}x, {st.batch_compression:.2f} steps/call"
        print(f"{title:26s} {speed:40s} rounds={st.rounds} evals/sample={st.target_rows / len(conditions):.0f} "
              f"lossless={out.lossless}")  # fmt: skip
        for j, image in enumerate(out.images):
            ax = axes[i, j]
            ax.imshow(image, interpolation="nearest")
            ax.set_xticks([])
            ax.set_yticks([])
            if i == 0:
                ax.set_title(conditions[j], fontsize=7)
            if j == 0:
                ax.set_ylabel(f"{title}\n{speed}" + ("" if out.lossless else "\n(lossy)"), fontsize=6.5)
    fig.suptitle(f"shapes-ddpm, DDPM {args.steps} steps, seed {args.seed}, CFG {args.cfg_scale} "
                 f""
                 f"(timings: medians of {args.reps} interleaved runs, this machine)", fontsize=9)  # fmt: skip
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(args.out).with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=120)
    tmp.replace(args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
