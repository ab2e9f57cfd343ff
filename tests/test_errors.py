"""Bad input raises a clear error naming the argument."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from mmspec import ModelDrafter, SpecConfig, SpeculativeEngine
from tests.conftest import tiny_llama


@pytest.mark.parametrize("kwargs,arg", [(dict(num_draft_tokens=0), "num_draft_tokens"), (dict(temperature=-0.1), "temperature"),
                                        (dict(top_p=0.0), "top_p"), (dict(tree=(2, 0)), "tree")])  # fmt: skip
def test_bad_config(kwargs, arg):
    with pytest.raises(ValueError, match=arg):
        SpecConfig(**kwargs)


def test_mismatched_vocabulary(llama_pair):
    target, _ = llama_pair
    small_vocab = tiny_llama(seed=3, layers=1, hidden=32, vocab=20)
    with pytest.raises(ValueError, match="vocabulary"):
        SpeculativeEngine(target, ModelDrafter(small_vocab))


def test_empty_prompt(llama_pair):
    target, small = llama_pair
    engine = SpeculativeEngine(target, ModelDrafter(small))
    with pytest.raises(ValueError, match="input_ids"):
        engine.generate(torch.zeros((1, 0), dtype=torch.long))


def test_drafter_on_another_device(llama_pair):
    target, _ = llama_pair
    other = tiny_llama(seed=4, layers=1, hidden=32).to("meta")
    with pytest.raises(ValueError, match="device"):
        SpeculativeEngine(target, ModelDrafter(other))


@pytest.fixture(scope="module")
def shapes_speculator():
    from mmspec import VLMSpeculator, zoo

    m = zoo.load("shapes-vlm")
    return VLMSpeculator(m.target, m.processor, drafter=m.drafter_vlm)


@pytest.mark.parametrize("image", [np.zeros((96, 96, 3), dtype=np.uint8), "scene.png", None], ids=["ndarray", "str", "None"])
def test_vlm_wrong_image_type(shapes_speculator, image):
    with pytest.raises(TypeError, match=r"image: expected a PIL\.Image\.Image"):
        shapes_speculator.generate(image, "caption :")


@pytest.mark.parametrize("prompt,exc", [("", ValueError), ("   ", ValueError), ([], ValueError), (7, TypeError)])
def test_vlm_bad_prompt(shapes_speculator, prompt, exc):
    with pytest.raises(exc, match="prompt"):
        shapes_speculator.generate(Image.new("RGB", (96, 96)), prompt)


def test_vlm_image_prompt_count_mismatch(shapes_speculator):
    images = [Image.new("RGB", (96, 96))] * 2
    with pytest.raises(ValueError, match="one image per prompt"):
        shapes_speculator.generate(images, ["caption :"] * 3)


def test_vlm_drafter_of_wrong_kind(shapes_speculator):
    from mmspec import VLMSpeculator

    with pytest.raises(TypeError, match="drafter"):
        VLMSpeculator(shapes_speculator.target, shapes_speculator.processor, drafter="small")
