"""Outputs of every method on the bundled models are bit-identical to those recorded at commit 36b3cb6 (before the
one-loop refactor): greedy and seeded sampled token ids (VLM, video, every lossless drafter), image-AR codes per
method and seed, and a hash of the diffusion samples per method and seed. Recorded with
``python -m tests.helpers.golden tests/golden/36b3cb6.json`` on that commit."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest

from tests.helpers import golden

GOLDEN = json.loads((Path(__file__).parent / "golden" / "36b3cb6.json").read_text())
GROUPS = {"vlm": golden.vlm_cases, "video": golden.video_cases, "image-ar": golden.image_ar_cases,
          "diffusion": golden.diffusion_cases}  # fmt: skip


@functools.cache
def _cases(group: str) -> dict:
    return GROUPS[group]()


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_bit_identical_to_36b3cb6(name):
    assert _cases(name.split("/")[0])[name]() == GOLDEN[name]


@pytest.mark.parametrize("method", golden.LEGACY_WINDOW_DRAW)
def test_drafter_image_ar_methods_differ_only_by_the_old_unused_draw(method):
    """Without the old loop's wasted window draw the AR-drafter methods sample other codes (the random stream
    moved), still with the exact law (tests/test_image_ar.py); with it reproduced they are bit-identical (above)."""
    out = _cases_plain()[f"image-ar/{method}/seed0"]()
    assert len(out) == 2 and all(len(row) == 64 for row in out)
    assert out != GOLDEN[f"image-ar/{method}/seed0"]


@functools.cache
def _cases_plain() -> dict:
    return golden.image_ar_cases(legacy=False)


def test_every_method_is_covered():
    from mmspec import IMAGE_AR_METHODS
    from mmspec.modalities.diffusion import DIFFUSION_METHODS

    names = {n.split("/")[1] for n in GOLDEN}
    assert set(IMAGE_AR_METHODS.names()) <= names and set(DIFFUSION_METHODS.names()) <= names
