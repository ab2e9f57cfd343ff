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

import json
import math
import random
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from .integrity import load_model, require_weights, write_card
from .registry import ZOO, ZooEntry, load_eagle
from .shapes import make_scene, vocabulary, word_tokenizer
from ..metrics import exact_match_accuracy
from ..training import card_entry, fit, pack_answers

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


def train_model(model, processor, *, with_image: bool, steps: int, batch_size: int, lr: float, seed: int, desc: str):
    """AdamW with warm-up + cosine decay on freshly generated scenes; returns the loss curve."""

    def loss_fn(rng):
        batch = [example(rng.randrange(10_000_000), "train", rng) for _ in range(batch_size)]
        return model(**collate(processor, batch, with_image)).loss

    model.train()
    losses = fit(loss_fn, model.parameters(), steps=steps, lr=lr, seed=seed, desc=desc)
    model.eval()
    return losses


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
    ids = dict(
        vocab_size=8 * math.ceil(len(tok) / 8),  # padded vocabulary width
        pad_id=tok.pad_token_id,
        bos_id=tok.bos_token_id,
        eos_id=tok.eos_token_id,
    )
    image_id = tok.convert_tokens_to_ids("<image>")
    card = {"entry": ENTRY, "seed": seed, "batch_size": batch_size, "models": {}}
    if only and (out_dir / "card.json").exists():
        card = json.loads((out_dir / "card.json").read_text())
    plan = [
        ("drafter-text", lambda: LlamaForCausalLM(text_config(DRAFTER_SIZES, **ids)), False, drafter_steps, 2e-3),
        ("drafter-vlm", lambda: LlavaForConditionalGeneration(vlm_config(DRAFTER_SIZES, image_token_id=image_id, **ids)),
         True, drafter_steps, 2e-3),
        ("target", lambda: LlavaForConditionalGeneration(vlm_config(TARGET_SIZES, image_token_id=image_id, **ids)),
         True, target_steps, target_lr),
    ]  # fmt: skip
    plan.append(("eagle", None, True, eagle_steps, 2e-3))  # on the trained target: train it first
    names = [p[0] for p in plan]
    if only and not set(only) <= set(names):
        raise ValueError(f"only: expected names among {names}, got {list(only)}")
    for name, build, with_image, steps, lr in plan:
        if only and name not in only:
            continue
        if name == "eagle":
            entry = _train_eagle(out_dir, processor, steps=2 if smoke else steps, batch_size=4 if smoke else batch_size,
                                 lr=lr, seed=seed)  # fmt: skip
            card["models"][name] = entry
            print(name, json.dumps(entry), flush=True)
            continue
        torch.manual_seed(seed)
        model = build()
        t0 = time.perf_counter()
        losses = train_model(model, processor, with_image=with_image, steps=2 if smoke else steps,
                             batch_size=4 if smoke else batch_size, lr=lr, seed=seed, desc=f"train {name}")  # fmt: skip
        seconds = time.perf_counter() - t0
        entry = card_entry(model, losses, steps, lr, train_seconds=round(seconds, 1))
        if with_image:
            entry["caption_accuracy_test"] = caption_accuracy(model, processor, n=8 if smoke else 200)
        card["models"][name] = entry
        print(name, json.dumps(entry), flush=True)
        model.generation_config.pad_token_id = tok.pad_token_id
        model.to(torch.float16).save_pretrained(out_dir / name)
        if name == "target":
            processor.save_pretrained(out_dir / name)
        else:
            tok.save_pretrained(out_dir / name)
    write_card(out_dir, card)  # with a sha256 per file, verified on load
    return card


def _train_eagle(out_dir: Path, processor, *, steps: int, batch_size: int, lr: float, seed: int) -> dict:
    """An EAGLE head on the trained target (:mod:`mmspec.drafters.eagle`), distilled on its own features."""
    from transformers import LlavaForConditionalGeneration

    from ..training.distill import train_eagle_head

    t0 = time.perf_counter()
    target = LlavaForConditionalGeneration.from_pretrained(out_dir / "target", dtype=torch.float32,
                                                           local_files_only=True).eval()  # fmt: skip

    def batches(rng):
        return collate(processor, [example(rng.randrange(10_000_000), "train", rng) for _ in range(batch_size)], True)

    entry = train_eagle_head(target, batches, out_dir / "eagle", intermediate_size=512, steps=steps, lr=lr, seed=seed)
    return {**entry, "train_seconds": round(time.perf_counter() - t0, 1)}


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
