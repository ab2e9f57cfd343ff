"""Batches whose rows commit independently (``SpecConfig(rows="independent")``): greedy output identical to plain
decoding for every drafter whose session rolls back per row (model drafters, text-only, compressed, early exit with
its own cache, STD on images and video with left padding), per-row commit counts, sampled exactness, and errors."""

from __future__ import annotations

import pytest
import torch
from tests.conftest import IMAGE_ID, llava_inputs, qwen2vl_inputs
from tests.helpers.tiny_video import qwen2vl_video, random_clip

from mmspec import EarlyExitDrafter, ModelDrafter, NgramDrafter, SpecConfig, SpeculativeEngine, STDDrafter
from mmspec.drafters import CompressedVLMDrafter
from mmspec.modalities.video import VideoSpeculator

NEW = 16


def _check(target, drafter, ids, mask, kw, **cfg):
    ref = target.generate(input_ids=ids, attention_mask=mask, **kw, do_sample=False, max_new_tokens=NEW)
    engine = SpeculativeEngine(target, drafter, SpecConfig(max_new_tokens=NEW, eos_token_id=2, rows="independent",
                                                           **cfg), placeholder_ids=(IMAGE_ID,))  # fmt: skip
    out = engine.generate(ids, mask, **kw)
    assert torch.equal(out.sequences, ref), f"\nspec {out.sequences[:, ids.shape[1]:]}\nref  {ref[:, ids.shape[1]:]}"
    return out


@pytest.mark.parametrize("k", [1, 3, 5])
def test_llama_small_and_early_exit(llama_pair, k):
    target, small = llama_pair
    ids = torch.randint(3, 40, (4, 9), generator=torch.Generator().manual_seed(3))
    for drafter in (ModelDrafter(small), EarlyExitDrafter(target, 1)):
        _check(target, drafter, ids, torch.ones_like(ids), {}, num_draft_tokens=k)


@pytest.mark.parametrize("name", ["small-vlm", "text-only", "grid-pool", "std"])
@pytest.mark.parametrize("k", [2, 4])
def test_llava_left_padded(llava_trio, name, k):
    target, small_vlm, text_lm = llava_trio
    drafters = {"small-vlm": ModelDrafter(small_vlm), "text-only": ModelDrafter(text_lm, text_only=True),
                "grid-pool": CompressedVLMDrafter(small_vlm, "grid-pool", 2, grid=(2, 2)), "std": STDDrafter(target, keep=2)}  # fmt: skip
    ids, mask, kw = llava_inputs(batch=3, pad_rows=(1,))
    _check(target, drafters[name], ids, mask, kw, num_draft_tokens=k)


@pytest.mark.parametrize("name", ["small-vlm", "std"])
def test_qwen2vl_mrope(qwen_pair, name):
    target, small = qwen_pair
    drafter = ModelDrafter(small) if name == "small-vlm" else STDDrafter(target, keep=3)
    # seed 3: tiny random models have near-ties (top-2 gap ~1e-3) on most inputs, where float reordering (the holes
    # change the attention's reduction length) can flip an argmax; this input's smallest gap is 1e-2
    ids, mask, kw = qwen2vl_inputs(batch=3, seed=3)
    _check(target, drafter, ids, mask, kw, num_draft_tokens=4)


@pytest.mark.parametrize("feedback", [False, True])
def test_std_video_batch(feedback):
    target, processor = qwen2vl_video(seed=0, layers=3)
    spec = VideoSpeculator(target, processor, STDDrafter(target, keep=8, feedback=feedback), num_draft_tokens=5,
                           rows="independent")  # fmt: skip
    clips = [random_clip(i) for i in range(3)]
    prompts = ["caption :", "question : what moves ? answer :", "question : what happens first ? answer :"]
    ref = target.generate(**spec.prepare(clips, prompts), do_sample=False, max_new_tokens=24)
    assert torch.equal(spec.generate(clips, prompts, max_new_tokens=24).sequences, ref)


def test_rows_commit_their_own_accepted_drafts(llava_trio):
    """Both modes run the same rounds until rows first accept different lengths; in that round aligned commits
    min(n_b) + 1 on every row, independent n_b + 1 on each (the recorded count is then the rows' mean)."""
    target = llava_trio[0]
    ids, mask, kw = llava_inputs(batch=3, pad_rows=(1,))
    outs = {}
    for rows in ("aligned", "independent"):
        engine = SpeculativeEngine(target, EarlyExitDrafter(target, 2), SpecConfig(max_new_tokens=NEW, num_draft_tokens=4,
                                   rows=rows), placeholder_ids=(IMAGE_ID,))  # fmt: skip
        outs[rows] = engine.generate(ids, mask, **kw)
    aligned, independent = outs["aligned"].stats.rounds, outs["independent"].stats.rounds
    i = next(i for i, r in enumerate(aligned) if len(set(r.accepted)) > 1)  # StopIteration: pick another input
    assert [r.accepted for r in aligned[: i + 1]] == [r.accepted for r in independent[: i + 1]]
    assert aligned[i].committed == min(aligned[i].accepted) + 1
    assert independent[i].committed == pytest.approx(sum(aligned[i].accepted) / 3 + 1)
    assert torch.equal(outs["aligned"].sequences, outs["independent"].sequences)
    assert len(independent) < len(aligned)


def test_max_new_tokens_and_eos_per_row(llama_pair):
    """Rows run past max_new_tokens on their last round and are trimmed; a row that emits EOS stops (padding after)."""
    target, small = llama_pair
    ids = torch.randint(3, 40, (4, 9), generator=torch.Generator().manual_seed(5))
    ref = target.generate(input_ids=ids, do_sample=False, max_new_tokens=NEW)
    eos = int(ref[0, ids.shape[1] + 3])  # row 0's 4th new token: every row stops at its own first occurrence
    for new in (1, 2, 7, NEW):
        engine = SpeculativeEngine(target, ModelDrafter(small), SpecConfig(max_new_tokens=new, num_draft_tokens=5,
                                                                           rows="independent", eos_token_id=eos))  # fmt: skip
        expect = target.generate(input_ids=ids, do_sample=False, max_new_tokens=new, eos_token_id=eos, pad_token_id=0)
        out = engine.generate(ids)
        assert torch.equal(out.sequences, expect), new


def test_errors(llama_pair):
    target, small = llama_pair
    with pytest.raises(ValueError, match="rows: expected one of \\['aligned', 'independent'\\], got 'ragged'"):
        SpecConfig(rows="ragged")
    with pytest.raises(ValueError, match="rows: 'independent' commits token chains"):
        SpecConfig(rows="independent", tree=(2, 1))


def test_every_drafter_commits_per_row(llama_pair):
    """Drafters that used to commit in lock-step only (EAGLE, n-gram, early exit in the target's cache) now roll back
    per row too: identical to plain greedy decoding over long generations."""
    from mmspec.drafters.eagle import EagleDrafter
    from mmspec.drafting.eagle_head import EagleHead

    target, _ = llama_pair
    ids = torch.randint(3, 40, (3, 9), generator=torch.Generator().manual_seed(3))
    ref = target.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=64)
    torch.manual_seed(0)
    eagle = EagleDrafter(target, EagleHead.for_target(target).eval())
    for drafter in (NgramDrafter(), EarlyExitDrafter(target, 1, share_kv=True), eagle):
        cfg = SpecConfig(max_new_tokens=64, num_draft_tokens=4, eos_token_id=2, rows="independent")
        out = SpeculativeEngine(target, drafter, cfg).generate(ids)
        assert torch.equal(out.sequences, ref), drafter.name
