"""Generate shapes-t2i images with plain AR sampling and with each speculative method, same conditions, same seed.

    python demos/image_ar.py --out out/image_ar.png [--conditions "red circle at top left,blue square at center"]

Writes a PNG grid: one row per method (plain AR first), one column per condition, each row titled with its wall
time, the speedup over plain AR and its step compression (image tokens per sequential target call). Sampling at
temperature 1 with classifier-free guidance; the lossless methods draw from the same distribution as plain AR
(so the images differ sample by sample but not in law), the lossy ones say so.
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
    ("plain AR", "plain", {}),
    ("SJD", "sjd", {"window": 16}),
    ("MC-SJD", "mc-sjd", {"window": 16}),
    ("MC-SJD repeat-init", "mc-sjd", {"window": 16, "init": "repeat"}),
    ("speculative (AR drafter)", "speculative", {"num_draft_tokens": 4}),
    ("LANTERN δ=0.2 (Jacobi)", "lantern-jacobi", {"window": 16, "delta": 0.2}),
    ("GSD tol=0.15", "gsd", {"window": 16, "prob_tol": 0.15}),
)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="out/image_ar.png")
    parser.add_argument("--conditions", default=",".join(DEMO_CONDITIONS), help="comma-separated captions")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cfg-scale", type=float, default=2.0)
    parser.add_argument("--reps", type=int, default=3, help="interleaved timed repetitions (medians are shown)")
    args = parser.parse_args(argv)

    models = zoo.load("shapes-t2i")
    spec = models.speculator(cfg_scale=args.cfg_scale)
    conditions = [c.strip() for c in args.conditions.split(",") if c.strip()]
    runs = {title: functools.partial(spec.generate, conditions, method, seed=args.seed, **kw) for title, method, kw in METHODS}
    seconds = interleaved_seconds(runs, args.reps)  # medians of interleaved repetitions
    rows = [(title, runs[title](), seconds[title]) for title, _, _ in METHODS]
    plain_s = rows[0][2]

    fig, axes = plt.subplots(len(rows), len(conditions), figsize=(1.5 * len(conditions) + 1.6, 1.55 * len(rows)),
                             squeeze=False, layout="constrained")  # fmt: skip
    for i, (title, out, seconds) in enumerate(rows):
        speed = f"{seconds * 1000:.0f} ms, {plain_s / seconds:.2f}x, {out.stats.compression:.2f} tok/call"
        print(f"{title:28s} {speed:40s} lossless={out.lossless}")
        for j, image in enumerate(out.images):
            ax = axes[i, j]
            ax.imshow(image, interpolation="nearest")
            ax.set_xticks([])
            ax.set_yticks([])
            if i == 0:
                ax.set_title(conditions[j], fontsize=7)
            if j == 0:
                ax.set_ylabel(f"{title}\n{speed}" + ("" if out.lossless else "\n(lossy)"), fontsize=6.5)
    fig.suptitle(f"shapes-t2i, seed {args.seed}, temperature 1, CFG {args.cfg_scale} "
                 f"(timings: medians of {args.reps} interleaved runs, this machine)",
                 fontsize=9)  # fmt: skip
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(args.out).with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=120)
    tmp.replace(args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
