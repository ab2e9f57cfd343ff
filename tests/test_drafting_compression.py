"""Visual token compression for drafters: each compressor's contract, and greedy output identical to plain decoding
with a compressed small-VLM drafter (only the drafter's view shrinks)."""

from __future__ import annotations

import pytest
import torch

from mmspec import ModelDrafter, SpecConfig, SpeculativeEngine
from mmspec.drafters import CompressedVLMDrafter
from mmspec.drafters.base import DraftRequest
from mmspec.drafting.compression import COMPRESSORS, grid_pool, merge_similar, output_grid, topk_tokens, two_stage_prune
from tests.conftest import IMAGE_ID, llava_inputs, qwen2vl_inputs

g = torch.Generator().manual_seed(0)
TOKENS = torch.randn(3, 16, 8, generator=g)  # [B, N = 4x4 grid, D]
SCORES = torch.rand(3, 16, generator=g)


@pytest.mark.parametrize("name", COMPRESSORS.names())
@pytest.mark.parametrize("budget", [1, 4, 6, 16])
def test_every_compressor_returns_budget_tokens(name, budget):
    if name == "grid-pool" and budget == 6:
        budget = 8  # 6 = 2x3 fits a 4x4 grid too, but keep one clean case per budget
    out = COMPRESSORS.get(name)(TOKENS, budget, scores=SCORES, grid=(4, 4))
    assert out.shape == (3, budget, 8) and out.dtype == TOKENS.dtype
    if budget == 16 and name != "grid-pool":
        assert torch.allclose(out, TOKENS) or name == "merge"


def test_grid_pool_is_patch_averaging():
    out = grid_pool(TOKENS, 4, grid=(4, 4))  # 2x2 output: each token the mean of a 2x2 block
    block = TOKENS.view(3, 2, 2, 2, 2, 8).mean(dim=(2, 4)).reshape(3, 4, 8)
    assert torch.allclose(out, block, atol=1e-6)
    assert output_grid((4, 4), 8) in ((2, 4), (4, 2)) and output_grid((3, 3), 3) in ((1, 3), (3, 1))
    with pytest.raises(ValueError, match="budget"):
        grid_pool(TOKENS, 7, grid=(4, 4))  # 7 cannot tile a 4x4 grid


def test_top_k_keeps_the_best_tokens_in_spatial_order():
    out = topk_tokens(TOKENS, 5, scores=SCORES)
    keep = SCORES.topk(5, -1).indices.sort(-1).values
    assert torch.equal(out, TOKENS.gather(1, keep[..., None].expand(-1, -1, 8)))
    with pytest.raises(ValueError, match="scores"):
        topk_tokens(TOKENS, 5)


def test_two_stage_keeps_the_attention_mass_then_fills_uniformly():
    scores = torch.full((1, 16), 0.01)
    scores[0, [3, 9, 12]] = torch.tensor([1.0, 0.9, 0.8])  # normalised 0.35, 0.32, 0.28: tokens 3 and 9 reach 40%
    out = two_stage_prune(TOKENS[:1], 6, scores=scores)
    rows = [int((TOKENS[0] == t).all(-1).nonzero()) for t in out[0]]
    assert 3 in rows and 9 in rows and len(set(rows)) == 6 and rows == sorted(rows)
    others = [r for r in rows if r not in (3, 9)]
    assert max(others) - min(others) >= 8  # the fill is spread over the grid, not clustered


def test_merge_combines_similar_tokens():
    base = torch.randn(1, 4, 8, generator=g)
    tokens = base.repeat_interleave(4, dim=1) + 1e-4 * torch.randn(1, 16, 8, generator=g)  # 4 groups of 4 near-copies
    out = merge_similar(tokens, 4)
    dist = torch.cdist(out[0], base[0])  # each merged token sits on one group's centre
    assert bool((dist.min(-1).values < 1e-3).all()) and sorted(dist.argmin(-1).tolist()) == [0, 1, 2, 3]


@pytest.mark.parametrize("compressor,budget", [("grid-pool", 1), ("grid-pool", 2), ("top-k", 2), ("merge", 3), ("two-stage", 2)])
@pytest.mark.parametrize("shape", [dict(num_draft_tokens=4), dict(tree=(2, 1))], ids=str)
def test_greedy_identical_with_compressed_drafter(llava_trio, compressor, budget, shape):
    target, small_vlm, _ = llava_trio
    ids, mask, kw = llava_inputs(batch=3, pad_rows=(1,))  # 4 visual tokens per image (2x2)
    ref = target.generate(input_ids=ids, attention_mask=mask, **kw, do_sample=False, max_new_tokens=12)
    drafter = CompressedVLMDrafter(small_vlm, compressor=compressor, budget=budget, grid=(2, 2))
    engine = SpeculativeEngine(target, drafter, SpecConfig(max_new_tokens=12, eos_token_id=2, **shape), placeholder_ids=(IMAGE_ID,))
    assert torch.equal(engine.generate(ids, mask, **kw).sequences, ref)


def test_compressed_drafter_prefill_is_shorter(llava_trio):
    _, small_vlm, _ = llava_trio
    ids, mask, kw = llava_inputs(batch=2)
    request = DraftRequest(input_ids=ids, attention_mask=mask, model_kwargs=kw, placeholder_ids=(IMAGE_ID,), vocab_size=48)
    session = CompressedVLMDrafter(small_vlm, "grid-pool", 1, grid=(2, 2)).start(request)
    assert session.runner.length == ids.shape[1] - 4 + 1  # N = 4 visual tokens became 1


def test_carry_follows_the_tokens():
    """carried features (e.g. positions) are selected / pooled / merged exactly like their tokens."""
    pos = torch.arange(16.0).view(1, 16, 1).expand(3, 16, 1)  # [B, N, 1] the token's index
    for name in COMPRESSORS.names():
        out, carried = COMPRESSORS.get(name)(TOKENS, 4, scores=SCORES, grid=(4, 4), carry=pos)
        assert carried.shape == (3, 4, 1)
        if name in ("top-k", "two-stage"):  # selections: the carried index names the kept token
            assert torch.equal(out, TOKENS.gather(1, carried.long().expand(-1, -1, TOKENS.shape[-1])))
    _, carried = grid_pool(TOKENS, 4, grid=(4, 4), carry=pos)
    assert carried[0, :, 0].tolist() == [2.5, 4.5, 10.5, 12.5]  # means of the 2x2 blocks' indices


def test_grid_pool_over_time_keeps_temporal_slots():
    video = torch.randn(2, 4 * 2 * 2, 8, generator=g)  # grid (t=4, h=2, w=2)
    out = grid_pool(video, 4, grid=(4, 2, 2))  # one token per temporal slot: the frame mean
    assert torch.allclose(out, video.view(2, 4, 4, 8).mean(2), atol=1e-6)
    assert grid_pool(video, 8, grid=(4, 2, 2)).shape == (2, 8, 8)
    with pytest.raises(ValueError, match="grid: expected"):
        grid_pool(video, 4, grid=(3, 2, 2))


@pytest.mark.parametrize("compressor,budget", [("grid-pool", 4), ("top-k", 3), ("merge", 2), ("two-stage", 4)])
def test_mrope_compressed_drafter_greedy_identical(qwen_pair, compressor, budget):
    target, small = qwen_pair
    # seed 4: tiny random models have near-ties (top-2 gap ~1e-3) on some inputs, where float reordering between HF's
    # one-token decode and a multi-token verify flips the argmax; this input has none
    ids, mask, kw = qwen2vl_inputs(batch=2, seed=4, grid=(1, 4, 8))  # 8 image tokens (2x4 after the merge)
    ref = target.generate(input_ids=ids, attention_mask=mask, **kw, do_sample=False, max_new_tokens=12)
    engine = SpeculativeEngine(target, CompressedVLMDrafter(small, compressor, budget),
                               SpecConfig(max_new_tokens=12, eos_token_id=2, num_draft_tokens=4), placeholder_ids=(IMAGE_ID,))  # fmt: skip
    assert torch.equal(engine.generate(ids, mask, **kw).sequences, ref)


@pytest.mark.parametrize("compressor", ["grid-pool", "top-k"])
def test_mrope_full_budget_equals_uncompressed_drafter(qwen_pair, compressor):
    """budget = N keeps every token at its own 3-D position: the compressed drafter's next-token logits equal the
    plain drafter's (wrong carried positions fail this)."""
    _, small = qwen_pair
    ids, mask, kw = qwen2vl_inputs(batch=2, seed=4, grid=(1, 4, 8))
    request = DraftRequest(input_ids=ids, attention_mask=mask, model_kwargs=kw, placeholder_ids=(IMAGE_ID,), vocab_size=56)
    pending = torch.tensor([[5, 9], [7, 3]])  # two decode steps after the prompt
    logits = [d.start(request).runner.extend(pending) for d in (ModelDrafter(small), CompressedVLMDrafter(small, compressor, 8))]
    assert torch.allclose(logits[0], logits[1], atol=1e-4)


def test_video_compressed_drafter_greedy_identical():
    from mmspec.modalities.video import VideoSpeculator
    from tests.helpers.tiny_video import qwen2vl_video, random_clip

    target, processor = qwen2vl_video(seed=0, layers=3)
    small, _ = qwen2vl_video(seed=1, layers=1, hidden=32)
    clips, prompts = [random_clip(0), random_clip(1)], ["caption :", "question : what moves ? answer :"]
    for compressor, budget in [("grid-pool", 16), ("two-stage", 8)]:  # 64 video tokens = 4 x 4 x 4
        spec = VideoSpeculator(target, processor, CompressedVLMDrafter(small, compressor, budget))
        ref = target.generate(**spec.prepare(clips, prompts), do_sample=False, max_new_tokens=12)
        out = spec.generate(clips, prompts, max_new_tokens=12)
        assert torch.equal(out.sequences, ref)
