"""Zoo entry ``shapes-video-long``: the shapes-video target fine-tuned on long (slowed-down) clips, for the KV-sharing
methods (STD) that pay only when reading visual KV dominates a decode step."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from ..training import card_entry, fit
from .integrity import load_model, require_weights, write_card
from .registry import WEIGHTS, ZOO, ZooEntry
from .shapes_video.data import FRAME_SIZE, NUM_FRAMES, build_processor, caption_accuracy, collate, example
from .stages import save_half

LONG_ENTRY = "shapes-video-long"
LONG_SLOWDOWNS = (1, 2, 4, 8, 16, 16)  # one drawn per batch: half the compute goes to 16x clips (1,024 video tokens)


def train_long(out_dir: str | Path, *, base: str | Path, steps: int = 800, batch_size: int = 8, lr: float = 3e-4,
               seed: int = 0, smoke: bool = False, slowdowns: tuple[int, ...] = LONG_SLOWDOWNS,
               eval_slowdowns: tuple[int, ...] = (1, 16)) -> dict:  # fmt: skip
    """Fine-tune the ``shapes-video`` target found in ``base`` on clips rendered 1-16x slower (the same events and
    captions at up to 128 frames: 1,024 video tokens) into ``out_dir`` (target/ with its processor, card.json).

    Why: STD (sparse-to-dense self-drafting) saves the cost of reading visual KV in its draft steps, which only
    matters when a decode step is dominated by it (long clips). The shapes-video target trained on 8-frame clips
    fails on longer ones (0 of 12 captions right at 2x, with fluent but wrong text), so it cannot stand in for a
    long-video model; fine-tuning it on mixed lengths can. Each batch draws one slowdown from ``slowdowns``.
    """
    from transformers import Qwen2VLForConditionalGeneration

    out_dir, base = Path(out_dir), Path(base)
    if not (base / "target" / "config.json").exists():
        raise FileNotFoundError(f"base: no shapes-video target in {base}/target; train shapes-video first")
    if not slowdowns or any(not isinstance(r, int) or r < 1 or (r > 1 and r % 2) for r in slowdowns):
        raise ValueError(f"slowdowns: expected ints that are 1 or even, got {slowdowns!r}")
    processor = build_processor()
    model = Qwen2VLForConditionalGeneration.from_pretrained(base / "target", dtype=torch.float32,
                                                            local_files_only=True)  # fmt: skip
    bs, steps = (2, 2) if smoke else (batch_size, steps)
    n_eval = 4 if smoke else 100
    t0 = time.perf_counter()
    before = {f"{r}x": caption_accuracy(model.eval(), processor, n=n_eval, slowdown=r) for r in eval_slowdowns}

    def loss_fn(rng):
        r = rng.choice(slowdowns)
        batch = [example(rng.randrange(10_000_000), "train", rng, slowdown=r) for _ in range(bs)]
        return model(**collate(processor, batch, True)).loss

    model.train()
    losses = fit(loss_fn, model.parameters(), steps=steps, lr=lr, seed=seed, desc="fine-tune target on long clips")
    after = {f"{r}x": caption_accuracy(model.eval(), processor, n=n_eval, slowdown=r) for r in eval_slowdowns}
    save_half(model, out_dir / "target", processor, pad_token_id=processor.tokenizer.pad_token_id)
    card = {"entry": LONG_ENTRY, "base": f"shapes-video target ({base.name})", "seed": seed, "batch_size": bs,
            "frames": f"{NUM_FRAMES} x slowdown", "slowdowns_per_batch": list(slowdowns), "frame_size": FRAME_SIZE,
            "models": {"target": card_entry(model, losses, steps, lr, train_seconds=round(time.perf_counter() - t0, 1),
                                            caption_accuracy_test={"before": before, "after": after, "clips": n_eval})},
            "retrain": "mmspec zoo train shapes-video-long (fine-tunes the bundled shapes-video target)",
            "size_mb": round(sum(f.stat().st_size for f in out_dir.rglob("*.safetensors")) / 1e6, 2)}  # fmt: skip
    write_card(out_dir, card)  # with a sha256 per file, verified on load
    print(json.dumps(card["models"]["target"]), flush=True)
    return card


# ---- the entry: what `mmspec.zoo.load("shapes-video-long")` returns ----


@dataclass
class ShapesVideoLong:
    target: object  # Qwen2VLForConditionalGeneration: the shapes-video target fine-tuned on 1-16x slowed-down clips
    processor: object  # Qwen2VLProcessor (the same as shapes-video's)


def _load_shapes_video_long(path: Path, dtype=torch.float32, device="cpu") -> ShapesVideoLong:
    from transformers import AutoProcessor, Qwen2VLForConditionalGeneration

    path = require_weights(path, "shapes-video-long")
    return ShapesVideoLong(target=load_model(Qwen2VLForConditionalGeneration, path / "target", dtype, device),
                           processor=AutoProcessor.from_pretrained(path / "target", local_files_only=True))  # fmt: skip


def _train_entry(out_dir, **options):
    return train_long(out_dir, **{"base": WEIGHTS / "shapes-video", **options})


ZOO.register(LONG_ENTRY)(ZooEntry(LONG_ENTRY, _train_entry, _load_shapes_video_long))
