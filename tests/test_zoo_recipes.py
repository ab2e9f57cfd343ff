"""The shapes-video recipe runs end to end (2 steps per model) and its output loads; the clip generator's contract."""

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
