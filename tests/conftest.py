"""Tiny seeded models built in the tests from configs (never downloaded)."""

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():  # Triton kernels run in Triton's CPU interpreter (set before triton is imported)
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402

torch.set_num_threads(2)

VOCAB = 48
IMAGE_ID = 47  # image placeholder id in the tiny VLMs


def _seed(seed):
    torch.manual_seed(seed)


def tiny_llama(seed=0, layers=2, hidden=64, vocab=VOCAB, width=None):
    from transformers import LlamaConfig, LlamaForCausalLM

    _seed(seed)
    cfg = LlamaConfig(vocab_size=width or vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256, pad_token_id=0,
                      bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)  # fmt: skip
    model = LlamaForCausalLM(cfg).eval()
    _sharpen(model)
    return model


def _sharpen(model, scale=4.0):
    """Random tiny models have nearly flat logits; scale the head so greedy choices are well separated."""
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(scale)


def tiny_llava(seed=0, layers=2, hidden=64, image_size=32, patch=16):
    from transformers import CLIPVisionConfig, LlamaConfig, LlavaConfig, LlavaForConditionalGeneration

    _seed(seed)
    text = LlamaConfig(vocab_size=VOCAB, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                       num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=256, pad_token_id=0,
                       bos_token_id=1, eos_token_id=2)  # fmt: skip
    vision = CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                              image_size=image_size, patch_size=patch)  # fmt: skip
    cfg = LlavaConfig(vision_config=vision, text_config=text, image_token_index=IMAGE_ID, vision_feature_layer=-1,
                      vision_feature_select_strategy="default")  # fmt: skip
    model = LlavaForConditionalGeneration(cfg).eval()
    _sharpen(model)
    return model


def llava_inputs(batch=1, seed=0, image_size=32, patch=16, text_len=5, pad_rows=()):
    """input_ids with (image_size/patch)^2 image tokens after BOS, random pixels; optional left padding rows."""
    g = torch.Generator().manual_seed(seed)
    n_img = (image_size // patch) ** 2
    ids = torch.randint(3, IMAGE_ID, (batch, 1 + n_img + text_len), generator=g)
    ids[:, 0] = 1
    ids[:, 1 : 1 + n_img] = IMAGE_ID
    mask = torch.ones_like(ids)
    for r in pad_rows:  # left-pad by shifting: drop 2 text tokens, pad 2 on the left
        ids[r] = torch.cat([torch.zeros(2, dtype=torch.long), ids[r, :-2]])
        mask[r, :2] = 0
    pixels = torch.randn(batch, 3, image_size, image_size, generator=g)
    return ids, mask, {"pixel_values": pixels}


def tiny_qwen2vl(seed=0, layers=2):
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration

    _seed(seed)
    cfg = Qwen2VLConfig(
        text_config=dict(vocab_size=VOCAB + 8, hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                         rope_parameters={"rope_type": "default", "mrope_section": [2, 3, 3], "rope_theta": 10000.0},
                         bos_token_id=1, eos_token_id=2, pad_token_id=0),
        vision_config=dict(depth=1, embed_dim=32, hidden_size=64, num_heads=2, patch_size=14, spatial_merge_size=2,
                           temporal_patch_size=2),
        image_token_id=IMAGE_ID, video_token_id=VOCAB + 1, vision_start_token_id=VOCAB + 2, vision_end_token_id=VOCAB + 3,
    )  # fmt: skip
    model = Qwen2VLForConditionalGeneration(cfg).eval()
    _sharpen(model)
    return model


def qwen2vl_inputs(batch=1, seed=0, grid=(1, 4, 6), text_len=5):
    """Vision-start, image tokens (t*h*w/4 after 2x2 merge), vision-end, text; pixel patches [N, 3*2*14*14]."""
    g = torch.Generator().manual_seed(seed)
    t, h, w = grid
    n_img = t * h * w // 4
    rows = []
    for _ in range(batch):
        text = torch.randint(3, IMAGE_ID, (text_len,), generator=g)
        rows.append(torch.cat([torch.tensor([1, VOCAB + 2]), torch.full((n_img,), IMAGE_ID), torch.tensor([VOCAB + 3]), text]))
    ids = torch.stack(rows)
    pixels = torch.randn(batch * t * h * w, 3 * 2 * 14 * 14, generator=g)
    return ids, torch.ones_like(ids), {"pixel_values": pixels, "image_grid_thw": torch.tensor([grid] * batch)}


@pytest.fixture(scope="session")
def llama_pair():
    return tiny_llama(seed=0, layers=3), tiny_llama(seed=1, layers=1, hidden=32)


@pytest.fixture(scope="session")
def llava_trio():
    return tiny_llava(seed=0, layers=3), tiny_llava(seed=1, layers=1, hidden=32), tiny_llama(seed=2, layers=1, hidden=32)


@pytest.fixture(scope="session")
def qwen_pair():
    return tiny_qwen2vl(seed=0, layers=3), tiny_qwen2vl(seed=1, layers=1)
