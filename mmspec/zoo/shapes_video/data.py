"""The shapes-video world: procedural clips of shapes that move, appear, disappear and change colour, their captions
and questions, the word-level tokenizer and the Qwen2-VL processor, model configs, and training examples.

A clip has ``NUM_FRAMES`` frames of ``FRAME_SIZE`` pixels: 1-3 shapes on the 3x3 grid of :mod:`..shapes`, then one
or two events, each starting on an even frame (Qwen2-VL merges frame pairs into one temporal patch)::

    "2 shapes : a red circle at top left and a blue square at center . then the red circle moves to right .
     then a green triangle appears at bottom ."

Questions ask about order and motion ("what happens first ?", "what moves ?", "how many shapes at the end ?").
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageDraw

from ..shapes import COLORS, POSITIONS, SHAPES, draw_shape, vocabulary as image_vocabulary, word_tokenizer
from ...metrics import exact_match_accuracy
from ...training import pack_answers

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
    return word_tokenizer(SPECIAL + vocabulary(), {"image_token": "<|image_pad|>", "video_token": "<|video_pad|>",
                                                   "vision_start_token": "<|vision_start|>", "vision_end_token": "<|vision_end|>"})  # fmt: skip


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


def caption_accuracy(model, processor, n: int = 200, batch_size: int = 25, slowdown: int = 1) -> float:
    """Exact-match caption accuracy of greedy decoding on ``n`` held-out (test split) clips (rendered ``slowdown``
    times slower: longer clips, same captions)."""
    return exact_match_accuracy(model, processor, [make_clip(i, "test") for i in range(n)], media="videos",
                                render=lambda c: c.frames_array(slowdown=slowdown), prompt=caption_prompt(),
                                truth=lambda c: c.caption(), max_new_tokens=64, batch_size=batch_size)  # fmt: skip
