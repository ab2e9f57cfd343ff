"""Ask the bundled shapes-video model about generated clips, with speculative decoding; write the clips and a figure.

    python demos/video_qa.py --clips 2 --out out/video_qa.png [--drafter eagle|small-vlm|std] [--k 5]

Each clip is written to ``out/clip-<i>.avi`` and read back from that file with OpenCV (the path a user's own videos
take). For the caption and every question the script prints the truth, the speculative answer, whether it is
identical to plain greedy decoding (it must be: the methods are lossless), the mean accepted tokens per target
forward and the wall-clock speedup over plain decoding of the same call.
"""

from __future__ import annotations

import argparse
import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

from mmspec import ModelDrafter, STDDrafter, VideoSpeculator, zoo  # noqa: E402
from mmspec.timing import interleaved_seconds  # noqa: E402
from mmspec.drafters.eagle import EagleDrafter  # noqa: E402
from mmspec.modalities.video import load_frames, write_video  # noqa: E402
from mmspec.zoo.shapes_video import make_clip  # noqa: E402


def plain_answer(spec: VideoSpeculator, video, prompt: str, max_new_tokens: int) -> str:
    enc = spec.prepare(video, prompt)
    out = spec.target.generate(**enc, do_sample=False, max_new_tokens=max_new_tokens)
    return spec.processor.tokenizer.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)[0].strip()


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clips", type=int, default=2)
    parser.add_argument("--k", type=int, default=5, help="draft length")
    parser.add_argument("--drafter", choices=["eagle", "small-vlm", "std"], default="eagle")
    parser.add_argument("--out", default="out/video_qa.png")
    parser.add_argument("--reps", type=int, default=3, help="interleaved timed repetitions (medians are shown)")
    args = parser.parse_args(argv)

    m = zoo.load("shapes-video")
    if args.drafter == "eagle" and m.eagle is None:
        raise SystemExit("drafter: the bundled shapes-video entry has no EAGLE head; run `mmspec zoo train shapes-video`")
    drafter = {"eagle": lambda: EagleDrafter(m.target, m.eagle), "small-vlm": lambda: ModelDrafter(m.drafter_vlm),
               "std": lambda: STDDrafter(m.target, keep=16)}[args.drafter]()  # fmt: skip
    spec = VideoSpeculator(m.target, m.processor, drafter=drafter, num_draft_tokens=args.k)
    out_dir = Path(args.out).parent
    out_dir.mkdir(parents=True, exist_ok=True)

    fig, axes = plt.subplots(args.clips, 1, figsize=(12, 3.6 * args.clips), squeeze=False, layout="constrained")
    totals = {"identical": 0, "asked": 0}
    asked = []  # (frames, question) of every answer, timed below
    for i in range(args.clips):
        clip = make_clip(i, "test")
        path = write_video(clip.frames_array(), out_dir / f"clip-{i}.avi", fps=4)
        frames = load_frames(str(path))  # read back from the file with OpenCV
        print(f"\nclip {i} ({path}, {len(frames)} frames)")
        lines = []
        for question, truth in [("caption :", clip.caption())] + [(f"question : {q} answer :", a) for q, a in clip.questions()]:
            plain = plain_answer(spec, frames, question, 64)
            with torch.inference_mode():
                out = spec.generate(frames, question, max_new_tokens=64)
            asked.append((frames, question))
            same = out.texts[0] == plain
            totals["identical"] += same
            totals["asked"] += 1
            ok = "✓" if out.texts[0] == truth else "✗"
            q = question.replace("question : ", "").replace(" answer :", "")
            print(f"  {q}\n    truth: {truth}\n    {ok} model: {out.texts[0]}  [identical to plain: {same}; "
                  f"{out.stats.mean_accepted_tokens:.2f} tokens/forward]")  # fmt: skip
            lines.append(f"{ok} {q} → {out.texts[0]}  ({out.stats.mean_accepted_tokens:.1f} tok/fwd)")
        ax = axes[i, 0]
        ax.imshow(frames.transpose(1, 0, 2, 3).reshape(frames.shape[1], -1, 3))
        ax.set_xticks([(j + 0.5) * frames.shape[2] for j in range(len(frames))], [f"frame {j}" for j in range(len(frames))])
        ax.set_yticks([])
        ax.set_title("\n".join(textwrap.wrap(f"truth: {clip.caption()}", 120) + lines), fontsize=8, loc="left")
    with torch.inference_mode():  # every question again, plain vs speculative, interleaved repetitions (medians)
        seconds = interleaved_seconds({
            "plain": lambda: [plain_answer(spec, f, q, 64) for f, q in asked],
            "spec": lambda: [spec.generate(f, q, max_new_tokens=64) for f, q in asked]}, args.reps)  # fmt: skip
    totals["plain"], totals["spec"] = seconds["plain"], seconds["spec"]
    fig.suptitle(f"shapes-video, speculative decoding ({args.drafter} drafter, K={args.k}): "
                 f"{totals['identical']}/{totals['asked']} answers identical to plain decoding, "
                 f"{totals['plain'] / totals['spec']:.2f}x faster overall")  # fmt: skip
    fig.savefig(args.out, dpi=90)
    print(f"\n{totals['identical']}/{totals['asked']} identical to plain decoding; speculative {totals['spec']:.2f} s vs "
          f"plain {totals['plain']:.2f} s ({totals['plain'] / totals['spec']:.2f}x; medians of {args.reps} interleaved runs)"
          f"\nwrote {args.out}")  # fmt: skip


if __name__ == "__main__":
    main()
