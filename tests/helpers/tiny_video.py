"""Tiny video LMs with real processors, built in the tests (never downloaded): Qwen2-VL and LLaVA-OneVision."""

from __future__ import annotations

import math

import numpy as np
import torch

from mmspec.zoo import shapes_video as sv


def _sharpen(model, scale=4.0):
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(scale)
    return model


def qwen2vl_video(seed=0, layers=2, hidden=64):
    """(model, processor): the shapes-video processor (8 frames of 64 px -> 64 video tokens) and a tiny Qwen2-VL."""
    from transformers import Qwen2VLForConditionalGeneration

    processor = sv.build_processor()
    tok = processor.tokenizer
    sizes = sv.Sizes(hidden, layers, 4, 2 * hidden, 32, 1)
    torch.manual_seed(seed)
    model = Qwen2VLForConditionalGeneration(sv.video_config(sizes, 8 * math.ceil(len(tok) / 8), tok)).eval()
    return _sharpen(model), processor


def onevision_processor(frame=32, patch=8):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import (LlavaOnevisionImageProcessor, LlavaOnevisionProcessor, LlavaOnevisionVideoProcessor,
                              PreTrainedTokenizerFast)  # fmt: skip

    words = ["<pad>", "<s>", "</s>", "<unk>", "<image>", "<video>"] + sv.vocabulary()
    raw = Tokenizer(models.WordLevel(vocab={w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    raw.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=raw, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                                  unk_token="<unk>", extra_special_tokens={"image_token": "<image>", "video_token": "<video>"},
                                  padding_side="left")  # fmt: skip
    norm = dict(image_mean=[0.5] * 3, image_std=[0.5] * 3)
    size = {"height": frame, "width": frame}
    return LlavaOnevisionProcessor(
        image_processor=LlavaOnevisionImageProcessor(size=size, crop_size=size, image_grid_pinpoints=[[frame, frame]], **norm),
        video_processor=LlavaOnevisionVideoProcessor(size=size, do_sample_frames=False, **norm),
        tokenizer=tok, num_image_tokens=(frame // patch) ** 2, vision_feature_select_strategy="full",
    )  # fmt: skip


def onevision_video(seed=0, layers=2, hidden=64, frame=32, patch=8, vocab_size=None):
    """(model, processor): a tiny LLaVA-OneVision (SigLIP tower, Qwen2 LM); 4 frames -> 4 * 2 * 2 + 1 video tokens.
    ``vocab_size``: the LM's vocabulary (default: the tokenizer's size rounded up to a multiple of 8)."""
    from transformers import LlavaOnevisionConfig, LlavaOnevisionForConditionalGeneration

    processor = onevision_processor(frame, patch)
    tok = processor.tokenizer
    cfg = LlavaOnevisionConfig(
        text_config=dict(model_type="qwen2", vocab_size=vocab_size or 8 * math.ceil(len(tok) / 8), hidden_size=hidden,
                         intermediate_size=2 * hidden, num_hidden_layers=layers, num_attention_heads=4,
                         num_key_value_heads=2, pad_token_id=0, bos_token_id=1, eos_token_id=2),
        vision_config=dict(model_type="siglip_vision_model", hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                           num_attention_heads=2, image_size=frame, patch_size=patch),
        image_token_index=tok.convert_tokens_to_ids("<image>"), video_token_index=tok.convert_tokens_to_ids("<video>"),
        vision_feature_select_strategy="full", vision_feature_layer=-1, image_grid_pinpoints=[[frame, frame]],
    )  # fmt: skip
    torch.manual_seed(seed)
    return _sharpen(LlavaOnevisionForConditionalGeneration(cfg).eval()), processor


def random_clip(seed=0, frames=8, size=64) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (frames, size, size, 3), dtype=np.uint8)
