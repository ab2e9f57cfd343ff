"""What every zoo recipe shares around :func:`mmspec.training.fit`: the card a retrain of some stages updates in place,
the stages run in order with their wall time, float16 ``save_pretrained`` and fresh-example batches."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Callable

import torch

from ..training import card_entry, fit
from .integrity import CARD, write_card


def open_card(out_dir: Path, only, **fields) -> dict:
    """The card to fill: the existing one when only some stages are retrained (the others keep their entries),
    else a new one with ``fields`` and no models."""
    if only and (out_dir / CARD).exists():
        return json.loads((out_dir / CARD).read_text())
    return {**fields, "models": {}}


def run_stages(out_dir: Path, card: dict, stages: dict[str, Callable[[], dict]], only=None) -> dict:
    """Run ``stages`` (name -> a function training one model and returning its card entry) in order, or just those
    named in ``only``; each entry gets its ``train_seconds``; then write the card with the weights' size and digests."""
    if only and not set(only) <= set(stages):
        raise ValueError(f"only: expected names among {list(stages)}, got {list(only)}")
    for name, stage in stages.items():
        if only and name not in only:
            continue
        t0 = time.perf_counter()
        entry = stage()
        seconds = entry.get("train_seconds", 0) + time.perf_counter() - t0  # a resumed stage adds to its earlier time
        card["models"][name] = {**entry, "train_seconds": round(seconds, 1)}
        print(name, json.dumps(card["models"][name]), flush=True)
    card["size_mb"] = round(sum(f.stat().st_size for f in out_dir.rglob("*.safetensors")) / 1e6, 2)
    write_card(out_dir, card)  # with a sha256 per file, verified on load
    return card


def save_half(model, path: Path, *companions, pad_token_id: int | None = None) -> None:
    """``save_pretrained`` in float16 (safetensors) with its processor/tokenizer/scheduler ``companions``; the model
    stays in eval mode and float32 for the evaluations that follow."""
    model.eval()
    if pad_token_id is not None:
        model.generation_config.pad_token_id = pad_token_id
    model.to(torch.float16).save_pretrained(path)
    model.float()
    for companion in companions:
        companion.save_pretrained(path)


def example_batches(example, collate, processor, batch_size: int, with_media: bool = True) -> Callable:
    """``rng -> batch``: ``batch_size`` fresh training examples (``example(index, "train", rng)``) collated."""
    return lambda rng: collate(processor, [example(rng.randrange(10_000_000), "train", rng) for _ in range(batch_size)],
                               with_media)  # fmt: skip


def model_stage(out_dir: Path, name: str, build: Callable, train: Callable, *, steps: int, lr: float, seed: int,
                processor, evaluate: Callable | None = None) -> Callable[[], dict]:  # fmt: skip
    """A stage for one transformers model: ``build()`` it (seeded), ``train(model) -> losses``, record its card entry
    (``evaluate(model)`` as its held-out caption accuracy, when given) and save it in float16 next to the processor
    (the target) or its tokenizer (the drafters)."""

    def stage() -> dict:
        torch.manual_seed(seed)
        model = build().train()
        entry = card_entry(model, train(model), steps, lr)
        if evaluate is not None:
            entry["caption_accuracy_test"] = evaluate(model.eval())
        tok = processor.tokenizer
        save_half(model, out_dir / name, processor if name == "target" else tok, pad_token_id=tok.pad_token_id)
        return entry

    return stage


def supervised(batches: Callable, *, steps: int, lr: float, seed: int, desc: str) -> Callable:
    """``train(model) -> losses``: labels only, on ``batches(rng)``."""
    return lambda model: fit(lambda rng: model(**batches(rng)).loss, model.parameters(), steps=steps, lr=lr, seed=seed,
                             desc=desc)  # fmt: skip
