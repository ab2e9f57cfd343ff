"""A/B of two checkouts of mmspec on the bundled zoo (the refactor gate of issue 16): run it once per checkout, in
alternation, and compare the printed ratios (medians over interleaved repetitions of each method against plain
decoding in the same process). Uses only API that both sides of the refactor have.

    for alt in 1 2 3; do for tree in /tmp/old /work/main; do
      PYTHONPATH=$tree .venv/bin/python benchmarks/ab_trees.py video "$tree alt$alt" 3; done; done

Modalities: vlm (8 scenes), video (4 clips), image-ar (4 conditions, batch 1), diffusion (2 conditions, batch 1).
"""

import statistics
import sys
import time

import torch

from mmspec import zoo


def run(label, methods, reps):
    for f in methods.values():  # warm-up
        f()
    secs = {n: [] for n in methods}
    names = list(methods)
    for rep in range(reps):
        for n in names[rep % len(names) :] + names[: rep % len(names)]:
            t0 = time.perf_counter()
            methods[n]()
            secs[n].append(time.perf_counter() - t0)
    out = {n: round(statistics.median(p / s for p, s in zip(secs["plain"], secs[n])), 3) for n in names if n != "plain"}
    print("RESULT", label, "plain_s", round(statistics.median(secs["plain"]), 3), out, flush=True)


def token_methods(target, processor, encs, max_new_tokens, speculator, drafters):
    def plain():
        for e in encs:
            target.generate(**e, do_sample=False, max_new_tokens=max_new_tokens)

    def spec(drafter, k):
        s = speculator(target, processor, drafter=drafter, num_draft_tokens=k)
        cfg = s.config.__class__(**{**s.config.__dict__, "max_new_tokens": max_new_tokens})

        def go():
            for e in encs:
                e = dict(e)
                ids, mask = e.pop("input_ids"), e.pop("attention_mask")
                s.engine.generate(ids, mask, config=cfg, **e)

        return go

    return {"plain": plain, **{name: spec(d, k) for name, (d, k) in drafters.items()}}


def eagle(target, head):
    try:
        from mmspec.drafters.eagle import EagleDrafter
    except ImportError:  # before the refactor
        from mmspec.drafting.eagle import EagleDrafter
    return EagleDrafter(target, head)


def vlm():
    from mmspec import EarlyExitDrafter, VLMSpeculator
    from mmspec.zoo.shapes import make_scene

    m = zoo.load("shapes-vlm")
    encs = [dict(m.processor(images=[make_scene(i, "test").render(96)], text=["<image> caption :"], return_tensors="pt"))
            for i in range(8)]  # fmt: skip
    return token_methods(m.target, m.processor, encs, 48, VLMSpeculator, {
        "small-vlm K=5": (m.drafter_vlm, 5), "text-only K=4": (m.drafter_text, 4), "eagle K=5": (eagle(m.target, m.eagle), 5),
        "early-exit shared K=4": (EarlyExitDrafter(m.target, 4, share_kv=True), 4)})  # fmt: skip


def video():
    from mmspec import STDDrafter, VideoSpeculator
    from mmspec.zoo.shapes_video import caption_prompt, make_clip

    m = zoo.load("shapes-video")
    encs = [dict(m.processor(videos=[make_clip(i, "test").frames_array()], text=[caption_prompt()], return_tensors="pt"))
            for i in range(4)]  # fmt: skip
    return token_methods(m.target, m.processor, encs, 64, VideoSpeculator, {
        "small K=5": (m.drafter_vlm, 5), "STD keep 16 K=5": (STDDrafter(m.target, keep=16), 5),
        "EAGLE K=5": (eagle(m.target, m.eagle), 5)})  # fmt: skip


def sampled(spec, conds, runs):
    def mk(method, **kw):
        def go():
            for i, c in enumerate(conds):
                spec.generate([c], method=method, seed=i, **kw)

        return go

    return {name: mk(method, **kw) for name, (method, kw) in runs.items()}


def image_ar():
    spec = zoo.load("shapes-t2i").speculator(cfg_scale=2.0)
    conds = ["red circle at top left", "blue square at center", "green triangle at right", "yellow circle at bottom"]
    return sampled(spec, conds, {"plain": ("plain", {}), "sjd w32": ("sjd", {"window": 32}), "mc-sjd w32": ("mc-sjd", {"window": 32}),
                                 "lantern-jacobi w32": ("lantern-jacobi", {"window": 32, "delta": 0.2}),
                                 "speculative K=4": ("speculative", {"num_draft_tokens": 4})})  # fmt: skip


def diffusion():
    spec = zoo.load("shapes-ddpm").speculator()
    steps = {"num_inference_steps": 100}
    return sampled(spec, ["red circle at top left", "blue square at center"], {
        "plain": ("plain", steps), "speculative L=4": ("speculative", {**steps, "lookahead": 4}),
        "asd L=8": ("asd", {**steps, "lookahead": 8}), "paradigms w8": ("paradigms", {**steps, "window": 8})})  # fmt: skip


if __name__ == "__main__":
    torch.set_num_threads(2)
    modality, label, reps = sys.argv[1], sys.argv[2], int(sys.argv[3])
    run(f"{modality} {label}", {"vlm": vlm, "video": video, "image-ar": image_ar, "diffusion": diffusion}[modality](), reps)
