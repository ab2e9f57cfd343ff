"""The zoo recipes run end to end (2 steps per model) and their outputs load; the data generators' contracts."""

from __future__ import annotations

import json

import numpy as np
import pytest

from mmspec.zoo import ZOO
from mmspec.zoo.shapes_video import NUM_FRAMES, make_clip


def test_shapes_video_recipe_smoke(tmp_path):
    entry = ZOO.get("shapes-video")
    card = entry.train(tmp_path, smoke=True)
    assert set(card["models"]) == {"target", "drafter-text", "drafter-vlm", "adaptor", "eagle"}
    assert json.loads((tmp_path / "card.json").read_text()) == card
    assert not list(tmp_path.rglob("*.bin")) and not list(tmp_path.rglob("*.pt"))  # safetensors only
    m = entry.load(tmp_path)
    assert m.eagle is not None and m.adaptor is not None and m.adaptor.num_queries == 16 and m.drafter_adaptor is not None
    enc = m.processor(videos=[make_clip(0).frames_array()], text=["<|vision_start|><|video_pad|><|vision_end|> caption :"],
                      return_tensors="pt")  # fmt: skip
    assert enc["video_grid_thw"].tolist() == [[NUM_FRAMES // 2, 8, 8]]


def test_shapes_vlm_recipe_smoke_and_a_one_stage_retrain(tmp_path):
    entry = ZOO.get("shapes-vlm")
    card = entry.train(tmp_path, smoke=True)
    assert list(card["models"]) == ["drafter-text", "drafter-vlm", "target", "eagle"]
    assert all(m["train_seconds"] >= 0 for m in card["models"].values()) and card["size_mb"] > 0
    assert "caption_accuracy_test" in card["models"]["target"] and "caption_accuracy_test" not in card["models"]["drafter-text"]
    assert json.loads((tmp_path / "card.json").read_text()) == card
    assert not list(tmp_path.rglob("*.bin")) and not list(tmp_path.rglob("*.pt"))  # safetensors only
    m = entry.load(tmp_path)
    assert m.eagle is not None and m.target.dtype == m.drafter_text.dtype
    before = dict(card["models"])
    again = entry.train(tmp_path, smoke=True, only=("eagle",))  # the other models and their entries stay
    assert {k: again["models"][k] for k in ("drafter-text", "drafter-vlm", "target")} == {
        k: before[k] for k in ("drafter-text", "drafter-vlm", "target")}
    with pytest.raises(ValueError, match="only: expected names among"):
        entry.train(tmp_path, smoke=True, only=("targets",))


def test_clips_are_deterministic_and_captions_match_events():
    a, b = make_clip(7), make_clip(7)
    assert a == b and np.array_equal(a.frames_array(), b.frames_array())
    assert make_clip(7, "test") != a
    for i in range(200):
        clip = make_clip(i)
        caption = clip.caption()
        assert caption.count(" then ") == len(clip.events) and caption.endswith(" .")
        frames = clip.frames_array()
        assert frames.shape == (NUM_FRAMES, 64, 64, 3)
        changed = [f for f in range(1, NUM_FRAMES) if not np.array_equal(frames[f], frames[f - 1])]
        assert changed and all(f >= 1 for f in changed)  # something happens after the first frame
    with pytest.raises(ValueError, match="split: expected 'train' or 'test'"):
        make_clip(0, "val")


def test_slowed_down_clips_are_the_same_events_at_a_higher_frame_rate():
    """A clip rendered r times slower has r * NUM_FRAMES frames: every r-th frame is the 1x frame (so the caption
    still holds), moves glide over the in-between frames, and events still start on a frame pair."""
    for i in range(40):
        clip = make_clip(i)
        base, slow = clip.frames_array(), clip.frames_array(slowdown=4)
        assert slow.shape == (4 * NUM_FRAMES, 64, 64, 3) and np.array_equal(slow[::4], base)
        pairs = slow.reshape(2 * NUM_FRAMES, 2, 64, 64, 3)
        for e in clip.events:
            if e.verb != "moves":  # an instant event: the frame pair it starts is whole (one temporal patch)
                assert np.array_equal(pairs[2 * e.frame][0], pairs[2 * e.frame][1])
        if any(e.verb == "moves" for e in clip.events):  # in-between frames differ from both neighbours
            e = next(e for e in clip.events if e.verb == "moves")
            j = 4 * e.frame - 3  # a quarter-step into the glide's second half
            assert not np.array_equal(slow[j], slow[j - 1]) and not np.array_equal(slow[j], slow[j + 1])
    for bad in (0, 3, 2.0):
        with pytest.raises(ValueError, match="slowdown: expected 1 or an even int"):
            make_clip(0).frames_array(slowdown=bad)


def test_shapes_video_long_recipe_smoke(tmp_path):
    """The long-clip fine-tune starts from the bundled shapes-video target, writes target/ + card, and loads."""
    entry = ZOO.get("shapes-video-long")
    card = entry.train(tmp_path, smoke=True, eval_slowdowns=(1, 2))
    assert card["models"]["target"]["steps"] == 2 and set(card["models"]["target"]["caption_accuracy_test"]["after"]) == {"1x", "2x"}
    assert json.loads((tmp_path / "card.json").read_text()) == card and not list(tmp_path.rglob("*.bin"))
    m = entry.load(tmp_path)
    enc = m.processor(videos=[make_clip(0).frames_array(slowdown=2)], text=["<|vision_start|><|video_pad|><|vision_end|> caption :"],
                      return_tensors="pt")  # fmt: skip
    assert enc["video_grid_thw"].tolist() == [[NUM_FRAMES, 8, 8]]
    with pytest.raises(ValueError, match="slowdowns: expected ints that are 1 or even"):
        entry.train(tmp_path / "x", smoke=True, slowdowns=(1, 3))
    with pytest.raises(FileNotFoundError, match="base: no shapes-video target"):
        entry.train(tmp_path / "y", smoke=True, base=tmp_path / "nowhere")


def test_shapes_t2i_recipe_smoke(tmp_path):
    from mmspec.zoo.shapes_t2i import GRID

    entry = ZOO.get("shapes-t2i")
    card = entry.train(tmp_path, smoke=True)
    assert set(card["models"]) == {"vq", "judge", "target", "drafter"}
    assert json.loads((tmp_path / "card.json").read_text()) == card
    assert not list(tmp_path.rglob("*.bin")) and not list(tmp_path.rglob("*.pt"))  # safetensors only
    m = entry.load(tmp_path)
    out = m.speculator().generate(["red circle at top left", 5], "mc-sjd", seed=0)
    assert out.codes.shape == (2, GRID * GRID) and out.images[0].size == (32, 32)
    again = entry.train(tmp_path, smoke=True, only=("target",), resume_target=True)  # a second target stage
    target = again["models"]["target"]
    assert target["steps"] == 4 and [s.get("resumed", False) for s in target["stages"]] == [False, True]
    assert target["train_seconds"] >= card["models"]["target"]["train_seconds"] and again["models"]["vq"] == card["models"]["vq"]


def test_shapes_t2i_conditions_round_trip_and_images_follow_them():
    from mmspec.zoo.shapes_t2i import ALL_CONDITIONS, BACKGROUND, Condition, example, render, to_condition

    assert len({c.label for c in ALL_CONDITIONS}) == 108
    for c in ALL_CONDITIONS:
        assert Condition.from_label(c.label) == c and Condition.parse(c.caption()) == c and to_condition(c.caption()) == c
    for bad in ("purple circle at top", "red circle", "red hexagon at top left"):
        with pytest.raises(ValueError, match="condition"):
            Condition.parse(bad)
    a = np.asarray(render(Condition("circle", "red", 0), seed=3))
    assert a.shape == (32, 32, 3) and np.array_equal(a, np.asarray(render(Condition("circle", "red", 0), seed=3)))
    ink = np.abs(a.astype(int) - np.array(BACKGROUND)).sum(-1) > 60  # [32, 32] shape pixels
    ys, xs = ink.nonzero()
    assert ink.sum() > 10 and ys.mean() < 16 and xs.mean() < 16  # "top left" is drawn in the top-left region
    assert example(3, "train")[0] != example(3, "test")[0] or not np.array_equal(
        np.asarray(example(3, "train")[1]), np.asarray(example(3, "test")[1]))


def test_shapes_ddpm_recipe_smoke(tmp_path):
    entry = ZOO.get("shapes-ddpm")
    card = entry.train(tmp_path, smoke=True)
    assert card["unet"]["steps"] == 2 and card["null_class"] == 108
    assert json.loads((tmp_path / "card.json").read_text()) == card
    assert not list(tmp_path.rglob("*.bin")) and not list(tmp_path.rglob("*.pt"))  # safetensors only
    from mmspec.zoo.integrity import verify

    verify(tmp_path, "shapes-ddpm")  # the recipe recorded a sha256 per file
    m = entry.load(tmp_path)
    out = m.speculator().generate(["red circle at top left", 5], num_inference_steps=6, method="asd", seed=0)
    assert out.samples.shape == (2, 3, 32, 32) and out.images[0].size == (32, 32) and out.lossless
    with pytest.raises(ValueError, match="only: shapes-ddpm has one model"):
        entry.train(tmp_path, only=("unet",))
