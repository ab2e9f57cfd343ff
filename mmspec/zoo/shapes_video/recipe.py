"""Zoo entry ``shapes-video`` (the clips and captions are in :mod:`.data`): a Qwen2-VL-architecture video captioner
with its drafters.

A clip has ``NUM_FRAMES`` frames of ``FRAME_SIZE`` pixels: 1-3 shapes on the 3x3 grid of :mod:`.shapes`, then one
or two events, each starting on an even frame (Qwen2-VL merges frame pairs into one temporal patch)::

    "2 shapes : a red circle at top left and a blue square at center . then the red circle moves to right .
     then a green triangle appears at bottom ."

Questions ask about order and motion ("what happens first ?", "what moves ?", "how many shapes at the end ?").

Models (one word-level tokenizer, saved with the processor in ``target/``):

- ``target``       Qwen2VLForConditionalGeneration: 2-block vision tower (8-px patches, 2x2 merge -> 64 video tokens
                   for 8 frames of 64 px) and an 8-layer language model with M-RoPE.
- ``drafter-vlm``  the same architecture, 2 layers at half width (a small video LM drafter).
- ``drafter-text`` a 2-layer LlamaForCausalLM that never sees the clip (text-only drafter).
- ``adaptor``      a Q-Former-style query adaptor (:mod:`mmspec.drafting.query_adaptor`): 16 learned queries that
                   read the target's final-norm hidden states at the 64 video tokens (from the target's own prefill)
                   and stand in for the video in drafter-vlm's prompt (a compressed view with no vision pass in the
                   drafter). Trained jointly with drafter-vlm, which keeps training on its full view at the same
                   time, so one drafter serves both views.
- ``eagle``        an EAGLE-style feature-injection head on the target (:mod:`mmspec.drafters.eagle`), trained by
                   distillation on the target's own hidden states and outputs.

The drafters are trained on labels plus logit distillation from the trained target (:mod:`mmspec.training.distill`),
so the target is trained first.

``mmspec zoo train shapes-video`` rebuilds everything from scratch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import torch

from ...training import card_entry
from ..integrity import load_model, require_weights
from ..registry import ZOO, ZooEntry, load_eagle
from ..stages import example_batches, model_stage, open_card, run_stages, save_half, supervised
from .data import (DRAFTER_SIZES, ENTRY, FRAME_SIZE, NUM_FRAMES, TARGET_SIZES, build_processor, caption_accuracy, collate,
                   example, text_config, video_config)


def train(out_dir: str | Path, *, target_steps: int = 2000, drafter_steps: int = 800, eagle_steps: int = 1000,
          batch_size: int = 32, target_lr: float = 1e-3, seed: int = 0, smoke: bool = False,
          only: tuple[str, ...] | None = None, adaptor_queries: int = 16) -> dict:  # fmt: skip
    """Train the entry into ``out_dir`` (target/, drafter-text/, drafter-vlm/, adaptor/, eagle/, card.json).

    ``only``: retrain just these models; the others and their card entries stay as they are. The EAGLE head is
    trained on the target found in ``out_dir`` (train the target first). The adaptor step fine-tunes drafter-vlm
    (one drafter for the full and the compressed view), so retraining drafter-vlm retrains the adaptor too.
    """
    from transformers import LlamaForCausalLM, Qwen2VLForConditionalGeneration

    out_dir = Path(out_dir)
    processor = build_processor()
    tok = processor.tokenizer
    vocab_size = 8 * math.ceil(len(tok) / 8)
    bs = 4 if smoke else batch_size
    n = (lambda steps: 2 if smoke else steps)  # fmt: skip

    def stage(name: str, build, with_video: bool, steps: int, lr: float):
        if name == "target":
            batches = example_batches(example, collate, processor, bs)
            train = supervised(batches, steps=n(steps), lr=lr, seed=seed, desc=f"train {name}")
        else:  # drafters: labels + logit distillation from the trained target
            train = lambda model: _distill_drafter(model, out_dir, processor, with_video=with_video, steps=n(steps),  # noqa: E731
                                                   batch_size=bs, lr=lr, seed=seed, desc=f"distill {name}")  # fmt: skip
        accuracy = (lambda model: caption_accuracy(model, processor, n=8 if smoke else 200)) if with_video else None
        return model_stage(out_dir, name, build, train, steps=n(steps), lr=lr, seed=seed, processor=processor,
                           evaluate=accuracy)  # fmt: skip

    # the target first: the drafters are distilled from it (logit distillation) and the EAGLE head reads its features
    stages = {
        "target": stage("target", lambda: Qwen2VLForConditionalGeneration(video_config(TARGET_SIZES, vocab_size, tok)),
                              True, target_steps, target_lr),
        "drafter-text": stage("drafter-text", lambda: LlamaForCausalLM(text_config(DRAFTER_SIZES, vocab_size, tok)),
                                    False, drafter_steps, 2e-3),
        "drafter-vlm": stage("drafter-vlm", lambda: Qwen2VLForConditionalGeneration(video_config(DRAFTER_SIZES, vocab_size, tok)),
                                   True, drafter_steps, 2e-3),
        "adaptor": lambda: _train_adaptor(out_dir, processor, steps=n(drafter_steps // 2), batch_size=bs, lr=1e-3, seed=seed,
                                          queries=adaptor_queries),
        "eagle": lambda: _train_eagle(out_dir, processor, steps=n(eagle_steps), batch_size=bs, lr=2e-3, seed=seed),
    }  # fmt: skip
    if only and "drafter-vlm" in only:
        only = (*only, "adaptor")
    card = open_card(out_dir, only, entry=ENTRY, seed=seed, batch_size=batch_size, frames=NUM_FRAMES, frame_size=FRAME_SIZE)
    card["retrain"] = "mmspec zoo train shapes-video [--only target,drafter-text,drafter-vlm,adaptor,eagle]"
    return run_stages(out_dir, card, stages, only)


def _load_target(out_dir: Path):
    from transformers import Qwen2VLForConditionalGeneration

    if not (out_dir / "target" / "config.json").exists():
        raise FileNotFoundError(f"out_dir: no trained target in {out_dir}/target; train it first (--only target)")
    return Qwen2VLForConditionalGeneration.from_pretrained(out_dir / "target", dtype=torch.float32,
                                                           local_files_only=True).eval()  # fmt: skip


def _distill_drafter(model, out_dir: Path, processor, *, with_video: bool, steps: int, batch_size: int, lr: float,
                     seed: int, desc: str) -> list[float]:  # fmt: skip
    from ...training.distill import distill_drafter

    target = _load_target(out_dir)

    def batches(rng):
        batch = [example(rng.randrange(10_000_000), "train", rng) for _ in range(batch_size)]
        return collate(processor, batch, with_video), collate(processor, batch, True)

    return distill_drafter(model, target, batches, steps=steps, lr=lr, seed=seed, alpha=0.5, desc=desc)


ADAPTOR_SOURCE = "target-features"  # the adaptor reads the target's final-norm hidden states at the video tokens


def _train_adaptor(out_dir: Path, processor, *, steps: int, batch_size: int, lr: float, seed: int,
                   queries: int = 16) -> dict:  # fmt: skip
    """A Q-Former-style query adaptor and the drafter that reads it, trained jointly on compressed views (labels +
    logit distillation against the target); the drafter starts from drafter-vlm.

    The adaptor reads the *target's* final-norm hidden states at the 64 video tokens (free: the target computes them
    in its own prefill) and gives the drafter ``queries`` tokens (16: the compressed drafter runs no vision tower and
    prefills 21 instead of 69 tokens; 64: the same without token reduction, an ablation). Measured on 8 held-out clips after 150 steps at batch 16 (K = 5, mean accepted
    tokens per round; full-view drafter-vlm 4.04): target final-norm features, joint 3.82; the target's LM input
    embeddings, joint 3.39; target features with drafter-vlm frozen 3.29. An earlier adaptor on the drafter's own
    vision tokens (joint, 400 steps) kept 3.66 of 3.89 but could not cut the drafter's set-up: its vision tower
    still saw every patch. The 64-query ablation (same start and training) accepts 4.48 against the shipped 16
    queries' 4.57 (BENCHMARKS.md)."""
    from transformers import Qwen2VLForConditionalGeneration

    from ...training.distill import distill_compressed_drafter
    from ...drafting.query_adaptor import QueryAdaptor

    target = _load_target(out_dir)
    drafter = Qwen2VLForConditionalGeneration.from_pretrained(out_dir / "drafter-vlm", dtype=torch.float32,
                                                              local_files_only=True)  # fmt: skip
    before = caption_accuracy(drafter, processor, n=8 if batch_size < 8 else 200)
    torch.manual_seed(seed)
    adaptor = QueryAdaptor(drafter.config.text_config.hidden_size, queries,
                           input_size=target.config.text_config.hidden_size, source=ADAPTOR_SOURCE)  # fmt: skip
    video_id = processor.tokenizer.convert_tokens_to_ids("<|video_pad|>")

    batches = example_batches(example, collate, processor, batch_size)
    losses = distill_compressed_drafter(drafter, adaptor, target, batches, steps=steps, lr=lr, seed=seed,
                                        placeholder_ids=(video_id,), train_drafter=True, source=ADAPTOR_SOURCE,
                                        full_view_weight=1.0, desc="distill adaptor + drafter-vlm (both views)")  # fmt: skip
    save_half(adaptor, out_dir / "adaptor")
    save_half(drafter, out_dir / "drafter-vlm", pad_token_id=processor.tokenizer.pad_token_id)  # one drafter, both views
    after = caption_accuracy(drafter, processor, n=8 if batch_size < 8 else 200)
    return {"queries": queries, "source": ADAPTOR_SOURCE,
            "drafter": "drafter-vlm, fine-tuned here on its full view and the adaptor's view together",
            "drafter_caption_accuracy_test": {"before": before, "after": after},
            **card_entry(adaptor, losses, steps, lr)}  # fmt: skip


EAGLE_INTERMEDIATE = 320  # half the target's MLP width: the head stays ~10% of the target


def _train_eagle(out_dir: Path, processor, *, steps: int, batch_size: int, lr: float, seed: int) -> dict:
    from ...training.distill import train_eagle_head

    batches = example_batches(example, collate, processor, batch_size)
    return train_eagle_head(_load_target(out_dir), batches, out_dir / "eagle", intermediate_size=EAGLE_INTERMEDIATE,
                            steps=steps, lr=lr, seed=seed)  # fmt: skip


# ---- the entry: what `mmspec.zoo.load("shapes-video")` returns ----


@dataclass
class ShapesVideo:
    target: object  # Qwen2VLForConditionalGeneration (video)
    processor: object  # Qwen2VLProcessor
    drafter_vlm: object  # small Qwen2VLForConditionalGeneration
    drafter_text: object  # LlamaForCausalLM (text-only)
    adaptor: object | None  # mmspec.drafting.query_adaptor.QueryAdaptor (None until trained) ...
    drafter_adaptor: object | None  # ... and the small Qwen2-VL drafter that reads its 16 tokens (drafter_vlm itself)
    eagle: object | None  # mmspec.drafting.eagle_head.EagleHead on the target (None until trained)


def _load_shapes_video(path: Path, dtype=torch.float32, device="cpu") -> ShapesVideo:
    from transformers import AutoProcessor, LlamaForCausalLM, Qwen2VLForConditionalGeneration

    from ...drafting.query_adaptor import QueryAdaptor

    path = require_weights(path, ENTRY)
    drafter_vlm = load_model(Qwen2VLForConditionalGeneration, path / "drafter-vlm", dtype, device)
    adaptor = load_model(QueryAdaptor, path / "adaptor", dtype, device, optional=True)
    return ShapesVideo(
        target=load_model(Qwen2VLForConditionalGeneration, path / "target", dtype, device),
        processor=AutoProcessor.from_pretrained(path / "target", local_files_only=True),
        drafter_vlm=drafter_vlm,
        drafter_text=load_model(LlamaForCausalLM, path / "drafter-text", dtype, device),
        adaptor=adaptor,
        drafter_adaptor=drafter_vlm if adaptor is not None else None,  # trained on both views
        eagle=load_eagle(path, dtype, device),
    )


ZOO.register(ENTRY)(ZooEntry(ENTRY, train, _load_shapes_video))
