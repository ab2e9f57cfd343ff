"""Caption procedural scenes with the bundled shapes-VLM and speculative decoding; write a figure.

    python demos/caption_shapes.py --scenes 6 --out out/captions.png [--drafter small-vlm|text-only|ngram] [--k 5]

Each panel shows the scene, the ground-truth caption, the speculative caption (identical to the target's greedy
caption: the method is lossless) and the mean accepted tokens per target forward.
"""

from __future__ import annotations

import argparse
import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from mmspec import NgramDrafter, VLMSpeculator, zoo  # noqa: E402
from mmspec.zoo.shapes import make_scene  # noqa: E402


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenes", type=int, default=6)
    parser.add_argument("--k", type=int, default=5, help="draft length")
    parser.add_argument("--drafter", choices=["small-vlm", "text-only", "ngram"], default="small-vlm")
    parser.add_argument("--out", default="out/captions.png")
    args = parser.parse_args(argv)

    m = zoo.load("shapes-vlm")
    drafter = {"small-vlm": m.drafter_vlm, "text-only": m.drafter_text, "ngram": NgramDrafter()}[args.drafter]
    spec = VLMSpeculator(m.target, m.processor, drafter=drafter, num_draft_tokens=args.k)
    scenes = [make_scene(i, "test") for i in range(args.scenes)]
    images = [s.render(96) for s in scenes]

    cols = min(3, len(scenes))
    rows = (len(scenes) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.4 * cols, 5.2 * rows), squeeze=False, layout="constrained")
    for ax in axes.flat:
        ax.axis("off")
    for ax, scene, image in zip(axes.flat, scenes, images):
        out = spec.generate(image, "caption :", max_new_tokens=48)
        ok = "✓" if out.texts[0] == scene.caption() else "✗"
        ax.imshow(image)
        ax.set_title(
            "\n".join(textwrap.wrap(f"truth: {scene.caption()}", 44) + textwrap.wrap(f"{ok} model: {out.texts[0]}", 44))
            + f"\nmean accepted tokens {out.stats.mean_accepted_tokens:.2f}",
            fontsize=8, loc="left",
        )  # fmt: skip
    fig.suptitle(f"shapes-VLM, speculative decoding ({args.drafter} drafter, K={args.k})")
    path = Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
