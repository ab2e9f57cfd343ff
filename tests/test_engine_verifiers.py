"""Registered verifiers plug into the engine by name and parameters (SpecConfig.verifier / verifier_params)."""

from __future__ import annotations

import pytest
import torch

from mmspec import ModelDrafter, SpecConfig, SpeculativeEngine
from mmspec.verifiers.codebook import build_neighbour_table
from tests.conftest import VOCAB

NEW = 12


@pytest.mark.parametrize("name,params", [("top-r", {"r": 1}), ("margin", {"margin": 0.0}), ("action-tolerance", {"r": 0}),
                                         ("edit-distance", {"tau": 0})])  # fmt: skip
def test_exact_special_cases_reproduce_greedy_decoding(llama_pair, name, params):
    target, small = llama_pair
    ids = torch.randint(3, 40, (2, 9), generator=torch.Generator().manual_seed(3))
    ref = target.generate(ids, do_sample=False, max_new_tokens=NEW)
    cfg = SpecConfig(num_draft_tokens=3, max_new_tokens=NEW, eos_token_id=2, verifier=name, verifier_params=params)
    assert torch.equal(SpeculativeEngine(target, ModelDrafter(small), cfg).generate(ids).sequences, ref)


@pytest.mark.parametrize("name,params", [
    ("ssd", {"beta": 0.2}), ("top-r", {"r": 3}), ("margin", {"margin": 2.0}), ("action-tolerance", {"r": 2}),
    ("lantern", {"neighbours": build_neighbour_table(torch.randn(VOCAB, 4, generator=torch.Generator().manual_seed(0)), 3),
                 "delta": 0.2}),
    ("gsd", {"ranks": 2}), ("phrase", {"library": [[5, 6], [7, 8, 9]]}), ("edit-distance", {"tau": 1}),
    ("confidence-skip", {"threshold": 0.5}),
])  # fmt: skip
def test_relaxed_rules_run_in_the_engine(llama_pair, name, params):
    target, small = llama_pair
    ids = torch.randint(3, 40, (2, 9), generator=torch.Generator().manual_seed(4))
    cfg = SpecConfig(num_draft_tokens=3, max_new_tokens=NEW, temperature=0.8, seed=0, verifier=name, verifier_params=params)
    out = SpeculativeEngine(target, ModelDrafter(small), cfg).generate(ids)
    assert out.new_tokens.shape == (2, NEW) and bool(((out.new_tokens >= 0) & (out.new_tokens < VOCAB)).all())
    assert out.stats.mean_accepted_tokens >= 1.0


def test_chain_only_verifier_refuses_a_tree(llama_pair):
    target, small = llama_pair
    cfg = SpecConfig(tree=(2, 1), verifier="ssd", temperature=1.0)
    with pytest.raises(ValueError, match="tree"):
        SpeculativeEngine(target, ModelDrafter(small), cfg).generate(torch.tensor([[3, 4, 5]]))
