"""Video adapter: frame loading/sampling (PIL, numpy, OpenCV files) and greedy identity with plain decoding on tiny
Qwen2-VL (M-RoPE, video_grid_thw) and LLaVA-OneVision video models, for every lossless drafter."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image
from tests.helpers.tiny_video import onevision_video, qwen2vl_video, random_clip

from mmspec import EarlyExitDrafter, ModelDrafter, NgramDrafter, STDDrafter
from mmspec.modalities.video import VideoSpeculator, load_frames, read_video, sample_indices, write_video

NEW = 12
PROMPTS = ["caption :", "question : what happens first ? answer :"]


def test_sample_indices_uniform_with_ends():
    assert sample_indices(10, 4).tolist() == [0, 3, 6, 9]
    assert sample_indices(5, None).tolist() == [0, 1, 2, 3, 4]
    assert sample_indices(3, 3).tolist() == [0, 1, 2]
    with pytest.raises(ValueError, match="num_frames"):
        sample_indices(10, 0)  # 0 is not "every frame" (that is None)
    with pytest.raises(ValueError, match="num_frames: the clip has 3 frames"):
        sample_indices(3, 8)  # never silently fewer frames than asked for


def test_load_frames_from_pil_numpy_and_lists():
    clip = random_clip(frames=6, size=16)
    assert np.array_equal(load_frames(clip), clip)
    assert np.array_equal(load_frames([Image.fromarray(f) for f in clip]), clip)
    assert np.array_equal(load_frames(list(clip), num_frames=3), clip[[0, 2, 5]])  # round(linspace(0, 5, 3))


@pytest.mark.parametrize("bad,kind,match", [
    (np.zeros((4, 8, 8, 3), dtype=np.float32), ValueError, "uint8 RGB frames"),
    (np.zeros((8, 8, 3), dtype=np.uint8), ValueError, r"\[T, H, W, 3\]"),
    ([], TypeError, "empty list"),
    ([1, 2], TypeError, "list of PIL images"),
    (3.5, TypeError, "file path"),
    ("/no/such/clip.mp4", FileNotFoundError, "no such file"),
], ids=str)  # fmt: skip
def test_load_frames_errors_name_the_argument(bad, kind, match):
    with pytest.raises(kind, match=match):
        load_frames(bad)


@pytest.mark.parametrize("suffix", [".avi", ".webm"])
def test_video_file_roundtrip_and_sampling(tmp_path, suffix):
    clip = np.zeros((10, 32, 32, 3), dtype=np.uint8)
    for i in range(10):  # a bright bar moving right: frames are distinguishable after compression
        clip[i, 8:24, 3 * i : 3 * i + 6] = (250, 40, 40)
    path = write_video(clip, tmp_path / f"bar{suffix}", fps=5)
    assert path.exists() and not list(tmp_path.glob(".*partial*"))
    back = read_video(path)
    assert back.shape == clip.shape
    assert np.abs(back.astype(int) - clip.astype(int)).mean() < 8  # MJPG and VP8 are lossy
    sampled = load_frames(str(path), num_frames=4)
    assert sampled.shape[0] == 4
    assert np.abs(sampled.astype(int) - clip[[0, 3, 6, 9]].astype(int)).mean() < 8


def test_write_video_rejects_bad_suffix_and_leaves_nothing(tmp_path):
    with pytest.raises(ValueError, match="path: expected a .avi, .mp4 or .webm"):
        write_video(random_clip(frames=2, size=16), tmp_path / "clip.gif")
    assert not list(tmp_path.iterdir())


@pytest.fixture(scope="module")
def qwen_video():
    target, processor = qwen2vl_video(seed=0, layers=3)
    small, _ = qwen2vl_video(seed=1, layers=1, hidden=32)
    from tests.conftest import tiny_llama

    text = tiny_llama(seed=2, layers=1, hidden=32, width=target.config.text_config.vocab_size)
    return target, processor, small, text


@pytest.fixture(scope="module")
def onevision():
    target, processor = onevision_video(seed=0, layers=3)
    small, _ = onevision_video(seed=1, layers=1, hidden=32)
    return target, processor, small


def _reference(spec, clips, prompts):
    enc = spec.prepare(clips, prompts)
    return spec.target.generate(**enc, do_sample=False, max_new_tokens=NEW)


def _check_identity(target, processor, drafter, clips, **cfg):
    spec = VideoSpeculator(target, processor, drafter, **cfg)
    ref = _reference(spec, clips, PROMPTS)
    out = spec.generate(clips, PROMPTS, max_new_tokens=NEW)
    assert torch.equal(out.sequences, ref), f"\nspec {out.new_tokens}\nref  {ref[:, -NEW:]}"
    return out


SHAPES = [dict(num_draft_tokens=4), dict(tree=(2, 2, 1))]


COMBOS = [(n, c) for n in ["small-video", "text-only", "early-exit", "ngram"] for c in SHAPES
          if not (n == "ngram" and "tree" in c)]  # n-gram drafting proposes chains only  # fmt: skip


@pytest.mark.parametrize("name,cfg", COMBOS, ids=str)
def test_qwen2vl_video_greedy_identity(qwen_video, name, cfg):
    target, processor, small, text = qwen_video
    drafter = {"small-video": lambda: ModelDrafter(small), "text-only": lambda: ModelDrafter(text, text_only=True),
               "early-exit": lambda: EarlyExitDrafter(target, 1), "ngram": NgramDrafter}[name]()  # fmt: skip
    clips = [random_clip(seed=0), random_clip(seed=1)]  # two prompts of different length: left padding
    _check_identity(target, processor, drafter, clips, **cfg)


def test_qwen2vl_long_clip_decode_positions(qwen_video):
    """A clip with more temporal patches than spatial ones (24 frames of 64 px: t = 12 > h = w = 4): Qwen2-VL puts
    the text after the video at its start + max(h, w), below the largest temporal position, and HF ``generate``
    continues from the prompt's last position. The runner's decode logits equal HF's step by step (decoding from the
    largest position + 1 instead shifts every decode position and fails this)."""
    from mmspec.runner import ModelRunner

    target, processor, small, _ = qwen_video
    spec = VideoSpeculator(target, processor, ModelDrafter(small))
    enc = spec.prepare([random_clip(seed=0, frames=24), random_clip(seed=1, frames=24)], PROMPTS)
    ref = target.generate(**enc, do_sample=False, max_new_tokens=6, output_scores=True, return_dict_in_generate=True)
    kw = {k: v for k, v in enc.items() if k not in ("input_ids", "attention_mask")}
    runner = ModelRunner(target)
    logits = [runner.prefill(enc["input_ids"], enc["attention_mask"], **kw)]
    new = ref.sequences[:, enc["input_ids"].shape[1] :]
    for i in range(5):
        logits.append(runner.extend(new[:, i : i + 1])[:, -1])
        runner.commit(1)
    for step, (ours, theirs) in enumerate(zip(logits, ref.scores)):
        assert torch.allclose(ours, theirs[:, : ours.shape[-1]], atol=1e-4), step


@pytest.mark.parametrize("name", ["small-video", "std", "std-rows"])
def test_qwen2vl_long_clip_greedy_identity(qwen_video, name):
    target, processor, small, _ = qwen_video
    drafter = ModelDrafter(small) if name == "small-video" else STDDrafter(target, keep=8)
    cfg = {"rows": "independent"} if name == "std-rows" else {}
    clips = [random_clip(seed=0, frames=24), random_clip(seed=1, frames=24)]
    _check_identity(target, processor, drafter, clips, num_draft_tokens=4, **cfg)


@pytest.mark.parametrize("cfg", SHAPES, ids=str)
@pytest.mark.parametrize("name", ["small-video", "early-exit"])
def test_onevision_video_greedy_identity(onevision, name, cfg):
    target, processor, small = onevision
    drafter = ModelDrafter(small) if name == "small-video" else EarlyExitDrafter(target, 1)
    clips = [random_clip(seed=0, frames=4, size=32), random_clip(seed=1, frames=4, size=32)]
    _check_identity(target, processor, drafter, clips, **cfg)


def test_video_speculator_frame_sampling_and_placeholder(qwen_video):
    target, processor, small, _ = qwen_video
    spec = VideoSpeculator(target, processor, ModelDrafter(small), num_frames=4)
    enc = spec.prepare(random_clip(frames=16), "caption :")
    assert enc["video_grid_thw"].tolist() == [[2, 8, 8]]  # 4 frames -> 2 temporal patches of 8x8
    words = processor.tokenizer.convert_ids_to_tokens(enc["input_ids"][0])
    assert words[:3] == ["<s>", "<|vision_start|>", "<|video_pad|>"] and words.count("<|video_pad|>") == 2 * 4 * 4
    assert words[-3:] == ["<|vision_end|>", "caption", ":"]


def test_video_speculator_errors(qwen_video):
    target, processor, small, _ = qwen_video
    spec = VideoSpeculator(target, processor, ModelDrafter(small))
    with pytest.raises(ValueError, match="one clip per prompt"):
        spec.prepare([random_clip(0), random_clip(1), random_clip(2)], ["a", "b"])
    with pytest.raises(ValueError, match="prompt: expected a non-empty"):
        spec.prepare(random_clip(0), " ")
    from tests.helpers.tiny_video import onevision_processor

    with pytest.raises(ValueError, match="processor: expected a video-capable processor"):
        VideoSpeculator(target, onevision_processor().tokenizer, ModelDrafter(small))
