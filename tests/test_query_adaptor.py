"""The learned query adaptor (Q-Former-style compressor): contract, greedy identity as a drafter's compressor
(LLaVA image, Qwen2-VL video), joint distillation with its drafter (smoke), save/load."""

from __future__ import annotations

import pytest
import torch
from tests.conftest import IMAGE_ID, llava_inputs

from mmspec import SpecConfig, SpeculativeEngine
from mmspec.drafters import CompressedVLMDrafter
from mmspec.drafting.alignment import compressed_forward, distill_compressed_drafter
from mmspec.drafting.query_adaptor import QueryAdaptor


def test_adaptor_compresses_and_carries_weighted_means():
    torch.manual_seed(0)
    adaptor = QueryAdaptor(hidden_size=16, num_queries=3).eval()
    tokens = torch.randn(2, 10, 16)
    assert adaptor(tokens, 3).shape == (2, 3, 16)
    pos = torch.arange(10.0).view(1, 10, 1).expand(2, 10, 3)
    out, carried = adaptor(tokens, carry=pos)
    assert carried.shape == (2, 3, 3) and bool((carried >= 0).all()) and bool((carried <= 9).all())
    with pytest.raises(ValueError, match="budget: this adaptor has 3 learned queries, got budget=4"):
        adaptor(tokens, 4)
    with pytest.raises(ValueError, match=r"tokens: expected \[B, N, 16\]"):
        adaptor(torch.randn(2, 10, 8))


def test_greedy_identity_llava(llava_trio):
    target, small, _ = llava_trio
    ids, mask, kw = llava_inputs(batch=3, pad_rows=(1,))
    torch.manual_seed(0)
    adaptor = QueryAdaptor(small.config.text_config.hidden_size, 2).eval()
    ref = target.generate(input_ids=ids, attention_mask=mask, **kw, do_sample=False, max_new_tokens=12)
    for shape in (dict(num_draft_tokens=4), dict(tree=(2, 1))):
        engine = SpeculativeEngine(target, CompressedVLMDrafter(small, adaptor, budget=2),
                                   SpecConfig(max_new_tokens=12, eos_token_id=2, **shape), placeholder_ids=(IMAGE_ID,))  # fmt: skip
        assert torch.equal(engine.generate(ids, mask, **kw).sequences, ref)


def test_greedy_identity_qwen2vl_video():
    from mmspec.modalities.video import VideoSpeculator
    from tests.helpers.tiny_video import qwen2vl_video, random_clip

    target, processor = qwen2vl_video(seed=0, layers=3)
    small, _ = qwen2vl_video(seed=1, layers=1, hidden=32)
    torch.manual_seed(0)
    spec = VideoSpeculator(target, processor, CompressedVLMDrafter(small, QueryAdaptor(32, 8).eval(), budget=8))
    clips, prompts = [random_clip(0), random_clip(1)], ["caption :", "question : what moves ? answer :"]
    ref = target.generate(**spec.prepare(clips, prompts), do_sample=False, max_new_tokens=12)
    assert torch.equal(spec.generate(clips, prompts, max_new_tokens=12).sequences, ref)


def test_joint_distillation_smoke_lowers_the_loss(llava_trio):
    target, small, _ = llava_trio
    small = type(small)(small.config)  # a fresh copy: the fixture stays untouched
    torch.manual_seed(0)
    adaptor = QueryAdaptor(small.config.text_config.hidden_size, 2)
    ids, mask, kw = llava_inputs(batch=8, seed=5)
    labels = ids.clone()
    labels[:, :6] = -100  # BOS + 4 image tokens + first text token are prompt
    batch = {"input_ids": ids, "attention_mask": mask, "labels": labels, **kw}
    logits, new_labels = compressed_forward(small, adaptor, batch, (IMAGE_ID,))
    assert logits.shape[1] == ids.shape[1] - 4 + 2 and bool((new_labels[:, 6 - 2 :] == labels[:, 6:]).all())
    losses = distill_compressed_drafter(small, adaptor, target, lambda rng: batch, steps=25, lr=3e-3, seed=0,
                                        placeholder_ids=(IMAGE_ID,))  # fmt: skip
    assert sum(losses[-5:]) / 5 < 0.8 * sum(losses[:5]) / 5, losses[::5]
    assert not adaptor.training and not small.training  # both handed back in eval mode


def test_save_and_load(tmp_path):
    torch.manual_seed(0)
    adaptor = QueryAdaptor(16, 4).eval()
    adaptor.save_pretrained(tmp_path / "adaptor")
    back = QueryAdaptor.from_pretrained(tmp_path / "adaptor").eval()
    x = torch.randn(1, 9, 16)
    assert torch.equal(adaptor(x), back(x))
