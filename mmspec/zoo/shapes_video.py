"""Zoo entry ``shapes-video``: procedural clips of shapes that move, appear, disappear and change colour, and a
Qwen2-VL-architecture video captioner with its drafters.

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

import json
import math
import random
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageDraw

from .integrity import write_card
from .shapes import COLORS, POSITIONS, SHAPES, draw_shape, vocabulary as image_vocabulary
from ..training import count_parameters, fit, pack_answers

ENTRY = "shapes-video"
NUM_FRAMES = 8
FRAME_SIZE = 64
PATCH_SIZE = 8
SPECIAL = ["<pad>", "<s>", "</s>", "<unk>", "<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>"]
EVENT_FRAMES = (2, 4, 6)  # events start on even frames: frame pairs form one temporal patch
_TEST_SEED_OFFSET = 20_000_000


@dataclass(frozen=True)
class Actor:
    kind: str
    color: str
    cell: int  # where it is at the start (or appears)
    size: float  # half-size as a fraction of a grid cell
    dx: float  # jitter inside the cell, fractions of the free margin
    dy: float


@dataclass(frozen=True)
class Event:
    verb: str  # "moves" | "appears" | "disappears" | "turns"
    actor: int  # index into Clip.actors
    frame: int  # first frame showing the new state
    was: str  # the actor's colour just before the event (its name: "the <was> <kind>")
    cell: int = -1  # moves: destination
    color: str = ""  # turns: the new colour

    def describe(self, actors) -> str:
        a = actors[self.actor]
        if self.verb == "appears":
            return f"a {a.color} {a.kind} appears at {POSITIONS[a.cell]}"
        name = f"the {self.was} {a.kind}"
        if self.verb == "moves":
            return f"{name} moves to {POSITIONS[self.cell]}"
        if self.verb == "turns":
            return f"{name} turns {self.color}"
        return f"{name} disappears"


@dataclass(frozen=True)
class Clip:
    actors: tuple[Actor, ...]  # initial shapes first (in reading order), then shapes that appear later
    events: tuple[Event, ...]  # in time order
    seed: int

    @property
    def initial(self) -> list[int]:
        late = {e.actor for e in self.events if e.verb == "appears"}
        return [i for i in range(len(self.actors)) if i not in late]

    def state(self, frame: float) -> dict[int, tuple[str, float, float]]:
        """actor index -> (colour, x, y) in grid units at ``frame`` (a frame index, or a fractional time in frames
        for slowed-down renders): a move glides over [event frame - 1.5, event frame - 0.5], so integer frames see it
        half-way on the frame before; the other events take effect on their frame."""
        out = {}
        for i in self.initial:
            a = self.actors[i]
            out[i] = (a.color, *divmod(a.cell, 3)[::-1])
        for e in self.events:
            a = self.actors[e.actor]
            if e.verb == "appears" and frame >= e.frame:
                out[e.actor] = (a.color, *divmod(a.cell, 3)[::-1])
            elif e.verb == "disappears" and frame >= e.frame:
                out.pop(e.actor, None)
            elif e.verb == "turns" and frame >= e.frame and e.actor in out:
                out[e.actor] = (e.color, *out[e.actor][1:])
            elif e.verb == "moves" and e.actor in out and frame > e.frame - 1.5:
                col, x0, y0 = out[e.actor]
                x1, y1 = divmod(e.cell, 3)[::-1]
                t = min(1.0, frame - (e.frame - 1.5))
                out[e.actor] = (col, x0 + t * (x1 - x0), y0 + t * (y1 - y0))
        return out

    def render(self, size: int = FRAME_SIZE, slowdown: int = 1) -> list[Image.Image]:
        """The clip's frames; ``slowdown`` = r renders the same events at r times the frame rate (r * NUM_FRAMES
        frames, moves glide smoothly): a long clip with the same caption. r must be 1 or even, so events still
        start on a frame pair (one temporal patch)."""
        if not isinstance(slowdown, int) or slowdown < 1 or (slowdown > 1 and slowdown % 2):
            raise ValueError(f"slowdown: expected 1 or an even int >= 2, got {slowdown!r}")
        frames = []
        cell = size / 3
        for j in range(NUM_FRAMES * slowdown):
            img = Image.new("RGB", (size, size), (245, 245, 240))
            draw = ImageDraw.Draw(img)
            for i, (color, x, y) in sorted(self.state(j / slowdown).items()):
                a = self.actors[i]
                half = cell * a.size
                cx = (x + 0.5) * cell + a.dx * (cell / 2 - half)
                cy = (y + 0.5) * cell + a.dy * (cell / 2 - half)
                draw_shape(draw, a.kind, color, cx, cy, half)
            frames.append(img)
        return frames

    def frames_array(self, size: int = FRAME_SIZE, slowdown: int = 1) -> np.ndarray:
        """[T, H, W, 3] uint8 (T = NUM_FRAMES * slowdown)."""
        return np.stack([np.asarray(f) for f in self.render(size, slowdown)])

    def caption(self) -> str:
        init = [self.actors[i] for i in self.initial]
        parts = [f"a {a.color} {a.kind} at {POSITIONS[a.cell]}" for a in init]
        noun = "shape" if len(init) == 1 else "shapes"
        text = f"{len(init)} {noun} : " + " and ".join(parts) + " ."
        return text + "".join(f" then {e.describe(self.actors)} ." for e in self.events)

    def questions(self) -> list[tuple[str, str]]:
        movers = [e for e in self.events if e.verb == "moves"]
        return [
            ("what happens first ?", self.events[0].describe(self.actors)),
            ("what happens last ?", self.events[-1].describe(self.actors)),
            ("what moves ?", f"the {movers[0].was} {self.actors[movers[0].actor].kind}" if movers else "nothing"),
            ("how many shapes at the start ?", str(len(self.initial))),
            ("how many shapes at the end ?", str(len(self.state(NUM_FRAMES - 1)))),
        ]


def make_clip(index: int, split: str = "train") -> Clip:
    """The ``index``-th clip of a split (deterministic; test clips come from a disjoint seed range)."""
    if split not in ("train", "test"):
        raise ValueError(f"split: expected 'train' or 'test', got {split!r}")
    seed = index + (_TEST_SEED_OFFSET if split == "test" else 0)
    rng = random.Random(seed)
    looks = rng.sample([(k, c) for k in SHAPES for c in COLORS], 4)  # distinct (kind, colour): names are unique
    n = rng.randint(1, 3)
    cells = sorted(rng.sample(range(9), n))

    def actor(look, cell):
        return Actor(look[0], look[1], cell, rng.uniform(0.3, 0.42), rng.uniform(-1, 1), rng.uniform(-1, 1))

    actors = [actor(look, c) for look, c in zip(looks, cells)]
    alive = {i: [a.cell, a.color] for i, a in enumerate(actors)}  # actor -> [cell, current colour]
    n_events = rng.randint(1, 2)
    events = []
    for frame in sorted(rng.sample(EVENT_FRAMES, n_events)):
        free = [c for c in range(9) if c not in [cell for cell, _ in alive.values()]]
        verbs = ["moves", "appears", "turns", "disappears"]
        if len(alive) <= 1:
            verbs.remove("disappears")
        if len(actors) >= len(looks) or not free:
            verbs.remove("appears")
        verb = rng.choice(verbs)
        if verb == "appears":
            actors.append(actor(looks[len(actors)], rng.choice(free)))
            alive[len(actors) - 1] = [actors[-1].cell, actors[-1].color]
            events.append(Event("appears", len(actors) - 1, frame, was=actors[-1].color))
            continue
        who = rng.choice(sorted(alive))
        cell, was = alive[who]
        kind = actors[who].kind
        # names stay unique: a new colour no other shape of this kind has (now, or as a look still to appear)
        used = {c for i, (_, c) in alive.items() if actors[i].kind == kind} | {c for k, c in looks if k == kind}
        colors = [c for c in COLORS if c not in used]
        if verb == "turns" and not colors:
            verb = "moves" if free else "disappears"
        if verb == "moves" and free:
            dest = rng.choice(free)
            alive[who][0] = dest
            events.append(Event("moves", who, frame, was=was, cell=dest))
        elif verb == "turns":
            alive[who][1] = rng.choice(colors)
            events.append(Event("turns", who, frame, was=was, color=alive[who][1]))
        else:
            alive.pop(who)
            events.append(Event("disappears", who, frame, was=was))
    return Clip(tuple(actors), tuple(events), seed)


def vocabulary() -> list[str]:
    words = image_vocabulary()
    for w in "then moves appears disappears turns to happens first last nothing start end".split():
        if w not in words:
            words.append(w)
    return words


def video_prompt(text: str) -> str:
    return f"<|vision_start|><|video_pad|><|vision_end|> {text}"


def caption_prompt() -> str:
    return video_prompt("caption :")


def question_prompt(question: str) -> str:
    return video_prompt(f"question : {question} answer :")


def build_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIAL + vocabulary())}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()  # <|...|> placeholders are special (added) tokens
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=False)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", vocab["<s>"])])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>", unk_token="<unk>",
        extra_special_tokens={"image_token": "<|image_pad|>", "video_token": "<|video_pad|>",
                              "vision_start_token": "<|vision_start|>", "vision_end_token": "<|vision_end|>"},
        padding_side="left", clean_up_tokenization_spaces=False,
    )  # fmt: skip


def build_processor():
    from transformers import Qwen2VLImageProcessor, Qwen2VLProcessor, Qwen2VLVideoProcessor

    pixels = dict(min_pixels=FRAME_SIZE * FRAME_SIZE, max_pixels=FRAME_SIZE * FRAME_SIZE, patch_size=PATCH_SIZE,
                  temporal_patch_size=2, merge_size=2, image_mean=[0.5] * 3, image_std=[0.5] * 3)  # fmt: skip
    return Qwen2VLProcessor(
        image_processor=Qwen2VLImageProcessor(**pixels),
        video_processor=Qwen2VLVideoProcessor(**pixels, do_sample_frames=False),
        tokenizer=build_tokenizer(),
    )


@dataclass(frozen=True)
class Sizes:
    hidden: int
    layers: int
    heads: int
    intermediate: int
    vision_dim: int
    vision_depth: int


TARGET_SIZES = Sizes(256, 8, 4, 640, 96, 2)
DRAFTER_SIZES = Sizes(128, 2, 4, 384, 48, 1)


def video_config(sizes: Sizes, vocab_size: int, tok):
    from transformers import Qwen2VLConfig

    head_dim = sizes.hidden // sizes.heads
    half = head_dim // 2
    section = [half - 2 * (3 * half // 8), 3 * half // 8, 3 * half // 8]  # (t, h, w): 16/24/24 of 64 in Qwen2-VL
    ids = tok.convert_tokens_to_ids
    return Qwen2VLConfig(
        text_config=dict(vocab_size=vocab_size, hidden_size=sizes.hidden, intermediate_size=sizes.intermediate,
                         num_hidden_layers=sizes.layers, num_attention_heads=sizes.heads,
                         num_key_value_heads=sizes.heads, max_position_embeddings=256,
                         rope_parameters={"rope_type": "default", "mrope_section": section, "rope_theta": 10000.0},
                         bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                         tie_word_embeddings=False),
        vision_config=dict(depth=sizes.vision_depth, embed_dim=sizes.vision_dim, hidden_size=sizes.hidden,
                           num_heads=4, patch_size=PATCH_SIZE, spatial_merge_size=2, temporal_patch_size=2),
        image_token_id=ids("<|image_pad|>"), video_token_id=ids("<|video_pad|>"),
        vision_start_token_id=ids("<|vision_start|>"), vision_end_token_id=ids("<|vision_end|>"),
        tie_word_embeddings=False,
    )  # fmt: skip


def text_config(sizes: Sizes, vocab_size: int, tok):
    from transformers import LlamaConfig

    return LlamaConfig(vocab_size=vocab_size, hidden_size=sizes.hidden, intermediate_size=sizes.intermediate,
                       num_hidden_layers=sizes.layers, num_attention_heads=sizes.heads,
                       num_key_value_heads=sizes.heads, max_position_embeddings=256, pad_token_id=tok.pad_token_id,
                       bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, tie_word_embeddings=False)  # fmt: skip


def example(index: int, split: str = "train", rng: random.Random | None = None, slowdown: int = 1):
    """(frames [T, H, W, 3], prompt, answer): a caption, or a question with probability 0.3."""
    clip = make_clip(index, split)
    rng = rng or random.Random(index)
    if rng.random() < 0.3:
        q, a = rng.choice(clip.questions())
        return clip.frames_array(slowdown=slowdown), question_prompt(q), a
    return clip.frames_array(slowdown=slowdown), caption_prompt(), clip.caption()


def collate(processor, batch, with_video: bool) -> dict:
    """Right-padded training batch; labels are -100 outside the answer (+ EOS)."""
    tok = processor.tokenizer
    videos, prompts, answers = zip(*batch)
    extra = {}
    if with_video:
        enc = processor(videos=list(videos), text=list(prompts), padding=True, return_tensors="pt")
        prompt_ids = [row[m.bool()].tolist() for row, m in zip(enc["input_ids"], enc["attention_mask"])]
        extra = {"pixel_values_videos": enc["pixel_values_videos"], "video_grid_thw": enc["video_grid_thw"]}
    else:
        drop = set(tok.convert_tokens_to_ids(["<|image_pad|>", "<|video_pad|>"]))  # as the engine strips them
        prompt_ids = [[t for t in tok(p)["input_ids"] if t not in drop] for p in prompts]
    out = pack_answers(tok, prompt_ids, answers)
    if with_video:  # M-RoPE needs to know which tokens are video placeholders (2 = video)
        extra["mm_token_type_ids"] = 2 * (out["input_ids"] == tok.convert_tokens_to_ids("<|video_pad|>")).long()
    return {**out, **extra}


@torch.no_grad()
def caption_accuracy(model, processor, n: int = 200, batch_size: int = 25, slowdown: int = 1) -> float:
    """Exact-match caption accuracy of greedy decoding on ``n`` held-out (test split) clips (rendered ``slowdown``
    times slower: longer clips, same captions)."""
    correct = 0
    for start in range(0, n, batch_size):
        clips = [make_clip(i, "test") for i in range(start, min(n, start + batch_size))]
        enc = processor(videos=[c.frames_array(slowdown=slowdown) for c in clips], text=[caption_prompt()] * len(clips),
                        padding=True, return_tensors="pt")  # fmt: skip
        out = model.generate(**enc, max_new_tokens=64, do_sample=False)
        texts = processor.tokenizer.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
        correct += sum(t.strip() == c.caption() for t, c in zip(texts, clips))
    return correct / n


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
    card = {"entry": ENTRY, "seed": seed, "batch_size": batch_size, "frames": NUM_FRAMES, "frame_size": FRAME_SIZE,
            "models": {}}  # fmt: skip
    if only and (out_dir / "card.json").exists():
        card = json.loads((out_dir / "card.json").read_text())
    # the target first: the drafters are distilled from it (logit distillation) and the EAGLE head reads its features
    plan = [
        ("target", lambda: Qwen2VLForConditionalGeneration(video_config(TARGET_SIZES, vocab_size, tok)), True,
         target_steps, target_lr),
        ("drafter-text", lambda: LlamaForCausalLM(text_config(DRAFTER_SIZES, vocab_size, tok)), False, drafter_steps, 2e-3),
        ("drafter-vlm", lambda: Qwen2VLForConditionalGeneration(video_config(DRAFTER_SIZES, vocab_size, tok)), True,
         drafter_steps, 2e-3),
        ("adaptor", None, True, drafter_steps // 2, 1e-3),
        ("eagle", None, True, eagle_steps, 2e-3),
    ]  # fmt: skip
    names = [p[0] for p in plan]
    if only and not set(only) <= set(names):
        raise ValueError(f"only: expected names among {names}, got {list(only)}")
    if only and "drafter-vlm" in only:
        only = (*only, "adaptor")
    bs = 4 if smoke else batch_size
    for name, build, with_video, steps, lr in plan:
        if only and name not in only:
            continue
        steps = 2 if smoke else steps
        t0 = time.perf_counter()
        if name == "eagle":
            entry = _train_eagle(out_dir, processor, steps=steps, batch_size=bs, lr=lr, seed=seed)
        elif name == "adaptor":
            entry = _train_adaptor(out_dir, processor, steps=steps, batch_size=bs, lr=lr, seed=seed,
                                   queries=adaptor_queries)  # fmt: skip
        else:
            torch.manual_seed(seed)
            model = build()
            if name == "target":

                def loss_fn(rng, model=model):
                    batch = [example(rng.randrange(10_000_000), "train", rng) for _ in range(bs)]
                    return model(**collate(processor, batch, True)).loss

                model.train()
                losses = fit(loss_fn, model.parameters(), steps=steps, lr=lr, seed=seed, desc=f"train {name}")
                model.eval()
            else:  # drafters: labels + logit distillation from the trained target
                losses = _distill_drafter(model, out_dir, processor, with_video=with_video, steps=steps, batch_size=bs,
                                          lr=lr, seed=seed, desc=f"distill {name}")  # fmt: skip
            entry = {"parameters": count_parameters(model), "steps": steps, "lr": lr,
                     "final_loss": round(sum(losses[-20:]) / len(losses[-20:]), 4)}  # fmt: skip
            if with_video:
                entry["caption_accuracy_test"] = caption_accuracy(model, processor, n=8 if smoke else 200)
            model.generation_config.pad_token_id = tok.pad_token_id
            model.to(torch.float16).save_pretrained(out_dir / name)
            (processor if name == "target" else tok).save_pretrained(out_dir / name)
        entry["train_seconds"] = round(time.perf_counter() - t0, 1)
        card["models"][name] = entry
        print(name, json.dumps(entry), flush=True)
    card["retrain"] = "mmspec zoo train shapes-video [--only target,drafter-text,drafter-vlm,adaptor,eagle]"
    card["size_mb"] = round(sum(f.stat().st_size for f in out_dir.rglob("*.safetensors")) / 1e6, 2)
    write_card(out_dir, card)  # with a sha256 per file, verified on load
    return card


def _load_target(out_dir: Path):
    from transformers import Qwen2VLForConditionalGeneration

    if not (out_dir / "target" / "config.json").exists():
        raise FileNotFoundError(f"out_dir: no trained target in {out_dir}/target; train it first (--only target)")
    return Qwen2VLForConditionalGeneration.from_pretrained(out_dir / "target", dtype=torch.float32,
                                                           local_files_only=True).eval()  # fmt: skip


def _distill_drafter(model, out_dir: Path, processor, *, with_video: bool, steps: int, batch_size: int, lr: float,
                     seed: int, desc: str) -> list[float]:  # fmt: skip
    from ..training.distill import distill_drafter

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

    from ..training.distill import distill_compressed_drafter
    from ..drafting.query_adaptor import QueryAdaptor

    target = _load_target(out_dir)
    drafter = Qwen2VLForConditionalGeneration.from_pretrained(out_dir / "drafter-vlm", dtype=torch.float32,
                                                              local_files_only=True)  # fmt: skip
    before = caption_accuracy(drafter, processor, n=8 if batch_size < 8 else 200)
    torch.manual_seed(seed)
    adaptor = QueryAdaptor(drafter.config.text_config.hidden_size, queries,
                           input_size=target.config.text_config.hidden_size, source=ADAPTOR_SOURCE)  # fmt: skip
    video_id = processor.tokenizer.convert_tokens_to_ids("<|video_pad|>")

    def batches(rng):
        return collate(processor, [example(rng.randrange(10_000_000), "train", rng) for _ in range(batch_size)], True)

    losses = distill_compressed_drafter(drafter, adaptor, target, batches, steps=steps, lr=lr, seed=seed,
                                        placeholder_ids=(video_id,), train_drafter=True, source=ADAPTOR_SOURCE,
                                        full_view_weight=1.0, desc="distill adaptor + drafter-vlm (both views)")  # fmt: skip
    adaptor.half().save_pretrained(out_dir / "adaptor")  # float16 on disk, like the models
    drafter.generation_config.pad_token_id = processor.tokenizer.pad_token_id
    drafter.to(torch.float16).save_pretrained(out_dir / "drafter-vlm")  # one drafter serves both views
    shutil.rmtree(out_dir / "drafter-adaptor", ignore_errors=True)  # an earlier layout's separate copy
    after = caption_accuracy(drafter.float(), processor, n=8 if batch_size < 8 else 200)
    return {"parameters": count_parameters(adaptor), "queries": queries, "source": ADAPTOR_SOURCE,
            "drafter": "drafter-vlm, fine-tuned here on its full view and the adaptor's view together",
            "drafter_caption_accuracy_test": {"before": before, "after": after},
            "steps": steps, "lr": lr, "final_loss": round(sum(losses[-20:]) / len(losses[-20:]), 4)}  # fmt: skip


EAGLE_INTERMEDIATE = 320  # half the target's MLP width: the head stays ~10% of the target


def _train_eagle(out_dir: Path, processor, *, steps: int, batch_size: int, lr: float, seed: int) -> dict:
    from ..training.distill import distill_eagle_head
    from ..drafting.eagle_head import EagleHead

    target = _load_target(out_dir)
    torch.manual_seed(seed)
    head = EagleHead.for_target(target, intermediate_size=EAGLE_INTERMEDIATE)

    def batches(rng):
        batch = [example(rng.randrange(10_000_000), "train", rng) for _ in range(batch_size)]
        enc = collate(processor, batch, with_video=True)
        enc.pop("labels")
        return enc

    losses = distill_eagle_head(head, target, batches, steps=steps, lr=lr, seed=seed)
    head.half().save_pretrained(out_dir / "eagle")  # float16 on disk, like the models
    return {"parameters": count_parameters(head), "steps": steps, "lr": lr,
            "final_loss": round(sum(losses[-20:]) / len(losses[-20:]), 4)}  # fmt: skip


# ---- shapes-video-long: the target fine-tuned on long (slowed-down) clips, for KV-sharing methods (STD) ----

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
    model.eval()
    after = {f"{r}x": caption_accuracy(model, processor, n=n_eval, slowdown=r) for r in eval_slowdowns}
    model.generation_config.pad_token_id = processor.tokenizer.pad_token_id
    out_dir.mkdir(parents=True, exist_ok=True)
    model.to(torch.float16).save_pretrained(out_dir / "target")
    processor.save_pretrained(out_dir / "target")
    card = {"entry": LONG_ENTRY, "base": f"shapes-video target ({base.name})", "seed": seed, "batch_size": bs,
            "frames": f"{NUM_FRAMES} x slowdown", "slowdowns_per_batch": list(slowdowns), "frame_size": FRAME_SIZE,
            "models": {"target": {"parameters": count_parameters(model), "steps": steps, "lr": lr,
                                  "final_loss": round(sum(losses[-20:]) / len(losses[-20:]), 4),
                                  "caption_accuracy_test": {"before": before, "after": after, "clips": n_eval},
                                  "train_seconds": round(time.perf_counter() - t0, 1)}},
            "retrain": "mmspec zoo train shapes-video-long (fine-tunes the bundled shapes-video target)",
            "size_mb": round(sum(f.stat().st_size for f in out_dir.rglob("*.safetensors")) / 1e6, 2)}  # fmt: skip
    write_card(out_dir, card)  # with a sha256 per file, verified on load
    print(json.dumps(card["models"]["target"]), flush=True)
    return card
