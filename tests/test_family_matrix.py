"""The support matrix: every decoder family the engine claims x every drafter x every mode, token-identical to the
family's own greedy ``generate``.

Families: tiny seeded models (tests/helpers/families.py) of Llama, Qwen2 (also with sliding-window layers), Qwen3,
Mistral (sliding window), Gemma 2 / 3 (hybrid sliding + full), Phi-3, and the VLMs LLaVA, LLaVA-NeXT, LLaVA-OneVision,
Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Idefics3, PaliGemma and Gemma 3 through :class:`VLMSpeculator` and their real
processors. Drafters: a smaller model of the same family, a text-only LM (VLMs), a noisy copy of the target (accepted
often, so partial accepts, later tree branches and per-row holes all occur), early exit (own cache, and sharing the
target's KV), prompt-lookup n-grams, an EAGLE head. Modes, all on a left-padded batch of 2 with an EOS that ends one
row mid-batch: chains, trees, per-row commits; plus 200 new tokens with per-row commits. Local families (sliding or
chunked windows of 8) run far past their window in every mode.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image
from tests.helpers.families import TEXT_FAMILIES, VLM_FAMILIES, noisy_copy

from mmspec import EarlyExitDrafter, ModelDrafter, NgramDrafter, SpecConfig, SpeculativeEngine, VLMSpeculator
from mmspec.drafters.eagle import EagleDrafter
from mmspec.drafting.eagle_head import EagleHead

NEW, LONG = 24, 200
MODES = {  # SpecConfig fields per mode
    "chain": dict(num_draft_tokens=3),
    "tree": dict(tree=(2, 2, 1)),
    "per-row": dict(num_draft_tokens=3, rows="independent"),
    "long": dict(num_draft_tokens=4, rows="independent"),
}
# what each drafter supports: trees and per-row commits
DRAFTERS = {
    "small": {"tree", "per-row"},
    "noisy-copy": {"tree", "per-row"},  # agrees often: partial accepts, later tree branches, holes
    "text-only": {"tree", "per-row"},
    "early-exit": {"tree", "per-row"},
    "early-exit-shared": set(),
    "ngram": set(),
    "eagle": {"tree"},
}


def _drafter(name, family, target, cache):
    if name == "small":
        return ModelDrafter(cache.setdefault("small", family.build(seed=1, layers=1)))
    if name == "noisy-copy":
        return ModelDrafter(cache.setdefault("noisy", noisy_copy(target)))
    if name == "text-only":
        return ModelDrafter(cache.setdefault("text", family.text_drafter(seed=2)), text_only=True)
    if name == "early-exit":
        return EarlyExitDrafter(target, 1)
    if name == "early-exit-shared":
        return EarlyExitDrafter(target, 1, share_kv=True)
    if name == "ngram":
        return NgramDrafter()
    torch.manual_seed(3)
    return EagleDrafter(target, EagleHead.for_target(target).to(torch.float64).eval())


def _pick_eos(new: torch.Tensor, pad: int) -> int | None:
    """A token that ends one row early (first seen there at step 3..10) and never appears in the other row: one row
    stops mid-batch while the other runs on. None when the outputs offer none."""
    for early, other in ((0, 1), (1, 0)):
        row, rest = new[early].tolist(), set(new[other].tolist())
        for i in range(3, min(11, len(row))):
            if row[i] != pad and row[i] not in row[:i] and row[i] not in rest:
                return row[i]
    return None


class Case:
    """One family: target, inputs (a left-padded batch of 2), the plain-greedy references, and the engine call."""

    def __init__(self, name: str):
        self.vlm = name in VLM_FAMILIES
        self.family = VLM_FAMILIES[name] if self.vlm else TEXT_FAMILIES[name]
        self.target = self.family.build(seed=0, layers=3)
        self.models: dict = {}
        if self.vlm:
            processor = self.family.processor()
            self.spec = VLMSpeculator(self.target, processor, drafter=NgramDrafter())
            rng = np.random.default_rng(0)
            images = [Image.fromarray(rng.integers(0, 256, (40, 48, 3), dtype=np.uint8)) for _ in range(2)]
            self.enc = self.spec.prepare(images, ["caption :", "what is on the image ?"])
            self.pad = processor.tokenizer.pad_token_id
        else:
            g = torch.Generator().manual_seed(1)
            ids = torch.randint(3, 60, (2, 9), generator=g)
            ids[:, 0] = 1
            mask = torch.ones_like(ids)
            ids[1, :3], mask[1, :3] = 0, 0  # row 1 left-padded
            self.enc, self.pad = {"input_ids": ids, "attention_mask": mask}, 0
        self.enc = {k: (v.to(torch.float64) if isinstance(v, torch.Tensor) and v.is_floating_point() else v)
                    for k, v in self.enc.items()}  # pixels in the model's dtype  # fmt: skip
        ref = self.reference(NEW, 2)
        eos = _pick_eos(ref[:, self.enc["input_ids"].shape[1] :], self.pad)
        self.eos = 2 if eos is None else eos  # else the config's EOS
        self.refs = {NEW: self.reference(NEW, self.eos), LONG: None}

    def reference(self, new: int, eos):
        return self.target.generate(**self.enc, do_sample=False, max_new_tokens=new, eos_token_id=eos,
                                    pad_token_id=self.pad)  # fmt: skip

    def run(self, drafter, new: int, eos, **cfg):
        if self.vlm:
            return self.spec._decode(dict(self.enc), new, None, dict(eos_token_id=eos, **cfg), drafter).sequences
        config = SpecConfig(max_new_tokens=new, eos_token_id=eos, **cfg)
        engine = SpeculativeEngine(self.target, drafter, config, pad_token_id=self.pad)
        return engine.generate(self.enc["input_ids"], self.enc["attention_mask"]).sequences


_CASES: dict[str, Case] = {}


def case(name: str) -> Case:
    if name not in _CASES:
        _CASES.clear()  # one family's models at a time
        _CASES[name] = Case(name)
    return _CASES[name]


def _cells():
    for family in [*TEXT_FAMILIES, *VLM_FAMILIES]:
        for drafter, supports in DRAFTERS.items():
            if drafter == "text-only" and family not in VLM_FAMILIES:
                continue
            for mode in MODES:
                needs = {"tree": "tree", "per-row": "per-row", "long": "per-row"}.get(mode)
                if needs is None or needs in supports:
                    yield family, drafter, mode


@pytest.mark.parametrize("family,drafter,mode", list(_cells()))
def test_identical_to_generate(family, drafter, mode):
    c = case(family)
    new = LONG if mode == "long" else NEW
    eos = c.eos
    if c.refs.get(new) is None:
        c.refs[new] = c.reference(new, eos)
    ref = c.refs[new]
    out = c.run(_drafter(drafter, c.family, c.target, c.models), new, eos, **MODES[mode])
    prompt = c.enc["input_ids"].shape[1]
    assert torch.equal(out, ref), f"\nspec {out[:, prompt:].tolist()}\nref  {ref[:, prompt:].tolist()}"
