"""The learned query adaptor (Q-Former-style compressor): contract, greedy identity as a drafter's compressor
(LLaVA image, Qwen2-VL video), on the drafter's own visual tokens and on the target's (read off the target's
prefill: the drafter then runs no vision tower), joint distillation with its drafter (smoke), save/load."""

from __future__ import annotations

import pytest
import torch
from tests.conftest import IMAGE_ID, llava_inputs

from mmspec import SpecConfig, SpeculativeEngine
from mmspec.drafters import CompressedVLMDrafter
from mmspec.drafters.base import DraftRequest
from mmspec.runner import ModelRunner
from mmspec.training.distill import compressed_forward, distill_compressed_drafter
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


def _count_calls(module):
    calls = []
    return calls, module.register_forward_hook(lambda *_: calls.append(1))


@pytest.mark.parametrize("source", ["target-features", "target-embeds"])
def test_target_source_greedy_identity_llava_and_no_drafter_vision(llava_trio, source):
    target, small, _ = llava_trio
    ids, mask, kw = llava_inputs(batch=3, pad_rows=(1,))  # a left-padded row: the target's view must stay aligned
    torch.manual_seed(0)
    adaptor = QueryAdaptor(small.config.text_config.hidden_size, 2, input_size=target.config.text_config.hidden_size,
                           source=source).eval()  # fmt: skip
    drafter = CompressedVLMDrafter(small, adaptor, budget=2)
    assert drafter.source == source and drafter.needs_target_features  # taken from the adaptor
    ref = target.generate(input_ids=ids, attention_mask=mask, **kw, do_sample=False, max_new_tokens=12)
    calls, handle = _count_calls(small.model.vision_tower)
    try:
        for shape in (dict(num_draft_tokens=4), dict(tree=(2, 1))):
            engine = SpeculativeEngine(target, drafter, SpecConfig(max_new_tokens=12, eos_token_id=2, **shape),
                                       placeholder_ids=(IMAGE_ID,))  # fmt: skip
            assert torch.equal(engine.generate(ids, mask, **kw).sequences, ref)
    finally:
        handle.remove()
    assert calls == []  # the drafter never ran its own vision tower


def test_target_source_session_reads_the_target_view(llava_trio):
    """The drafter's prefill is T - N + M tokens long and its visual slots are the adaptor's reading of the target's
    hidden states: changing those states changes the drafter's logits, changing its own pixels does not."""
    target, small, _ = llava_trio
    ids, mask, kw = llava_inputs(batch=2)
    torch.manual_seed(0)
    adaptor = QueryAdaptor(small.config.text_config.hidden_size, 2, input_size=target.config.text_config.hidden_size,
                           source="target-features").eval()  # fmt: skip
    drafter = CompressedVLMDrafter(small, adaptor, budget=2)
    runner = ModelRunner(target, keep_features=True)
    with torch.no_grad():
        runner.prefill(ids, mask, **kw)

        def logits(model_kwargs, features=None):
            if features is not None:
                runner.features = features
            request = DraftRequest(input_ids=ids, attention_mask=mask, model_kwargs=model_kwargs,
                                   placeholder_ids=(IMAGE_ID,), vocab_size=64, target_runner=runner)  # fmt: skip
            session = drafter.start(request)
            assert session.runner.length == ids.shape[1] - 4 + 2
            return session.runner.extend(torch.tensor([[5], [7]]))

        base = logits(kw)
        noisy = {**kw, "pixel_values": torch.randn_like(kw["pixel_values"])}
        assert torch.equal(logits(noisy), base)
        assert not torch.allclose(logits(kw, runner.features + torch.randn_like(runner.features)), base)


def test_target_source_greedy_identity_qwen2vl_video():
    from mmspec.modalities.video import VideoSpeculator
    from tests.helpers.tiny_video import qwen2vl_video, random_clip

    target, processor = qwen2vl_video(seed=0, layers=3)
    small, _ = qwen2vl_video(seed=1, layers=1, hidden=32)
    torch.manual_seed(0)
    adaptor = QueryAdaptor(32, 8, input_size=64, source="target-features").eval()
    spec = VideoSpeculator(target, processor, CompressedVLMDrafter(small, adaptor, budget=8))
    clips, prompts = [random_clip(0), random_clip(1)], ["caption :", "question : what moves ? answer :"]
    ref = target.generate(**spec.prepare(clips, prompts), do_sample=False, max_new_tokens=12)
    calls, handle = _count_calls(small.model.visual)
    try:
        assert torch.equal(spec.generate(clips, prompts, max_new_tokens=12).sequences, ref)
    finally:
        handle.remove()
    assert calls == []


def test_source_errors_name_the_argument(llava_trio):
    _, small, _ = llava_trio
    with pytest.raises(ValueError, match="source: expected 'drafter' or one of .*target-features.*got 'pixels'"):
        CompressedVLMDrafter(small, "grid-pool", 2, source="pixels")
    with pytest.raises(ValueError, match="source: 'target-features' reads the target's visual tokens.*grid-pool"):
        CompressedVLMDrafter(small, "grid-pool", 2, source="target-features")
    with pytest.raises(ValueError, match="source: expected 'drafter' or one of"):
        distill_compressed_drafter(small, QueryAdaptor(32, 2), small, lambda rng: {}, steps=1, lr=1e-3, seed=0,
                                   placeholder_ids=(IMAGE_ID,), source="pixels")  # fmt: skip


def test_joint_distillation_on_target_features_lowers_the_loss(llava_trio):
    target, small, _ = llava_trio
    small = type(small)(small.config)
    torch.manual_seed(0)
    adaptor = QueryAdaptor(small.config.text_config.hidden_size, 2, input_size=target.config.text_config.hidden_size,
                           source="target-features")  # fmt: skip
    ids, mask, kw = llava_inputs(batch=8, seed=5)
    labels = ids.clone()
    labels[:, :6] = -100
    batch = {"input_ids": ids, "attention_mask": mask, "labels": labels, **kw}
    calls, handle = _count_calls(small.model.vision_tower)
    try:
        losses = distill_compressed_drafter(small, adaptor, target, lambda rng: batch, steps=25, lr=3e-3, seed=0,
                                            placeholder_ids=(IMAGE_ID,), source="target-features")  # fmt: skip
    finally:
        handle.remove()
    assert calls == []  # trained as it runs: on the target's view, without the drafter's vision tower
    assert sum(losses[-5:]) / 5 < 0.8 * sum(losses[:5]) / 5, losses[::5]


def test_full_view_weight_trains_one_drafter_for_both_views(llava_trio):
    """With ``full_view_weight`` the drafter also learns on its own full view (the shapes-video recipe ships one
    drafter for both views this way): its vision tower, which the target-source view never runs, gets trained too;
    without it the tower stays as it was."""
    target, small, _ = llava_trio
    ids, mask, kw = llava_inputs(batch=8, seed=5)
    labels = ids.clone()
    labels[:, :6] = -100
    batch = {"input_ids": ids, "attention_mask": mask, "labels": labels, **kw}
    moved = {}
    for weight in (0.0, 1.0):
        drafter = type(small)(small.config)
        tower = [p.detach().clone() for p in drafter.model.vision_tower.parameters()]
        torch.manual_seed(0)
        adaptor = QueryAdaptor(small.config.text_config.hidden_size, 2,
                               input_size=target.config.text_config.hidden_size, source="target-features")  # fmt: skip
        distill_compressed_drafter(drafter, adaptor, target, lambda rng: batch, steps=3, lr=3e-3, seed=0,
                                   placeholder_ids=(IMAGE_ID,), source="target-features", full_view_weight=weight)  # fmt: skip
        moved[weight] = any(not torch.equal(a, b) for a, b in zip(tower, drafter.model.vision_tower.parameters()))
    assert moved == {0.0: False, 1.0: True}
    with pytest.raises(ValueError, match="full_view_weight: expected >= 0, and 0 unless train_drafter"):
        distill_compressed_drafter(small, adaptor, target, lambda rng: batch, steps=1, lr=1e-3, seed=0,
                                   placeholder_ids=(IMAGE_ID,), train_drafter=False, full_view_weight=1.0)  # fmt: skip


def test_save_and_load_keeps_input_size_and_source(tmp_path):
    torch.manual_seed(0)
    adaptor = QueryAdaptor(16, 4, input_size=24, source="target-features").eval()
    adaptor.save_pretrained(tmp_path / "adaptor")
    back = QueryAdaptor.from_pretrained(tmp_path / "adaptor").eval()
    assert (back.input_size, back.source) == (24, "target-features")
    x = torch.randn(1, 9, 24)
    assert back(x).shape == (1, 4, 16) and torch.equal(adaptor(x), back(x))
