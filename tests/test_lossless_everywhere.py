"""Regression tests for the defects that broke the lossless promise or crashed on supported combinations (each one
failed before its fix): sliding-window caches, per-row early exit on long generations, Gemma 3 (per-layer-type rotary
embeddings, image batches, placeholder ids), PaliGemma's processor labels, models whose cache cannot roll back, and
bad inputs that passed silently. The family x drafter x mode matrix is in test_family_matrix.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image
from tests.conftest import tiny_llama
from tests.helpers.families import TEXT_FAMILIES, VLM_FAMILIES, noisy_copy

from mmspec import EarlyExitDrafter, ModelDrafter, NgramDrafter, SpecConfig, SpeculativeEngine, VLMSpeculator
from mmspec.layout import UnsupportedModelError, attention_layout
from mmspec.runner import ModelRunner


def _mistral(seed, layers, window):
    from transformers import MistralConfig, MistralForCausalLM

    torch.manual_seed(seed)
    cfg = MistralConfig(vocab_size=48, hidden_size=64, intermediate_size=128, num_hidden_layers=layers, num_attention_heads=4,
                        num_key_value_heads=2, max_position_embeddings=4096, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                        sliding_window=window)  # fmt: skip
    model = MistralForCausalLM(cfg).eval().double()
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(4)
    return model


def _prompt(batch=2, length=6, seed=0):
    return torch.randint(3, 40, (batch, length), generator=torch.Generator().manual_seed(seed))


def _greedy_reference(target, ids, new):
    return target.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=new, eos_token_id=2,
                           pad_token_id=0)  # fmt: skip


@pytest.mark.parametrize("mode", [dict(), dict(rows="independent"), dict(tree=(2, 2, 1))], ids=["chain", "per-row", "tree"])
def test_mistral_past_its_sliding_window(mode):
    """Window 8, 40 new tokens: chains used to raise HF's crop error, per-row commits returned other tokens than
    `generate` without an error, trees crashed on the layer's stale cumulative_length."""
    target, small = _mistral(0, 3, 8), _mistral(1, 1, 8)
    ids = _prompt()
    ref = _greedy_reference(target, ids, 40)
    for drafter in (ModelDrafter(small), EarlyExitDrafter(target, 1)):
        out = SpeculativeEngine(target, drafter, SpecConfig(max_new_tokens=40, num_draft_tokens=3, eos_token_id=2, **mode))
        assert torch.equal(out.generate(ids).sequences, ref)


def test_trees_far_below_the_window():
    """Mistral's default 4096 window: token trees crashed on most prompts (SDPA size mismatch once an accepted path
    other than the first branch was gathered, because the layer's cumulative_length was not updated)."""
    target = _mistral(0, 2, 4096)
    drafter = ModelDrafter(noisy_copy(target))  # accepted often, sometimes along a later branch: compaction runs
    for seed in range(4):
        ids = _prompt(batch=1, length=5, seed=seed)
        ref = _greedy_reference(target, ids, 16)
        out = SpeculativeEngine(target, drafter, SpecConfig(max_new_tokens=16, tree=(3, 2, 1), eos_token_id=2)).generate(ids)
        assert torch.equal(out.sequences, ref) and out.stats.mean_accepted_tokens > 1


def test_runner_keeps_the_whole_history_and_windows_by_mask():
    """Rolling back past the window needs the evicted entries: the runner's cache keeps them (plain layers) and the
    window is applied by the mask, so the logits after a crop equal a cache-free forward."""
    model = _mistral(0, 2, 4)
    ids = _prompt(batch=1, length=12)
    runner = ModelRunner(model)
    runner.prefill(ids[:, :3])
    runner.extend(ids[:, 3:10])  # 7 tentative tokens, past the window of 4
    runner.commit(2)  # roll back 5 of them
    assert all(layer.keys.shape[2] == 5 for layer in runner.cache.layers)  # nothing evicted
    logits = runner.extend(ids[:, 5:12])
    full = model(ids).logits[:, 5:12]
    torch.testing.assert_close(logits, full, atol=1e-9, rtol=0)


def test_early_exit_per_row_on_long_generations():
    """Early exit with its own cache and per-row commits crashed once > 64 rejected entries piled up (hole compaction
    touched the layers above n, which hold no cache)."""
    target = tiny_llama(seed=0, layers=3).double()
    ids = _prompt(batch=2, length=7, seed=5)
    ref = _greedy_reference(target, ids, 120)
    engine = SpeculativeEngine(target, EarlyExitDrafter(target, 1), SpecConfig(max_new_tokens=120, num_draft_tokens=4,
                                                                                   rows="independent", eos_token_id=2))  # fmt: skip
    assert torch.equal(engine.generate(ids).sequences, ref)


def test_gemma3_early_exit_uses_per_layer_type_rotary_embeddings():
    target = TEXT_FAMILIES["gemma3"].build(seed=0, layers=3)
    ids = _prompt(batch=2, length=6, seed=1)
    ref = _greedy_reference(target, ids, 20)
    for share_kv in (False, True):
        engine = SpeculativeEngine(target, EarlyExitDrafter(target, 1, share_kv=share_kv),
                                   SpecConfig(max_new_tokens=20, eos_token_id=2))  # fmt: skip
        assert torch.equal(engine.generate(ids).sequences, ref)


def _images(n=2):
    rng = np.random.default_rng(0)
    return [Image.fromarray(rng.integers(0, 256, (40, 48, 3), dtype=np.uint8)) for _ in range(n)]


def test_gemma3_vlm_batches_and_placeholders():
    """A batch of 2 images failed in the processor; placeholder ids held <start_of_image>, not the soft tokens."""
    family = VLM_FAMILIES["gemma3-vlm"]
    target, processor = family.build(seed=0, layers=2), family.processor()
    spec = VLMSpeculator(target, processor, drafter=ModelDrafter(family.text_drafter(), text_only=True))
    soft = processor.tokenizer.convert_tokens_to_ids("<image_soft_token>")
    assert spec.engine.placeholder_ids == (soft,)
    enc = spec.prepare(_images(), ["caption :", "what is on the image ?"])
    ref = target.generate(**{k: (v.double() if v.is_floating_point() else v) for k, v in enc.items()}, do_sample=False,
                          max_new_tokens=12, pad_token_id=0)  # fmt: skip
    out = spec._decode({k: (v.double() if v.is_floating_point() else v) for k, v in enc.items()}, 12, None, {})
    assert torch.equal(out.sequences, ref[:, : out.sequences.shape[1]]) and out.sequences.shape[0] == 2


def test_paligemma_gets_no_labels():
    """PaliGemma's processor always returns `labels`; forwarding them broke generation."""
    family = VLM_FAMILIES["paligemma"]
    target, processor = family.build(seed=0, layers=2), family.processor()
    spec = VLMSpeculator(target, processor, drafter=NgramDrafter())
    enc = spec.prepare(_images(1), "caption :")
    assert "labels" not in enc and "token_type_ids" in enc
    out = spec._decode({k: (v.double() if v.is_floating_point() else v) for k, v in enc.items()}, 8, None, {})
    assert out.new_tokens.shape[1] >= 1


def _refused_models():
    import transformers as T

    return {
        "mamba (state space)": lambda: T.MambaForCausalLM(T.MambaConfig(vocab_size=48, hidden_size=16, num_hidden_layers=2,
                                                                         state_size=4)),  # fmt: skip
        "lfm2 (conv layers)": lambda: T.Lfm2ForCausalLM(T.Lfm2Config(
            vocab_size=48, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
            num_key_value_heads=1, layer_types=["conv", "full_attention"])),
        "qwen3-next (linear attention)": lambda: T.Qwen3NextForCausalLM(T.Qwen3NextConfig(
            vocab_size=48, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
            num_key_value_heads=1, head_dim=8, linear_num_value_heads=2, linear_num_key_heads=2, linear_key_head_dim=8,
            linear_value_head_dim=8, moe_intermediate_size=16, num_experts=2, num_experts_per_tok=1,
            shared_expert_intermediate_size=16)),
        "t5 (encoder-decoder)": lambda: T.T5ForConditionalGeneration(T.T5Config(vocab_size=48, d_model=16, d_kv=8, d_ff=32,
                                                                                num_layers=1, num_heads=2)),  # fmt: skip
    }


@pytest.mark.parametrize("name", list(_refused_models()))
def test_models_whose_cache_cannot_roll_back_are_refused_up_front(name):
    model = _refused_models()[name]().eval()
    with pytest.raises(UnsupportedModelError, match="target: .*(recurrent|conv|encoder-decoder)"):
        SpeculativeEngine(model, NgramDrafter())
    with pytest.raises(UnsupportedModelError, match="drafter"):
        SpeculativeEngine(tiny_llama(), ModelDrafter(model))


def test_layouts_of_the_supported_local_families():
    assert attention_layout(TEXT_FAMILIES["mistral"].build()).types == ("sliding_attention",)
    gemma2 = attention_layout(TEXT_FAMILIES["gemma2"].build(layers=3))
    assert gemma2.layer_types == ("sliding_attention", "full_attention", "sliding_attention") and gemma2.window == 8
    llama4 = attention_layout(TEXT_FAMILIES["llama4"].build(layers=4))
    assert llama4.chunk == 8 and "chunked_attention" in llama4.types
    assert not attention_layout(TEXT_FAMILIES["llama"].build()).local


# ---------------------------------------------------------------------------------------------------------------
# inputs that passed silently or failed obscurely


@pytest.fixture(scope="module")
def llama_engine():
    target, small = tiny_llama(seed=0, layers=2), tiny_llama(seed=1, layers=1, hidden=32)
    return SpeculativeEngine(target, ModelDrafter(small), SpecConfig(max_new_tokens=4))


@pytest.mark.parametrize("kwargs,match", [
    (dict(temperature=float("nan")), "temperature: expected a finite number"),
    (dict(temperature=float("inf")), "temperature: expected a finite number"),
    (dict(seed=-1), "seed: expected an int >= 0"),
    (dict(verifier="reflection-coupling"), "verifier: 'reflection-coupling' verifies continuous states"),
    (dict(verifier="no-such-rule"), r"verifier: expected one of \[.*'greedy'"),
    (dict(verifier="ssd", verifier_params=dict(beta=-1)), "beta"),
    (dict(eos_token_id=-3), "eos_token_id"),
], ids=lambda v: str(v)[:40])  # fmt: skip
def test_config_refuses(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SpecConfig(**kwargs)


def test_right_padded_prompt_is_refused(llama_engine):
    ids = _prompt(batch=2, length=6)
    mask = torch.ones_like(ids)
    mask[1, -2:] = 0  # right padding
    with pytest.raises(ValueError, match=r"attention_mask: expected left padding .* rows \[1\]"):
        llama_engine.generate(ids, mask)
    left = torch.ones_like(ids)
    left[1, :2] = 0
    assert llama_engine.generate(ids, left).sequences.shape[0] == 2  # left padding is fine


@pytest.mark.parametrize("bad", [48, 1000, -1])
def test_token_ids_outside_the_vocabulary_name_the_argument(llama_engine, bad):
    ids = _prompt(batch=1, length=5)
    ids[0, 2] = bad
    with pytest.raises(ValueError, match=r"input_ids: expected token ids in \[0, 48\)"):
        llama_engine.generate(ids)


def test_tree_wider_than_the_vocabulary(llama_engine):
    with pytest.raises(ValueError, match="tree: expected at most 48 children"):
        llama_engine.generate(_prompt(batch=1), config=SpecConfig(tree=(60, 1)))


def test_vlm_speculator_validates_seed_and_verifier_domain():
    family = VLM_FAMILIES["llava"]
    spec = VLMSpeculator(family.build(layers=1), family.processor(), drafter=NgramDrafter())
    image = _images(1)[0]
    with pytest.raises(ValueError, match="seed"):
        spec.generate(image, "caption :", seed=-1)
    with pytest.raises(ValueError, match="verifier: 'sjd'"):
        spec.generate(image, "caption :", verifier="sjd")


def test_video_inputs():
    from mmspec.modalities.video import load_frames

    clip = np.zeros((6, 16, 16, 3), dtype=np.uint8)
    with pytest.raises(ValueError, match="num_frames: expected an int >= 1 or None"):
        load_frames(clip, num_frames=0)
    with pytest.raises(ValueError, match="num_frames: the clip has 6 frames, fewer than the 9 asked for"):
        load_frames(clip, num_frames=9)
    with pytest.raises(ValueError, match=r"video: expected frames of one size, got PIL images of sizes"):
        load_frames([Image.new("RGB", (16, 16)), Image.new("RGB", (20, 16))])


def test_video_directory_path(tmp_path):
    from mmspec.modalities.video import load_frames

    with pytest.raises(IsADirectoryError, match="video: expected a video file, got the directory"):
        load_frames(str(tmp_path))


def test_image_ar_and_diffusion_name_the_right_argument():
    from mmspec import zoo

    t2i = zoo.load("shapes-t2i").speculator()
    with pytest.raises(ValueError, match="num_draft_tokens: expected an int >= 1, got 0"):
        t2i.generate(["red circle at top left"], method="speculative", num_draft_tokens=0, decode=False)
    ddpm = zoo.load("shapes-ddpm").speculator()
    with pytest.raises(ValueError, match="num_inference_steps: method 'asd' .* expected >= 2"):
        ddpm.generate(["red circle at top left"], method="asd", num_inference_steps=1)
