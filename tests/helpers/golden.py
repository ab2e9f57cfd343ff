"""Golden outputs of every method on the bundled models: token ids (VLM, video), codes (image AR) and sample hashes
(diffusion) per method and seed. ``python -m tests.helpers.golden OUT.json`` records them; tests/test_golden.py
compares the current code against the file recorded at commit 36b3cb6 (before the one-loop refactor).

Only public, long-standing APIs are used here, so the same script runs on the old and the new tree.
"""

from __future__ import annotations

import hashlib
import json
import sys

import torch

SCENES, CLIPS, CONDITIONS = 3, 2, ["red circle at top left", "blue square at center"]
SAMPLED = dict(temperature=0.8, top_p=0.95, seed=0)


def _ids(out) -> list:
    return out.new_tokens.tolist()


def _sha(t: torch.Tensor) -> str:
    return hashlib.sha256(t.detach().float().contiguous().numpy().tobytes()).hexdigest()[:16]


def vlm_cases():
    """name -> callable() -> list of generated ids per scene (greedy and seeded sampling, every lossless drafter)."""
    import mmspec
    from mmspec import EarlyExitDrafter, NgramDrafter, STDDrafter, VLMSpeculator, zoo
    from mmspec.drafters import CompressedVLMDrafter
    from mmspec.drafters.eagle import EagleDrafter
    from mmspec.zoo.shapes import make_scene

    m = zoo.load("shapes-vlm")
    images = [make_scene(i, "test").render(96) for i in range(SCENES)]
    drafters = {
        "small-vlm": m.drafter_vlm, "text-only": m.drafter_text, "ngram": NgramDrafter(),
        "early-exit": EarlyExitDrafter(m.target, 4), "early-exit-shared": EarlyExitDrafter(m.target, 4, share_kv=True),
        "eagle": EagleDrafter(m.target, m.eagle), "std": STDDrafter(m.target, keep=4),
        "grid-pool": CompressedVLMDrafter(m.drafter_vlm, "grid-pool", budget=4),
    }  # fmt: skip
    cases = {}
    for name, d in drafters.items():
        spec = VLMSpeculator(m.target, m.processor, drafter=d, num_draft_tokens=4)
        cases[f"vlm/{name}/greedy"] = lambda spec=spec: _ids(spec.generate(images, "caption :", max_new_tokens=32))
        if name in ("small-vlm", "eagle", "text-only"):
            cases[f"vlm/{name}/sampled"] = lambda spec=spec: _ids(spec.generate(images, "caption :", max_new_tokens=32,
                                                                                **SAMPLED))  # fmt: skip
    spec = VLMSpeculator(m.target, m.processor, drafter=m.drafter_vlm, num_draft_tokens=4, tree=(2, 2, 1))
    cases["vlm/small-vlm-tree/greedy"] = lambda: _ids(spec.generate(images, "caption :", max_new_tokens=32))
    spec_rows = VLMSpeculator(m.target, m.processor, drafter=m.drafter_vlm, num_draft_tokens=4, rows="independent")
    cases["vlm/small-vlm-per-row/greedy"] = lambda: _ids(spec_rows.generate(images, "caption :", max_new_tokens=32))
    cases["vlm/small-vlm-per-row/sampled"] = lambda: _ids(spec_rows.generate(images, "caption :", max_new_tokens=32, **SAMPLED))
    del mmspec
    return cases


def video_cases():
    from mmspec import STDDrafter, VideoSpeculator, zoo
    from mmspec.drafters import CompressedVLMDrafter
    from mmspec.drafters.eagle import EagleDrafter
    from mmspec.zoo.shapes_video import make_clip

    v = zoo.load("shapes-video")
    clips = [make_clip(i, "test").frames_array() for i in range(CLIPS)]
    drafters = {"small-vlm": v.drafter_vlm, "eagle": EagleDrafter(v.target, v.eagle), "std": STDDrafter(v.target, keep=16),
                "adaptor": CompressedVLMDrafter(v.drafter_adaptor, v.adaptor, budget=16)}  # fmt: skip
    cases = {}
    for name, d in drafters.items():
        spec = VideoSpeculator(v.target, v.processor, drafter=d, num_draft_tokens=5)
        cases[f"video/{name}/greedy"] = lambda spec=spec: _ids(spec.generate(clips, "caption :", max_new_tokens=24))
        if name in ("small-vlm", "eagle"):
            cases[f"video/{name}/sampled"] = lambda spec=spec: _ids(spec.generate(clips, "caption :", max_new_tokens=24,
                                                                                  **SAMPLED))  # fmt: skip
    return cases


def image_ar_cases():
    from mmspec import IMAGE_AR_METHODS, zoo

    spec = zoo.load("shapes-t2i").speculator()
    cases = {}
    for method in IMAGE_AR_METHODS.names():
        for seed in (0, 1):
            cases[f"image-ar/{method}/seed{seed}"] = lambda method=method, seed=seed: spec.generate(
                CONDITIONS, method=method, seed=seed, decode=False).codes.tolist()
    return cases


def diffusion_cases():
    from mmspec import zoo
    from mmspec.modalities.diffusion import DIFFUSION_METHODS

    spec = zoo.load("shapes-ddpm").speculator()
    cases = {}
    for method in DIFFUSION_METHODS.names():
        for seed in (0, 1):
            cases[f"diffusion/{method}/seed{seed}"] = lambda method=method, seed=seed: _sha(
                spec.generate(CONDITIONS, method=method, seed=seed, num_inference_steps=20, decode=False).samples)
    return cases


def all_cases() -> dict:
    torch.set_num_threads(2)
    cases = {}
    for group in (vlm_cases, video_cases, image_ar_cases, diffusion_cases):
        cases.update(group())
    return cases


def record(path: str) -> None:
    out = {}
    for name, run in all_cases().items():
        out[name] = run()
        print(name, str(out[name])[:80], flush=True)
    with open(path, "w") as f:
        json.dump(out, f, indent=0, sort_keys=True)


if __name__ == "__main__":
    record(sys.argv[1])
