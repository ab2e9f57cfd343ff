"""Procedural "shapes" scenes: 1-4 coloured shapes on a 3x3 grid, with captions and question/answer pairs.

The data every shapes-* zoo entry is trained on. Scenes are fully determined by a seed, so held-out splits are
reproducible (``split="test"`` draws from a disjoint seed range).

A scene is rendered at ``image_size`` pixels (default 96: one 32-pixel cell per grid position, jittered).
Captions list the shapes in reading order (top-left to bottom-right)::

    "2 shapes : a red circle at top left and a blue square at center ."
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from PIL import Image, ImageDraw

SHAPES = ("circle", "square", "triangle")
COLORS = {"red": (220, 40, 40), "green": (40, 170, 60), "blue": (40, 80, 220), "yellow": (230, 200, 30)}
POSITIONS = (
    "top left", "top", "top right",
    "left", "center", "right",
    "bottom left", "bottom", "bottom right",
)  # fmt: skip
NUMBER_WORDS = ("1", "2", "3", "4")
MAX_SHAPES = 4
_TEST_SEED_OFFSET = 10_000_000  # test scenes come from a disjoint seed range


@dataclass(frozen=True)
class Shape:
    kind: str  # one of SHAPES
    color: str  # one of COLORS
    cell: int  # 0..8, row-major on the 3x3 grid


@dataclass(frozen=True)
class Scene:
    shapes: tuple[Shape, ...]  # sorted by cell (reading order)
    seed: int

    def caption(self) -> str:
        parts = [f"a {s.color} {s.kind} at {POSITIONS[s.cell]}" for s in self.shapes]
        noun = "shape" if len(self.shapes) == 1 else "shapes"
        return f"{len(self.shapes)} {noun} : " + " and ".join(parts) + " ."

    def questions(self) -> list[tuple[str, str]]:
        """(question, answer) pairs about this scene; answers are short phrases."""
        qa = [("how many shapes ?", str(len(self.shapes)))]
        for kind in SHAPES:
            match = [s for s in self.shapes if s.kind == kind]
            qa.append((f"what color is the {kind} ?", match[0].color if match else "there is no " + kind))
        for s in self.shapes:
            qa.append((f"what is at {POSITIONS[s.cell]} ?", f"a {s.color} {s.kind}"))
        return qa

    def render(self, image_size: int = 96, jitter: bool = True) -> Image.Image:
        rng = random.Random(self.seed * 7919 + 17)
        img = Image.new("RGB", (image_size, image_size), (245, 245, 240))
        draw = ImageDraw.Draw(img)
        cell = image_size / 3
        for s in self.shapes:
            row, col = divmod(s.cell, 3)
            half = cell * (rng.uniform(0.28, 0.42) if jitter else 0.35)
            cx = (col + 0.5) * cell + (rng.uniform(-1, 1) * (cell / 2 - half) if jitter else 0)
            cy = (row + 0.5) * cell + (rng.uniform(-1, 1) * (cell / 2 - half) if jitter else 0)
            draw_shape(draw, s.kind, s.color, cx, cy, half)
        return img


def draw_shape(draw: ImageDraw.ImageDraw, kind: str, color: str, cx: float, cy: float, half: float) -> None:
    """Draw one shape centred at (cx, cy) with half-size ``half`` (pixels)."""
    fill = COLORS[color]
    box = (cx - half, cy - half, cx + half, cy + half)
    if kind == "circle":
        draw.ellipse(box, fill=fill)
    elif kind == "square":
        draw.rectangle(box, fill=fill)
    else:
        draw.polygon([(cx, cy - half), (cx - half, cy + half), (cx + half, cy + half)], fill=fill)


def make_scene(index: int, split: str = "train") -> Scene:
    """The ``index``-th scene of a split (deterministic)."""
    if split not in ("train", "test"):
        raise ValueError(f"split: expected 'train' or 'test', got {split!r}")
    seed = index + (_TEST_SEED_OFFSET if split == "test" else 0)
    rng = random.Random(seed)
    n = rng.randint(1, MAX_SHAPES)
    cells = sorted(rng.sample(range(9), n))
    shapes = tuple(Shape(rng.choice(SHAPES), rng.choice(list(COLORS)), c) for c in cells)
    return Scene(shapes=shapes, seed=seed)


def vocabulary() -> list[str]:
    """Every word a caption, question or answer can contain (deterministic order)."""
    words: list[str] = []
    for text in [
        "shape shapes : a at and . ? how many what color is the there no",
        " ".join(NUMBER_WORDS),
        " ".join(SHAPES),
        " ".join(COLORS),
        " ".join(POSITIONS),
        "caption question answer",
    ]:
        for w in text.split():
            if w not in words:
                words.append(w)
    return words


def word_tokenizer(words: list[str], extra_special_tokens: dict[str, str]):
    """The shapes entries' word-level tokenizer over ``words`` (the specials first: pad, bos, eos, unk, ...), with
    a ``<s>`` prefix, left padding and words joined by spaces on decoding."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(words)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()  # placeholders such as <|video_pad|> are special tokens
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins words with spaces
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", vocab["<s>"])])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                                   unk_token="<unk>", extra_special_tokens=extra_special_tokens, padding_side="left",
                                   clean_up_tokenization_spaces=False)  # fmt: skip
