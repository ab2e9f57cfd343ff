"""EAGLE-style feature-injection drafting: the target runner's recorded features, greedy identity with plain decoding
(Llama, LLaVA with left padding, Qwen2-VL image and video; chains, static and dynamic trees), the distillation
utilities (loss goes down, acceptance goes up), save/load, and errors."""

from __future__ import annotations

import random

import pytest
import torch
from tests.conftest import IMAGE_ID, llava_inputs, qwen2vl_inputs, tiny_llama

from mmspec import SpecConfig, SpeculativeEngine
from mmspec.training.distill import distill_eagle_head, eagle_loss, feature_regression, kl_to_teacher
from mmspec.drafters.eagle import EagleDrafter
from mmspec.drafting.eagle_head import EagleHead
from mmspec.runner import ModelRunner

NEW = 14
SHAPES = [dict(num_draft_tokens=1), dict(num_draft_tokens=4), dict(tree=(2, 2, 1)),
          dict(tree=(3, 3, 2), eagle_tree="dynamic")]  # fmt: skip


def _head(target, seed=0):
    torch.manual_seed(seed)
    return EagleHead.for_target(target).eval()


def _drafter(target, head, cfg):
    cfg = dict(cfg)
    mode = cfg.pop("eagle_tree", "static")
    return EagleDrafter(target, head, tree_mode=mode, threshold=0.02), cfg


def _check(target, head, ids, mask, kw, cfg, placeholder_ids=(IMAGE_ID,)):
    drafter, cfg = _drafter(target, head, cfg)
    ref = target.generate(input_ids=ids, attention_mask=mask, **kw, do_sample=False, max_new_tokens=NEW)
    engine = SpeculativeEngine(target, drafter, SpecConfig(max_new_tokens=NEW, eos_token_id=2, **cfg),
                               placeholder_ids=placeholder_ids)  # fmt: skip
    out = engine.generate(ids, mask, **kw)
    assert torch.equal(out.sequences, ref), f"\nspec {out.sequences[:, ids.shape[1]:]}\nref  {ref[:, ids.shape[1]:]}"
    return out


def test_runner_features_are_what_the_lm_head_reads(llava_trio):
    target = llava_trio[0]
    ids, mask, kw = llava_inputs(batch=2, pad_rows=(1,))
    runner = ModelRunner(target, keep_features=True)
    logits = runner.prefill(ids, mask, **kw)
    assert runner.features.shape[:2] == ids.shape and runner.prompt_embeds.shape[:2] == ids.shape
    assert torch.allclose(target.get_output_embeddings()(runner.features[:, -1]), logits, atol=1e-5)
    new = runner.extend(torch.tensor([[5, 6, 7], [8, 9, 10]]))
    runner.commit(2)
    assert runner.features.shape[1] == 2
    assert torch.allclose(target.get_output_embeddings()(runner.features), new[:, :2], atol=1e-5)


@pytest.mark.parametrize("cfg", SHAPES, ids=str)
def test_llama(llama_pair, cfg):
    target = llama_pair[0]
    ids = torch.randint(3, 40, (2, 9), generator=torch.Generator().manual_seed(3))
    _check(target, _head(target), ids, torch.ones_like(ids), {}, cfg)


@pytest.mark.parametrize("cfg", SHAPES, ids=str)
def test_llava_left_padded(llava_trio, cfg):
    target = llava_trio[0]
    ids, mask, kw = llava_inputs(batch=3, pad_rows=(1,))
    _check(target, _head(target), ids, mask, kw, cfg)


@pytest.mark.parametrize("cfg", SHAPES, ids=str)
def test_qwen2vl_image(qwen_pair, cfg):
    target = qwen_pair[0]
    ids, mask, kw = qwen2vl_inputs(batch=2)
    _check(target, _head(target), ids, mask, kw, cfg)


@pytest.mark.parametrize("cfg", [dict(num_draft_tokens=4), dict(tree=(3, 3, 2), eagle_tree="dynamic")], ids=str)
def test_qwen2vl_video(cfg):
    from mmspec.modalities.video import VideoSpeculator
    from tests.helpers.tiny_video import qwen2vl_video, random_clip

    target, processor = qwen2vl_video(seed=0, layers=3)
    drafter, cfg = _drafter(target, _head(target), cfg)
    spec = VideoSpeculator(target, processor, drafter, **cfg)
    clips, prompts = [random_clip(0), random_clip(1)], ["caption :", "question : what moves ? answer :"]
    ref = target.generate(**spec.prepare(clips, prompts), do_sample=False, max_new_tokens=NEW)
    assert torch.equal(spec.generate(clips, prompts, max_new_tokens=NEW).sequences, ref)


def test_dynamic_tree_shape_follows_confidence(llama_pair):
    target = llama_pair[0]
    ids = torch.randint(3, 40, (1, 9), generator=torch.Generator().manual_seed(3))
    sizes = {}
    for tau in (0.5, 0.001):
        engine = SpeculativeEngine(target, EagleDrafter(target, _head(target), "dynamic", threshold=tau, max_nodes=20),
                                   SpecConfig(max_new_tokens=NEW, eos_token_id=2, tree=(4, 4, 4)))  # fmt: skip
        sizes[tau] = sum(r.draft_len for r in engine.generate(ids).stats.rounds) / len(engine.generate(ids).stats.rounds)
    assert sizes[0.001] > sizes[0.5]  # a lower confidence bar grows wider, deeper trees


def test_distillation_losses():
    p = torch.tensor([[2.0, 0.0, -1.0]])
    assert kl_to_teacher(p, p).item() == pytest.approx(0.0, abs=1e-7)
    assert kl_to_teacher(torch.zeros(1, 3), p).item() > 0.1
    mask = torch.tensor([[1, 0]])
    a, b = torch.zeros(1, 2, 4), torch.ones(1, 2, 4)
    b[0, 1] = 100.0  # masked out
    assert feature_regression(a, b, mask).item() == pytest.approx(0.5)
    with pytest.raises(ValueError, match="student_logits: expected the teacher's shape"):
        kl_to_teacher(torch.zeros(1, 4), p)


def test_eagle_distillation_smoke_lowers_loss_and_raises_acceptance():
    """A few distillation steps on the target's own generations: the loss drops and the head drafts better there."""
    target = tiny_llama(seed=0, layers=2)
    prompts = torch.randint(3, 40, (16, 6), generator=torch.Generator().manual_seed(0))
    data = target.generate(prompts, attention_mask=torch.ones_like(prompts), do_sample=False, max_new_tokens=12,
                           min_new_tokens=12)  # [16, 18] the target's own outputs  # fmt: skip

    def batches(rng: random.Random):
        rows = rng.sample(range(16), 8)
        return {"input_ids": data[rows], "attention_mask": torch.ones_like(data[rows])}

    head = _head(target, seed=1)
    probe = {"input_ids": data, "attention_mask": torch.ones_like(data)}
    before, acc_before = eagle_loss(head, target, probe).item(), _mean_accepted(target, head, prompts)
    losses = distill_eagle_head(head, target, batches, steps=60, lr=3e-3, seed=0, noise=0.0)
    after, acc_after = eagle_loss(head, target, probe).item(), _mean_accepted(target, head, prompts)
    assert after < 0.7 * before, (before, after, losses[::10])
    assert acc_after > acc_before + 0.3, (acc_before, acc_after)


def _mean_accepted(target, head, prompts):
    """Mean accepted drafts per row and round (batch rows commit in lock-step, so per-row counts are the signal)."""
    engine = SpeculativeEngine(target, EagleDrafter(target, head), SpecConfig(max_new_tokens=12, num_draft_tokens=4))
    rounds = engine.generate(prompts).stats.rounds
    return sum(sum(r.accepted) for r in rounds) / sum(len(r.accepted) for r in rounds)


def test_save_and_load_roundtrip(tmp_path, llama_pair):
    target = llama_pair[0]
    head = _head(target)
    head.save_pretrained(tmp_path / "eagle")
    assert (tmp_path / "eagle" / "model.safetensors").exists() and (tmp_path / "eagle" / "config.json").exists()
    back = EagleHead.from_pretrained(tmp_path / "eagle").eval()
    x, f = torch.randn(2, 5, 64), torch.randn(2, 5, 64)
    assert torch.equal(head(x, f), back(x, f))


def test_errors(llama_pair, llava_trio):
    target = llama_pair[0]
    with pytest.raises(ValueError, match="tree_mode: expected 'static' or 'dynamic'"):
        EagleDrafter(target, _head(target), tree_mode="wide")
    with pytest.raises(ValueError, match="head: expected an EagleHead of hidden size 64"):
        EagleDrafter(target, EagleHead(32, 4, 64))
    with pytest.raises(ValueError, match="built for a different target"):
        SpeculativeEngine(llava_trio[0], EagleDrafter(target, _head(target)))
