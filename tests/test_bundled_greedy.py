"""Greedy identity on the bundled zoo models (not only tiny random ones): every lossless drafting option decodes
exactly what plain greedy decoding of the target decodes, on batches of held-out inputs."""

from __future__ import annotations

import pytest
import torch

from mmspec import EarlyExitDrafter, ModelDrafter, NgramDrafter, STDDrafter, VideoSpeculator, VLMSpeculator, zoo
from mmspec.drafters import CompressedVLMDrafter
from mmspec.drafters.eagle import EagleDrafter

NEW = 40


@pytest.fixture(scope="module")
def video():
    return zoo.load("shapes-video")


@pytest.fixture(scope="module")
def video_batch(video):
    from mmspec.zoo.shapes_video import make_clip

    clips = [make_clip(i, "test").frames_array() for i in range(3)]
    prompts = ["caption :", "question : what happens first ? answer :", "question : what moves ? answer :"]
    return clips, prompts


VIDEO_OPTIONS = {
    "small video-LM K=5": (lambda m: ModelDrafter(m.drafter_vlm), dict(num_draft_tokens=5)),
    "small video-LM tree": (lambda m: ModelDrafter(m.drafter_vlm), dict(tree=(2, 2, 1, 1))),
    "text-only": (lambda m: ModelDrafter(m.drafter_text, text_only=True), dict(num_draft_tokens=4)),
    "grid-pool 16": (lambda m: CompressedVLMDrafter(m.drafter_vlm, "grid-pool", 16), dict(num_draft_tokens=5)),
    "merge 16": (lambda m: CompressedVLMDrafter(m.drafter_vlm, "merge", 16), dict(num_draft_tokens=5)),
    "two-stage 16": (lambda m: CompressedVLMDrafter(m.drafter_vlm, "two-stage", 16), dict(num_draft_tokens=5)),
    "query adaptor 16": (lambda m: CompressedVLMDrafter(m.drafter_adaptor, m.adaptor, 16), dict(num_draft_tokens=5)),
    "STD keep 16": (lambda m: STDDrafter(m.target, keep=16), dict(num_draft_tokens=5)),
    "STD keep 8 + feedback": (lambda m: STDDrafter(m.target, keep=8, feedback=True), dict(tree=(2, 2, 1))),
    "EAGLE K=5": (lambda m: EagleDrafter(m.target, m.eagle), dict(num_draft_tokens=5)),
    "EAGLE tree": (lambda m: EagleDrafter(m.target, m.eagle), dict(tree=(2, 2, 1, 1))),
    "EAGLE dynamic tree": (lambda m: EagleDrafter(m.target, m.eagle, "dynamic", threshold=0.2), dict(tree=(3, 3, 2, 2))),
    "early exit 2 layers": (lambda m: EarlyExitDrafter(m.target, 2), dict(num_draft_tokens=4)),
    "early exit shared KV": (lambda m: EarlyExitDrafter(m.target, 2, share_kv=True), dict(num_draft_tokens=4)),
    "n-gram": (lambda m: NgramDrafter(), dict(num_draft_tokens=4)),
}


@pytest.mark.parametrize("name", list(VIDEO_OPTIONS))
def test_shapes_video_every_lossless_option(video, video_batch, name):
    build, cfg = VIDEO_OPTIONS[name]
    clips, prompts = video_batch
    spec = VideoSpeculator(video.target, video.processor, build(video), **cfg)
    ref = video.target.generate(**spec.prepare(clips, prompts), do_sample=False, max_new_tokens=NEW)
    out = spec.generate(clips, prompts, max_new_tokens=NEW)
    assert torch.equal(out.sequences, ref), f"\nspec {out.texts}\nref  {spec.processor.batch_decode(ref)}"


def test_shapes_vlm_std_shared_early_exit_and_eagle():
    from mmspec.zoo.shapes import make_scene

    m = zoo.load("shapes-vlm")
    images = [make_scene(i, "test").render(96) for i in range(3)]
    drafters = [STDDrafter(m.target, keep=4), STDDrafter(m.target, keep=4, feedback=True),
                EarlyExitDrafter(m.target, 4, share_kv=True)]
    if m.eagle is not None:
        drafters.append(EagleDrafter(m.target, m.eagle))
    for drafter in drafters:
        spec = VLMSpeculator(m.target, m.processor, drafter, num_draft_tokens=4)
        ref = m.target.generate(**spec.prepare(images, "caption :"), do_sample=False, max_new_tokens=NEW)
        assert torch.equal(spec.generate(images, "caption :", max_new_tokens=NEW).sequences, ref)
