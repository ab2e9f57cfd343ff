"""STD sparse-to-dense self-drafting: greedy identity with plain decoding (LLaVA, Qwen2-VL image and video,
LLaVA-OneVision video, batches with left padding, chains and trees), exactness of the sparse view, and errors."""

from __future__ import annotations

import pytest
import torch
from tests.conftest import IMAGE_ID, llava_inputs, qwen2vl_inputs
from tests.helpers.tiny_video import onevision_video, qwen2vl_video, random_clip

from mmspec import SpecConfig, SpeculativeEngine, STDDrafter
from mmspec.drafting.kv_sharing import sparse_kv_index
from mmspec.modalities.video import VideoSpeculator

NEW = 14


def _engine_check(target, drafter, ids, mask, kw, **cfg):
    ref = target.generate(input_ids=ids, attention_mask=mask, **kw, do_sample=False, max_new_tokens=NEW)
    engine = SpeculativeEngine(target, drafter, SpecConfig(max_new_tokens=NEW, eos_token_id=2, **cfg),
                               placeholder_ids=(IMAGE_ID,))  # fmt: skip
    out = engine.generate(ids, mask, **kw)
    assert torch.equal(out.sequences, ref), f"\nspec {out.sequences[:, ids.shape[1]:]}\nref  {ref[:, ids.shape[1]:]}"
    return out


SHAPES = [dict(num_draft_tokens=1), dict(num_draft_tokens=4), dict(tree=(2, 2, 1))]


@pytest.mark.parametrize("keep", [1, 2, 4])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_llava_left_padded(llava_trio, keep, shape):
    target = llava_trio[0]
    ids, mask, kw = llava_inputs(batch=3, pad_rows=(1,))  # 4 image tokens per row
    _engine_check(target, STDDrafter(target, keep=keep), ids, mask, kw, **shape)


@pytest.mark.parametrize("keep", [2, 6])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_qwen2vl_image_mrope(qwen_pair, keep, shape):
    target = qwen_pair[0]
    ids, mask, kw = qwen2vl_inputs(batch=2)  # 6 image tokens per row
    _engine_check(target, STDDrafter(target, keep=keep), ids, mask, kw, **shape)


def test_keeping_every_visual_entry_drafts_exactly_the_target(qwen_pair, llava_trio):
    """keep = N: the sparse view is the whole cache (reordered), so the draft IS the target: every draft accepted."""
    for target, (ids, mask, kw), n in [(qwen_pair[0], qwen2vl_inputs(batch=2), 6),
                                       (llava_trio[0], llava_inputs(batch=3, pad_rows=(1,)), 4)]:  # fmt: skip
        out = _engine_check(target, STDDrafter(target, keep=n), ids, mask, kw, num_draft_tokens=4)
        assert all(r.committed == r.draft_len + 1 for r in out.stats.rounds[:-1]), [r.accepted for r in out.stats.rounds]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_qwen2vl_video(shape):
    target, processor = qwen2vl_video(seed=0, layers=3)
    spec = VideoSpeculator(target, processor, STDDrafter(target, keep=8), **shape)
    clips, prompts = [random_clip(0), random_clip(1)], ["caption :", "question : what moves ? answer :"]
    ref = target.generate(**spec.prepare(clips, prompts), do_sample=False, max_new_tokens=NEW)
    out = spec.generate(clips, prompts, max_new_tokens=NEW)
    assert torch.equal(out.sequences, ref)


def test_onevision_video():
    target, processor = onevision_video(seed=0, layers=3)
    spec = VideoSpeculator(target, processor, STDDrafter(target, keep=4), num_draft_tokens=3)
    clips = [random_clip(0, frames=4, size=32), random_clip(1, frames=4, size=32)]
    prompts = ["caption :", "question : what moves ? answer :"]
    ref = target.generate(**spec.prepare(clips, prompts), do_sample=False, max_new_tokens=NEW)
    assert torch.equal(spec.generate(clips, prompts, max_new_tokens=NEW).sequences, ref)


def test_sparse_index_keeps_text_then_top_visual():
    visual = torch.tensor([[False, True, True, True, False, False], [False, False, True, True, True, False]])
    scores = torch.tensor([[[0.1, 0.9, 0.5], [0.7, 0.2, 0.8]], [[0.3, 0.2, 0.1], [0.0, 0.1, 0.2]]])  # [L=2, B=2, N=3]
    idx = sparse_kv_index(visual, scores, keep=2)
    assert idx[0].tolist() == [[0, 4, 5, 2, 3], [0, 1, 5, 2, 4]]
    assert idx[1].tolist() == [[0, 4, 5, 1, 2], [0, 1, 5, 3, 4]]
    with pytest.raises(ValueError, match="keep: expected an int in \\[1, 3\\]"):
        sparse_kv_index(visual, scores, keep=4)


def test_std_errors(llava_trio, llama_pair):
    target = llava_trio[0]
    with pytest.raises(ValueError, match="keep: expected an int >= 1"):
        STDDrafter(target, keep=0)
    with pytest.raises(ValueError, match="built for a different target"):
        SpeculativeEngine(llava_trio[1], STDDrafter(target))
    ids = torch.randint(3, 40, (1, 6))  # a prompt with no visual tokens
    with pytest.raises(ValueError, match="same number of visual tokens"):
        SpeculativeEngine(target, STDDrafter(target)).generate(ids)


@pytest.mark.parametrize("shape", [dict(num_draft_tokens=4), dict(tree=(2, 2, 1))], ids=str)
def test_verifier_attention_feedback_greedy_identity(llava_trio, qwen_pair, shape):
    for target, (ids, mask, kw), keep in [(llava_trio[0], llava_inputs(batch=3, pad_rows=(1,)), 2),
                                          (qwen_pair[0], qwen2vl_inputs(batch=2), 3)]:  # fmt: skip
        _engine_check(target, STDDrafter(target, keep=keep, feedback=True), ids, mask, kw, **shape)


def test_feedback_rebuild_is_exact_with_every_visual_entry(qwen_pair):
    """With feedback the sparse view is rebuilt from the target's cache every round; with keep = N the rebuilt view is
    the whole cache, so the draft is the target and every draft is accepted (a rebuild that loses or misplaces the
    committed entries fails this)."""
    target = qwen_pair[0]
    ids, mask, kw = qwen2vl_inputs(batch=2)
    out = _engine_check(target, STDDrafter(target, keep=6, feedback=True), ids, mask, kw, num_draft_tokens=4)
    assert all(r.committed == r.draft_len + 1 for r in out.stats.rounds[:-1])


def test_std_cost_model_rows(qwen_pair, llava_trio):
    from mmspec.bench.video import std_scaling, std_scaling_table

    for target in (qwen_pair[0], llava_trio[0]):  # M-RoPE and 1-D positions
        for batch in (1, 3):
            rows = std_scaling(target, contexts=(16, 32), keep=4, k=2, reps=1, batch=batch)
            assert [r["visual_tokens"] for r in rows] == [16, 32]
            assert all(r["dense_ms"] > 0 and r["sparse_ms"] > 0 and r["break_even_accepted"] > 0 for r in rows)
    assert "| 32 |" in std_scaling_table(rows, keep=4, k=2)
