"""Bad input raises a clear error naming the argument."""

from __future__ import annotations

import pytest
import torch

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
