"""KV rollback keeps cache, mask and positions in step: after any sequence of extends, crops and tree-path
compactions, the logits the runner returns equal a cache-free recompute of the committed sequence (METHODS.md §1)."""

from __future__ import annotations

import pytest
import torch

from mmspec.runner import ModelRunner
from tests.conftest import IMAGE_ID, llava_inputs, qwen2vl_inputs

ATOL = 2e-4


def full_logits(model, ids, mask, kw) -> torch.Tensor:
    """Logits at every position of ``ids [B, T]`` from one cache-free forward -> [B, T, V]."""
    with torch.no_grad():
        if "image_grid_thw" in kw:  # M-RoPE: the model derives its 3-D positions from the full sequence
            types = (ids == IMAGE_ID).int()  # 1 = image token (what the processor returns as mm_token_type_ids)
            return model(input_ids=ids, attention_mask=mask, mm_token_type_ids=types, **kw).logits
        pos = (mask.cumsum(-1) - 1).clamp_min(0)
        return model(input_ids=ids, attention_mask=mask, position_ids=pos, **kw).logits


class Committed:
    """The sequence a runner should hold: prompt + committed tokens, per row."""

    def __init__(self, model, ids, mask, kw):
        self.model, self.ids, self.mask, self.kw = model, ids, mask, kw

    def expect(self, tail: torch.Tensor) -> torch.Tensor:
        """Cache-free logits of ``tail [B, L]`` appended to the committed sequence -> [B, L, V]."""
        ids = torch.cat([self.ids, tail], 1)
        mask = torch.cat([self.mask, torch.ones_like(tail)], 1)
        return full_logits(self.model, ids, mask, self.kw)[:, -tail.shape[1] :]

    def append(self, tokens: torch.Tensor) -> None:
        self.ids = torch.cat([self.ids, tokens], 1)
        self.mask = torch.cat([self.mask, torch.ones_like(tokens)], 1)


def _models(name, llama_pair, llava_trio, qwen_pair):
    if name == "llama":
        ids = torch.randint(3, 40, (2, 7), generator=torch.Generator().manual_seed(0))
        mask = torch.ones_like(ids)
        mask[1, :2] = 0  # a left-padded row
        return llama_pair[0], ids, mask, {}
    if name == "llava":
        ids, mask, kw = llava_inputs(batch=2, pad_rows=(1,))
        return llava_trio[0], ids, mask, kw
    ids, mask, kw = qwen2vl_inputs(batch=2)
    return qwen_pair[0], ids, mask, kw


@pytest.mark.parametrize("name", ["llama", "llava", "qwen2vl"])
def test_chain_rollbacks_match_recompute(name, llama_pair, llava_trio, qwen_pair):
    model, ids, mask, kw = _models(name, llama_pair, llava_trio, qwen_pair)
    g = torch.Generator().manual_seed(1)
    runner = ModelRunner(model)
    ref = Committed(model, ids, mask, kw)
    last = runner.prefill(ids, mask, **kw)
    torch.testing.assert_close(last, full_logits(model, ids, mask, kw)[:, -1, : runner.vocab_size], atol=ATOL, rtol=0)
    for extend, keep in [(4, 2), (3, 0), (1, 1), (5, 5), (2, 1)]:
        tokens = torch.randint(3, 40, (2, extend), generator=g)
        got = runner.extend(tokens)
        torch.testing.assert_close(got, ref.expect(tokens)[..., : runner.vocab_size], atol=ATOL, rtol=0)
        runner.commit(keep)
        ref.append(tokens[:, :keep])
    assert runner.length == ref.ids.shape[1]


@pytest.mark.parametrize("name", ["llama", "llava", "qwen2vl"])
def test_tree_path_compaction_matches_recompute(name, llama_pair, llava_trio, qwen_pair):
    model, ids, mask, kw = _models(name, llama_pair, llava_trio, qwen_pair)
    g = torch.Generator().manual_seed(2)
    runner = ModelRunner(model)
    ref = Committed(model, ids, mask, kw)
    runner.prefill(ids, mask, **kw)
    parents = [-1, -1, 0, 0, 1, 2]  # two roots; node 2, 3 under 0; 4 under 1; 5 under 2
    for path in ([1, 4], [0, 2, 5], [0]):
        tokens = torch.randint(3, 40, (2, len(parents)), generator=g)
        got = runner.extend(tokens, parents)  # [B, N, V]
        for node in range(len(parents)):  # each node sees the committed context and its own ancestors only
            chain, i = [], node
            while i >= 0:
                chain.insert(0, i)
                i = parents[i]
            want = ref.expect(tokens[:, chain])[:, -1]
            torch.testing.assert_close(got[:, node], want[..., : runner.vocab_size], atol=ATOL, rtol=0)
        runner.commit(torch.tensor([path, path]))  # gather the accepted path into contiguous positions
        ref.append(tokens[:, path])
        follow = torch.randint(3, 40, (2, 2), generator=g)  # the next round continues from the compacted cache
        torch.testing.assert_close(runner.extend(follow), ref.expect(follow)[..., : runner.vocab_size], atol=ATOL, rtol=0)
        runner.commit(1)
        ref.append(follow[:, :1])


def test_commit_rejects_non_prefix(llama_pair):
    runner = ModelRunner(llama_pair[0])
    ids = torch.randint(3, 40, (1, 5), generator=torch.Generator().manual_seed(3))
    runner.prefill(ids)
    runner.extend(torch.tensor([[5, 6]]), [-1, -1])  # two siblings: "keep 2" is no chain prefix
    with pytest.raises(ValueError, match="keep"):
        runner.commit(2)


@pytest.mark.parametrize("name", ["llama", "llava"])
def test_early_exit_reuses_target_prefill_kv(name, llama_pair, llava_trio, qwen_pair):
    """An early-exit draft started from the target's prefill KV computes what its own prefill would."""
    from mmspec.drafters.early_exit import EarlyExitRunner

    model, ids, mask, kw = _models(name, llama_pair, llava_trio, qwen_pair)
    target = ModelRunner(model)
    target.prefill(ids, mask, **kw)
    own, shared = EarlyExitRunner(model, target.vocab_size, 2), EarlyExitRunner(model, target.vocab_size, 2)
    own.prefill(ids, mask, **kw)
    shared.prefill_from(target, 2)
    assert shared.forwards == 0 and not any(layer.is_initialized for layer in shared.cache.layers[2:])  # only 2 copied
    tokens = torch.randint(3, 40, (2, 3), generator=torch.Generator().manual_seed(4))
    torch.testing.assert_close(shared.extend(tokens), own.extend(tokens), atol=ATOL, rtol=0)
    target.extend(tokens[:, :1])  # the target's cache is untouched by the draft's extends
    assert target.length == ids.shape[1] + 1


@pytest.mark.parametrize("name", ["llama", "llava", "qwen2vl"])
def test_early_exit_logits_equal_target_when_later_layers_do_nothing(name, llama_pair, llava_trio, qwen_pair):
    """First n layers + head == the target when layers >= n are identities: the draft's positions (M-RoPE too),
    masks and reused KV must then reproduce the target's logits exactly, across rounds and rollbacks."""
    from mmspec.drafters.early_exit import EarlyExitRunner
    from tests.test_engine_greedy import _identity_after

    model, ids, mask, kw = _models(name, llama_pair, llava_trio, qwen_pair)
    model = _identity_after(model, 1)
    target = ModelRunner(model)
    target.prefill(ids, mask, **kw)
    draft = EarlyExitRunner(model, target.vocab_size, 1)
    draft.prefill_from(target, 1)
    g = torch.Generator().manual_seed(5)
    for extend, keep in [(3, 1), (2, 2), (4, 0)]:
        tokens = torch.randint(3, 40, (2, extend), generator=g)
        torch.testing.assert_close(draft.extend(tokens), target.extend(tokens), atol=ATOL, rtol=0)
        draft.commit(keep)
        target.commit(keep)


# ----------------------------------------------------------------------------------------------------------------
# Per-row commits (rows advancing independently, as the Jacobi loop does): holes in the cache, then compaction


@pytest.mark.parametrize("guided", [False, True], ids=["plain", "cfg-doubled-cache"])
def test_per_row_commits_and_hole_compaction_match_recompute(guided):
    from transformers import LlamaConfig, LlamaForCausalLM

    from mmspec.modalities.image_ar import ClassifierFreeGuidance

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=12, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                      num_key_value_heads=2, max_position_embeddings=64, pad_token_id=0)  # fmt: skip
    base = LlamaForCausalLM(cfg).eval()
    null = [11, 11]
    model = ClassifierFreeGuidance(base, null, 2.0) if guided else base

    def direct(seq):  # logits of the last position, no cache (and the guided combination by hand)
        with torch.no_grad():
            c = base(torch.tensor([seq])).logits[0, -1]
            if not guided:
                return c
            u = base(torch.tensor([null + seq[2:]])).logits[0, -1]
            return u + 2.0 * (c - u)

    prompt = torch.tensor([[9, 10], [10, 9], [9, 9]])
    runner = ModelRunner(model, 12)
    runner.prefill(prompt)
    seqs = [r.tolist() for r in prompt]
    block = torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8], [1, 3, 5, 7]])
    for keep, compact in [([1, 3, 0], False), ([4, 0, 2], False), ([2, 2, 1], True)]:
        runner.extend(block)
        runner.commit(torch.tensor(keep), compact=False)
        for r, n in enumerate(keep):
            seqs[r] += block[r, :n].tolist()
        assert runner.next_pos.tolist() == [len(s) for s in seqs]
        if compact:
            runner.compact_holes()
            assert int((runner.mask == 0).sum()) == sum(max(map(len, seqs)) - len(s) for s in seqs)
        probe = torch.tensor([[3], [4], [6]])
        logits = runner.extend(probe)[:, -1]  # [B, V]
        runner.commit(torch.zeros(3, dtype=torch.long), compact=False)  # the probe leaves nothing behind
        for r in range(3):
            torch.testing.assert_close(logits[r], direct(seqs[r] + probe[r].tolist())[:12], atol=1e-4, rtol=1e-4)


def test_per_row_commit_rejects_bad_counts(llama_pair):
    target, _ = llama_pair
    runner = ModelRunner(target)
    runner.prefill(torch.tensor([[1, 2], [3, 4]]))
    runner.extend(torch.tensor([[5, 6], [7, 8]]))
    with pytest.raises(ValueError, match="keep"):
        runner.commit(torch.tensor([3, 0]))


def test_model_draft_session_per_row_accepts_match_recompute():
    """A drafter session whose rows accept different counts each round (holes, carried last drafts) proposes from
    exactly the state a cache-free run on each row's committed sequence gives."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from mmspec.drafters.base import DraftRequest
    from mmspec.drafters.model import ModelDrafter
    from mmspec.sampling import SamplingParams, process_logits
    from mmspec.types import Commit

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=16, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                      num_key_value_heads=2, max_position_embeddings=128, pad_token_id=0)  # fmt: skip
    model = LlamaForCausalLM(cfg).eval()
    sampling = SamplingParams(temperature=1.0)
    prompt = torch.tensor([[3, 4, 5], [6, 7, 8], [9, 10, 11]])
    session = ModelDrafter(model).start(DraftRequest(input_ids=prompt, attention_mask=torch.ones_like(prompt),
                                                     sampling=sampling, vocab_size=16, need_probs=True))  # fmt: skip
    g = torch.Generator().manual_seed(1)
    seqs = [r.tolist() for r in prompt]
    pending = torch.tensor([1, 2, 3])
    for n in ([0, 3, 1], [3, 3, 0], [2, 0, 3], [1, 3, 3]):  # k = 3 drafts per round
        proposal = session.propose(pending, 3, g)
        emitted = torch.cat([proposal.tokens, pending[:, None]], 1).scatter(1, torch.tensor(n)[:, None], -1)  # [B, 4]
        session.accept(Commit(torch.tensor(n), emitted))
        for r in range(3):  # committed: the pending token and the accepted drafts; then a correction / bonus
            seqs[r] += [int(pending[r])] + proposal.tokens[r, : n[r]].tolist()
        pending = torch.randint(16, (3,), generator=g)
    probe = session.propose(pending, 1, g).probs[:, 0]  # [B, V]
    for r in range(3):
        with torch.no_grad():
            ref = process_logits(model(torch.tensor([seqs[r] + [int(pending[r])]])).logits[0, -1, :16], sampling)
        torch.testing.assert_close(probe[r], ref, atol=1e-5, rtol=1e-4)
