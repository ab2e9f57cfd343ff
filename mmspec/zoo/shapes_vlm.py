"""Zoo entry ``shapes-vlm``: a LLaVA-architecture captioner for procedural shape scenes, with two drafters.

- ``target``       LlavaForConditionalGeneration: CLIP vision tower (96 px, 32 px patches -> 9 visual tokens) and a
                   12-layer Llama language model (~23M parameters in all).
- ``drafter-vlm``  the same architecture at <= 1/10 of the size (a small VLM drafter that sees the image).
- ``drafter-text`` a 2-layer LlamaForCausalLM that never sees the image (SPD-MLLM-style text-only drafter).
- ``eagle``        an EAGLE-style feature-injection head on the target, distilled on its own features.

All three share one word-level tokenizer (saved with the processor in ``target/``) and are saved with
``save_pretrained`` as float16 safetensors. ``mmspec zoo train shapes-vlm`` rebuilds everything from scratch.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from pathlib import Path

import torch

from .integrity import load_model, require_weights
from .registry import ZOO, ZooEntry, load_eagle
from .shapes import make_scene, vocabulary, word_tokenizer
from .stages import example_batches, model_stage, open_card, run_stages, supervised
from ..metrics import exact_match_accuracy
from ..training import pack_answers

ENTRY = "shapes-vlm"
IMAGE_SIZE = 96
PATCH_SIZE = 32
NUM_IMAGE_TOKENS = (IMAGE_SIZE // PATCH_SIZE) ** 2
SPECIAL = ["<pad>", "<s>", "</s>", "<unk>", "<image>"]


def caption_prompt() -> str:
    return "<image> caption :"


def question_prompt(question: str) -> str:
    return f"<image> question : {question} answer :"


def build_tokenizer():
    return word_tokenizer(SPECIAL + vocabulary(), {"image_token": "<image>"})


def build_processor():
    from transformers import CLIPImageProcessor, LlavaProcessor

    image_processor = CLIPImageProcessor(
        size={"shortest_edge": IMAGE_SIZE},
        crop_size={"height": IMAGE_SIZE, "width": IMAGE_SIZE},
        image_mean=[0.5, 0.5, 0.5],
        image_std=[0.5, 0.5, 0.5],
    )
    return LlavaProcessor(
        image_processor=image_processor,
        tokenizer=build_tokenizer(),
        patch_size=PATCH_SIZE,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
        image_token="<image>",
    )


@dataclass(frozen=True)
class Sizes:
    text_hidden: int
    text_layers: int
    text_heads: int
    text_intermediate: int
    vision_hidden: int
    vision_layers: int
    vision_heads: int


TARGET_SIZES = Sizes(384, 12, 6, 1024, 192, 3, 3)
DRAFTER_SIZES = Sizes(128, 2, 4, 384, 64, 1, 2)


def vlm_config(sizes: Sizes, vocab_size: int, image_token_id: int, pad_id: int, bos_id: int, eos_id: int):
    from transformers import CLIPVisionConfig, LlavaConfig

    vision = CLIPVisionConfig(
        hidden_size=sizes.vision_hidden,
        intermediate_size=4 * sizes.vision_hidden,
        num_hidden_layers=sizes.vision_layers,
        num_attention_heads=sizes.vision_heads,
        image_size=IMAGE_SIZE,
        patch_size=PATCH_SIZE,
    )
    return LlavaConfig(
        vision_config=vision,
        text_config=text_config(sizes, vocab_size, pad_id, bos_id, eos_id),
        image_token_index=image_token_id,
        vision_feature_layer=-1,
        vision_feature_select_strategy="default",
        projector_hidden_act="gelu",
    )


def text_config(sizes: Sizes, vocab_size: int, pad_id: int, bos_id: int, eos_id: int):
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=sizes.text_hidden,
        intermediate_size=sizes.text_intermediate,
        num_hidden_layers=sizes.text_layers,
        num_attention_heads=sizes.text_heads,
        num_key_value_heads=sizes.text_heads,
        max_position_embeddings=128,
        pad_token_id=pad_id,
        bos_token_id=bos_id,
        eos_token_id=eos_id,
        tie_word_embeddings=False,
    )


def example(index: int, split: str = "train", rng: random.Random | None = None):
    """(image, prompt, answer) for the index-th scene: a caption task, or a question with probability 0.3."""
    scene = make_scene(index, split)
    rng = rng or random.Random(index)
    if rng.random() < 0.3:
        q, a = rng.choice(scene.questions())
        return scene.render(IMAGE_SIZE), question_prompt(q), a
    return scene.render(IMAGE_SIZE), caption_prompt(), scene.caption()


def collate(processor, batch, with_image: bool):
    """Right-padded training batch; labels are -100 outside the answer (+ EOS)."""
    tok = processor.tokenizer
    image_id = tok.convert_tokens_to_ids("<image>")
    images, prompts, answers = zip(*batch)
    if with_image:
        enc = processor(images=list(images), text=list(prompts), padding=True, return_tensors="pt")
        prompt_ids = [row[row != tok.pad_token_id].tolist() for row in enc["input_ids"]]
        pixel_values = enc["pixel_values"]
    else:
        prompt_ids = [[t for t in tok(p)["input_ids"] if t != image_id] for p in prompts]
        pixel_values = None
    out = pack_answers(tok, prompt_ids, answers)
    if pixel_values is not None:
        out["pixel_values"] = pixel_values
    return out


def caption_accuracy(model, processor, n: int = 200, batch_size: int = 25) -> float:
    """Exact-match caption accuracy of greedy decoding on ``n`` held-out (test split) scenes."""
    return exact_match_accuracy(model, processor, [make_scene(i, "test") for i in range(n)], media="images",
                                render=lambda s: s.render(IMAGE_SIZE), prompt=caption_prompt(), truth=lambda s: s.caption(),
                                max_new_tokens=48, batch_size=batch_size)  # fmt: skip


def train(out_dir: str | Path, *, target_steps: int = 1500, drafter_steps: int = 1500, batch_size: int = 32,
          target_lr: float = 1e-3, seed: int = 0, smoke: bool = False, only: tuple[str, ...] | None = None,
          eagle_steps: int = 800) -> dict:  # fmt: skip
    """Train the entry into ``out_dir`` (target/, drafter-vlm/, drafter-text/, eagle/, card.json).

    ``only``: retrain just these models (e.g. ``("target",)``); the others and their card entries stay as they are.
    """
    from transformers import LlamaForCausalLM, LlavaForConditionalGeneration

    torch.set_num_threads(max(1, torch.get_num_threads()))
    out_dir = Path(out_dir)
    processor = build_processor()
    tok = processor.tokenizer
    ids = dict(vocab_size=8 * math.ceil(len(tok) / 8), pad_id=tok.pad_token_id, bos_id=tok.bos_token_id,
               eos_id=tok.eos_token_id)  # a padded vocabulary width  # fmt: skip
    image_id = tok.convert_tokens_to_ids("<image>")
    bs = 4 if smoke else batch_size

    def supervised_stage(name: str, build, with_image: bool, steps: int, lr: float):  # labels only, fresh scenes
        batches = example_batches(example, collate, processor, bs, with_image)
        train = supervised(batches, steps=2 if smoke else steps, lr=lr, seed=seed, desc=f"train {name}")
        accuracy = (lambda model: caption_accuracy(model, processor, n=8 if smoke else 200)) if with_image else None
        return model_stage(out_dir, name, build, train, steps=steps, lr=lr, seed=seed, processor=processor, evaluate=accuracy)

    def vlm(sizes):
        return lambda: LlavaForConditionalGeneration(vlm_config(sizes, image_token_id=image_id, **ids))

    stages = {
        "drafter-text": supervised_stage("drafter-text", lambda: LlamaForCausalLM(text_config(DRAFTER_SIZES, **ids)), False,
                                   drafter_steps, 2e-3),
        "drafter-vlm": supervised_stage("drafter-vlm", vlm(DRAFTER_SIZES), True, drafter_steps, 2e-3),
        "target": supervised_stage("target", vlm(TARGET_SIZES), True, target_steps, target_lr),
        # on the trained target: train it first
        "eagle": lambda: _train_eagle(out_dir, processor, steps=2 if smoke else eagle_steps, batch_size=bs, lr=2e-3,
                                      seed=seed),
    }  # fmt: skip
    card = open_card(out_dir, only, entry=ENTRY, seed=seed, batch_size=batch_size)
    return run_stages(out_dir, card, stages, only)


def _train_eagle(out_dir: Path, processor, *, steps: int, batch_size: int, lr: float, seed: int) -> dict:
    """An EAGLE head on the trained target (:mod:`mmspec.drafters.eagle`), distilled on its own features."""
    from transformers import LlavaForConditionalGeneration

    from ..training.distill import train_eagle_head

    target = LlavaForConditionalGeneration.from_pretrained(out_dir / "target", dtype=torch.float32,
                                                           local_files_only=True).eval()  # fmt: skip
    return train_eagle_head(target, example_batches(example, collate, processor, batch_size), out_dir / "eagle",
                            intermediate_size=512, steps=steps, lr=lr, seed=seed)  # fmt: skip


# ---- the entry: what `mmspec.zoo.load("shapes-vlm")` returns ----


@dataclass
class ShapesVLM:
    target: object  # LlavaForConditionalGeneration
    processor: object  # LlavaProcessor
    drafter_vlm: object  # small LlavaForConditionalGeneration
    drafter_text: object  # LlamaForCausalLM (text-only)
    eagle: object | None = None  # mmspec.drafting.eagle_head.EagleHead on the target (None until trained)


def _load_shapes_vlm(path: Path, dtype=torch.float32, device="cpu") -> ShapesVLM:
    from transformers import AutoProcessor, LlamaForCausalLM, LlavaForConditionalGeneration

    path = require_weights(path, ENTRY)
    return ShapesVLM(
        target=load_model(LlavaForConditionalGeneration, path / "target", dtype, device),
        processor=AutoProcessor.from_pretrained(path / "target", local_files_only=True),
        drafter_vlm=load_model(LlavaForConditionalGeneration, path / "drafter-vlm", dtype, device),
        drafter_text=load_model(LlamaForCausalLM, path / "drafter-text", dtype, device),
        eagle=load_eagle(path, dtype, device),
    )


ZOO.register(ENTRY)(ZooEntry(ENTRY, train, _load_shapes_vlm))
