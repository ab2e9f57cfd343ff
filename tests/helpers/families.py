"""Tiny seeded models of every decoder family the engine supports, with real processors for the VLMs (word-level
tokenizers built here, the families' own image processors): never downloaded, a few hundred kB each.

``TEXT_FAMILIES`` / ``VLM_FAMILIES`` map a family name to a :class:`Family`: ``build(seed, layers)`` gives a model
(float64, head sharpened: random tiny models have near-ties that float reordering would flip), ``processor()`` the
VLM's processor, ``text_drafter(seed)`` a text-only LM with the same vocabulary. ``REFUSED`` are families whose cache
cannot be rolled back (the engine refuses them).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable

import torch

WORDS = ("a the red green blue circle square triangle left right top bottom center small big one two three is on of "
         "and what where how many caption question answer : ? . , image shows there are near far above below").split()
HIDDEN, HEADS, KV_HEADS = 32, 4, 2


def _finish(model, scale: float = 4.0):
    model = model.eval().to(torch.float64)
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(scale)
    return model


def noisy_copy(model, noise: float = 0.1, seed: int = 0):
    """A drafter that agrees with ``model`` often but not always: its weights plus Gaussian noise (``noise`` x each
    tensor's std). Drafts then get accepted, partly accepted and, in trees, accepted along later branches — every
    rollback path (crop, tree-path gather, per-row holes) runs."""
    import copy

    drafter = copy.deepcopy(model)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in drafter.parameters():
            if p.numel() > 1:
                p.add_(torch.randn(p.shape, generator=g, dtype=p.dtype) * noise * p.std())
    return drafter


def word_tokenizer(specials: list[str], extra: dict[str, str] | None = None, bos="<s>", eos="</s>", pad="<pad>",
                   add_bos: bool = True):  # fmt: skip
    """A word-level fast tokenizer over WORDS plus ``specials`` (ids 0..3: pad, bos, eos, unk), left padding."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    words = [pad, bos, eos, "<unk>"] + [s for s in specials if s not in (pad, bos, eos)] + list(WORDS)
    raw = Tokenizer(models.WordLevel(vocab={w: i for i, w in enumerate(dict.fromkeys(words))}, unk_token="<unk>"))
    raw.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    if add_bos:
        raw.post_processor = processors.TemplateProcessing(single=f"{bos} $A", special_tokens=[(bos, 1)])
    tok = PreTrainedTokenizerFast(tokenizer_object=raw, bos_token=bos, eos_token=eos, pad_token=pad, unk_token="<unk>",
                                  extra_special_tokens=extra or {}, padding_side="left")  # fmt: skip
    tok.add_special_tokens({"additional_special_tokens": [s for s in specials if s not in (pad, bos, eos)]})
    return tok


def _vocab(tok) -> int:
    return len(tok)  # no padded rows: a random model could pick them, which mmspec (vocabulary = the tokenizer) cannot


def _text(model_type: str, vocab: int, layers: int, **extra) -> dict:
    return dict(model_type=model_type, vocab_size=vocab, hidden_size=HIDDEN, intermediate_size=2 * HIDDEN,
                num_hidden_layers=layers, num_attention_heads=HEADS, num_key_value_heads=KV_HEADS,
                max_position_embeddings=1024, pad_token_id=0, bos_token_id=1, eos_token_id=2, **extra)  # fmt: skip


@dataclass
class Family:
    name: str
    build: Callable[..., torch.nn.Module]  # build(seed=0, layers=2) -> model (float64, sharpened)
    processor: Callable[[], object] | None = None  # VLMs: the processor (cached)
    local: bool = False  # sliding-window / chunked layers (the matrix then exceeds the window)
    text_family: str = "llama"  # the text-only drafter's architecture (same vocabulary)

    def text_drafter(self, seed: int = 1):
        vocab = self.build(seed=seed, layers=1).get_output_embeddings().weight.shape[0]
        return TEXT_FAMILIES[self.text_family].build(seed=seed, layers=1, vocab=vocab)


# ---------------------------------------------------------------------------------------------------------------
# text families

def _causal(config_cls_name: str, model_cls_name: str, **extra):
    def build(seed=0, layers=2, vocab=64):
        import transformers

        cfg = getattr(transformers, config_cls_name)(**{k: v for k, v in _text("", vocab, layers).items() if k != "model_type"},
                                                      **extra)  # fmt: skip
        torch.manual_seed(seed)
        return _finish(getattr(transformers, model_cls_name)(cfg))

    return build


WINDOW = 8  # sliding window / chunk of the local families: every matrix generation runs past it
TEXT_FAMILIES: dict[str, Family] = {
    "llama": Family("llama", _causal("LlamaConfig", "LlamaForCausalLM")),
    "qwen2": Family("qwen2", _causal("Qwen2Config", "Qwen2ForCausalLM")),
    "qwen2-swa": Family("qwen2-swa", _causal("Qwen2Config", "Qwen2ForCausalLM", use_sliding_window=True,
                                             sliding_window=WINDOW, max_window_layers=1), local=True),  # fmt: skip
    "qwen3": Family("qwen3", _causal("Qwen3Config", "Qwen3ForCausalLM", head_dim=8)),
    "mistral": Family("mistral", _causal("MistralConfig", "MistralForCausalLM", sliding_window=WINDOW), local=True),
    "gemma2": Family("gemma2", _causal("Gemma2Config", "Gemma2ForCausalLM", head_dim=8, sliding_window=WINDOW), local=True),
    "gemma3": Family("gemma3", _causal("Gemma3TextConfig", "Gemma3ForCausalLM", head_dim=8, sliding_window=WINDOW,
                                       layer_types=None), local=True),  # fmt: skip
    "phi3": Family("phi3", _causal("Phi3Config", "Phi3ForCausalLM")),
    "llama4": Family("llama4", _causal("Llama4TextConfig", "Llama4ForCausalLM", head_dim=8, attention_chunk_size=WINDOW,
                                       intermediate_size_mlp=2 * HIDDEN, num_local_experts=2), local=True),  # fmt: skip
}


# ---------------------------------------------------------------------------------------------------------------
# VLM families: (processor, config) builders; one image per prompt


@functools.cache
def llava_processor():
    from transformers import CLIPImageProcessor, LlavaProcessor

    size = 32
    ip = CLIPImageProcessor(size={"shortest_edge": size}, crop_size={"height": size, "width": size}, image_mean=[0.5] * 3,
                            image_std=[0.5] * 3)  # fmt: skip
    return LlavaProcessor(image_processor=ip, tokenizer=word_tokenizer(["<image>"], {"image_token": "<image>"}), patch_size=16,
                          vision_feature_select_strategy="default", num_additional_image_tokens=1, image_token="<image>")  # fmt: skip


def _clip_vision(size=32, patch=16):
    return dict(model_type="clip_vision_model", hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                num_attention_heads=2, image_size=size, patch_size=patch)  # fmt: skip


def _build_llava(seed=0, layers=2):
    from transformers import LlavaConfig, LlavaForConditionalGeneration

    tok = llava_processor().tokenizer
    cfg = LlavaConfig(text_config=_text("llama", _vocab(tok), layers), vision_config=_clip_vision(),
                      image_token_index=tok.convert_tokens_to_ids("<image>"), vision_feature_layer=-1,
                      vision_feature_select_strategy="default")  # fmt: skip
    torch.manual_seed(seed)
    return _finish(LlavaForConditionalGeneration(cfg))


@functools.cache
def llava_next_processor():
    from transformers import LlavaNextImageProcessor, LlavaNextProcessor

    size = 32
    ip = LlavaNextImageProcessor(size={"shortest_edge": size}, crop_size={"height": size, "width": size},
                                 image_grid_pinpoints=[[size, size], [size, 2 * size]], image_mean=[0.5] * 3,
                                 image_std=[0.5] * 3)  # fmt: skip
    return LlavaNextProcessor(image_processor=ip, tokenizer=word_tokenizer(["<image>"], {"image_token": "<image>"}),
                              patch_size=16, vision_feature_select_strategy="default", num_additional_image_tokens=1,
                              image_token="<image>")  # fmt: skip


def _build_llava_next(seed=0, layers=2):
    from transformers import LlavaNextConfig, LlavaNextForConditionalGeneration

    tok = llava_next_processor().tokenizer
    cfg = LlavaNextConfig(text_config=_text("llama", _vocab(tok), layers), vision_config=_clip_vision(),
                          image_token_index=tok.convert_tokens_to_ids("<image>"), vision_feature_layer=-1,
                          vision_feature_select_strategy="default", image_grid_pinpoints=[[32, 32], [32, 64]])  # fmt: skip
    torch.manual_seed(seed)
    return _finish(LlavaNextForConditionalGeneration(cfg))


def _build_onevision(seed=0, layers=2):
    from tests.helpers.tiny_video import onevision_video

    return _finish(onevision_video(seed=seed, layers=layers, hidden=HIDDEN, vocab_size=len(_onevision_processor().tokenizer))[0])


def _onevision_processor():
    from tests.helpers.tiny_video import onevision_processor

    return onevision_processor()


QWEN_SPECIALS = ["<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>"]
QWEN_EXTRA = {"image_token": "<|image_pad|>", "video_token": "<|video_pad|>", "vision_start_token": "<|vision_start|>",
              "vision_end_token": "<|vision_end|>"}  # fmt: skip


def _qwen_pixels(patch=14, merge=2):
    side = patch * merge * 2  # 2 x 2 merged patches -> 4 visual tokens
    return dict(min_pixels=side * side, max_pixels=side * side, patch_size=patch, temporal_patch_size=2, merge_size=merge,
                image_mean=[0.5] * 3, image_std=[0.5] * 3)  # fmt: skip


@functools.cache
def qwen2vl_processor():
    from transformers import Qwen2VLImageProcessor, Qwen2VLProcessor, Qwen2VLVideoProcessor

    return Qwen2VLProcessor(image_processor=Qwen2VLImageProcessor(**_qwen_pixels()),
                            video_processor=Qwen2VLVideoProcessor(**_qwen_pixels(), do_sample_frames=False),
                            tokenizer=word_tokenizer(QWEN_SPECIALS, QWEN_EXTRA))  # fmt: skip


@functools.cache
def qwen25vl_processor():
    from transformers import Qwen2_5_VLProcessor, Qwen2VLImageProcessor, Qwen2VLVideoProcessor

    return Qwen2_5_VLProcessor(image_processor=Qwen2VLImageProcessor(**_qwen_pixels()),
                               video_processor=Qwen2VLVideoProcessor(**_qwen_pixels(), do_sample_frames=False),
                               tokenizer=word_tokenizer(QWEN_SPECIALS, QWEN_EXTRA))  # fmt: skip


@functools.cache
def qwen3vl_processor():
    from transformers import Qwen2VLImageProcessor, Qwen3VLProcessor, Qwen3VLVideoProcessor

    pixels = _qwen_pixels(patch=16)
    return Qwen3VLProcessor(image_processor=Qwen2VLImageProcessor(**pixels),
                            video_processor=Qwen3VLVideoProcessor(**pixels, do_sample_frames=False),
                            tokenizer=word_tokenizer(QWEN_SPECIALS, QWEN_EXTRA))  # fmt: skip


def _qwen_ids(tok) -> dict:
    ids = {k: tok.convert_tokens_to_ids(v) for k, v in QWEN_EXTRA.items()}
    return dict(image_token_id=ids["image_token"], video_token_id=ids["video_token"],
                vision_start_token_id=ids["vision_start_token"], vision_end_token_id=ids["vision_end_token"])  # fmt: skip


def _build_qwen2vl(seed=0, layers=2):
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration

    tok = qwen2vl_processor().tokenizer
    rope = {"rope_type": "default", "mrope_section": [1, 1, 2], "rope_theta": 10000.0}
    cfg = Qwen2VLConfig(text_config=_text("qwen2_vl_text", _vocab(tok), layers, rope_parameters=rope),
                        vision_config=dict(depth=1, embed_dim=32, hidden_size=HIDDEN, num_heads=2, patch_size=14,
                                           spatial_merge_size=2, temporal_patch_size=2), **_qwen_ids(tok))  # fmt: skip
    torch.manual_seed(seed)
    return _finish(Qwen2VLForConditionalGeneration(cfg))


def _build_qwen25vl(seed=0, layers=2):
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    tok = qwen25vl_processor().tokenizer
    rope = {"rope_type": "default", "mrope_section": [1, 1, 2], "rope_theta": 10000.0}
    cfg = Qwen2_5_VLConfig(text_config=_text("qwen2_5_vl_text", _vocab(tok), layers, rope_parameters=rope),
                           vision_config=dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, patch_size=14,
                                              spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=HIDDEN,
                                              fullatt_block_indexes=[0], window_size=56), **_qwen_ids(tok))  # fmt: skip
    torch.manual_seed(seed)
    return _finish(Qwen2_5_VLForConditionalGeneration(cfg))


def _build_qwen3vl(seed=0, layers=2):
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

    tok = qwen3vl_processor().tokenizer
    rope = {"rope_type": "default", "mrope_section": [1, 1, 2], "mrope_interleaved": True, "rope_theta": 10000.0}
    cfg = Qwen3VLConfig(text_config=_text("qwen3_vl_text", _vocab(tok), layers, head_dim=8, rope_parameters=rope),
                        vision_config=dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, patch_size=16,
                                           spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=HIDDEN,
                                           num_position_embeddings=16, deepstack_visual_indexes=[0]),
                        **_qwen_ids(tok))  # fmt: skip
    torch.manual_seed(seed)
    return _finish(Qwen3VLForConditionalGeneration(cfg))


@functools.cache
def idefics3_processor():
    from transformers import Idefics3ImageProcessor, Idefics3Processor

    specials = ["<fake_token_around_image>", "<image>", "<end_of_utterance>", "<global-img>"] + [
        f"<row_{i + 1}_col_{j + 1}>" for i in range(6) for j in range(6)]  # fmt: skip
    ip = Idefics3ImageProcessor(size={"longest_edge": 32}, max_image_size={"longest_edge": 32}, do_image_splitting=False,
                                image_mean=[0.5] * 3, image_std=[0.5] * 3)  # fmt: skip
    return Idefics3Processor(image_processor=ip, tokenizer=word_tokenizer(specials, {"image_token": "<image>"}), image_seq_len=4)


def _build_idefics3(seed=0, layers=2):
    from transformers import Idefics3Config, Idefics3ForConditionalGeneration

    tok = idefics3_processor().tokenizer
    cfg = Idefics3Config(text_config=_text("llama", _vocab(tok), layers),
                         vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                                            image_size=32, patch_size=8),
                         image_token_id=tok.convert_tokens_to_ids("<image>"), scale_factor=2)  # fmt: skip
    torch.manual_seed(seed)
    return _finish(Idefics3ForConditionalGeneration(cfg))


@functools.cache
def paligemma_processor():
    from transformers import PaliGemmaProcessor, SiglipImageProcessor

    ip = SiglipImageProcessor(size={"height": 32, "width": 32}, image_mean=[0.5] * 3, image_std=[0.5] * 3)
    ip.image_seq_length = 4
    tok = word_tokenizer(["<image>"], {"image_token": "<image>"}, add_bos=False)
    return PaliGemmaProcessor(image_processor=ip, tokenizer=tok)


def _build_paligemma(seed=0, layers=2):
    from transformers import PaliGemmaConfig, PaliGemmaForConditionalGeneration

    tok = paligemma_processor().tokenizer
    cfg = PaliGemmaConfig(text_config=_text("gemma", _vocab(tok), layers, head_dim=8, tie_word_embeddings=False),
                          vision_config=dict(model_type="siglip_vision_model", hidden_size=32, intermediate_size=64,
                                             num_hidden_layers=1, num_attention_heads=2, image_size=32, patch_size=16,
                                             projection_dim=HIDDEN),
                          image_token_index=tok.convert_tokens_to_ids("<image>"), projection_dim=HIDDEN,
                          tie_word_embeddings=False)  # tied, a random Gemma repeats its last input token forever  # fmt: skip
    torch.manual_seed(seed)
    return _finish(PaliGemmaForConditionalGeneration(cfg))


@functools.cache
def gemma3_processor():
    from transformers import Gemma3ImageProcessor, Gemma3Processor

    specials = ["<start_of_image>", "<end_of_image>", "<image_soft_token>", "\n\n"]
    tok = word_tokenizer(specials, {"image_token": "<image_soft_token>", "boi_token": "<start_of_image>",
                                    "eoi_token": "<end_of_image>"}, bos="<bos>", eos="<eos>")  # fmt: skip
    ip = Gemma3ImageProcessor(size={"height": 32, "width": 32}, image_mean=[0.5] * 3, image_std=[0.5] * 3)
    return Gemma3Processor(image_processor=ip, tokenizer=tok, image_seq_length=4)


def _build_gemma3vl(seed=0, layers=2):
    from transformers import Gemma3Config, Gemma3ForConditionalGeneration

    tok = gemma3_processor().tokenizer
    cfg = Gemma3Config(text_config=_text("gemma3_text", _vocab(tok), layers, head_dim=8, sliding_window=WINDOW),
                       vision_config=dict(model_type="siglip_vision_model", hidden_size=32, intermediate_size=64,
                                          num_hidden_layers=1, num_attention_heads=2, image_size=32, patch_size=8),
                       mm_tokens_per_image=4, image_token_index=tok.convert_tokens_to_ids("<image_soft_token>"),
                       boi_token_index=tok.convert_tokens_to_ids("<start_of_image>"),
                       eoi_token_index=tok.convert_tokens_to_ids("<end_of_image>"))  # fmt: skip
    torch.manual_seed(seed)
    return _finish(Gemma3ForConditionalGeneration(cfg))


VLM_FAMILIES: dict[str, Family] = {
    "llava": Family("llava", _build_llava, llava_processor),
    "llava-next": Family("llava-next", _build_llava_next, llava_next_processor),
    "llava-onevision": Family("llava-onevision", _build_onevision, _onevision_processor),
    "qwen2-vl": Family("qwen2-vl", _build_qwen2vl, qwen2vl_processor),
    "qwen2.5-vl": Family("qwen2.5-vl", _build_qwen25vl, qwen25vl_processor),
    "qwen3-vl": Family("qwen3-vl", _build_qwen3vl, qwen3vl_processor),
    "idefics3": Family("idefics3", _build_idefics3, idefics3_processor),
    "paligemma": Family("paligemma", _build_paligemma, paligemma_processor),
    "gemma3-vlm": Family("gemma3-vlm", _build_gemma3vl, gemma3_processor, local=True),
}
