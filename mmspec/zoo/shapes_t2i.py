"""Zoo entry ``shapes-t2i``: class-conditional image generation over VQ codes, LlamaGen-style.

Data: 32x32 images of one coloured shape on a plain background. A *condition* is (shape, colour, position) with
3 shapes x 4 colours x 9 positions (3x3 grid) = 108 classes; within a condition the size and the exact placement
vary (so sampling at temperature 1 has something to sample).

Models (all Hugging Face classes, safetensors via ``save_pretrained``):

- ``vq/``      diffusers ``VQModel``: 32x32x3 -> 8x8 grid of codes from a 128-entry codebook (f = 4).
- ``target/``  ``LlamaForCausalLM`` over [condition prefix (3 tokens); 64 image codes]; the condition tokens live
               after the codebook in the vocabulary (ids 128..144, 144 = the null condition for CFG, which the
               target learns by dropping the condition on 10 % of the training images).
- ``drafter/`` a 1-layer ``LlamaForCausalLM`` with the same vocabulary, distilled on the target's logits.
- ``judge/``   transformers ``ResNetForImageClassification`` over the 108 conditions: the quality judge
               (condition accuracy, and pooled features for the Fréchet distance).

``train(out_dir)`` rebuilds everything (``mmspec zoo train shapes-t2i``).
"""

from __future__ import annotations

import functools
import random
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image, ImageDraw

from ..modalities.image_ar import codes_to_images, images_to_codes
from ..training import card_entry, fit
from .integrity import load_model, require_weights
from .registry import ZOO, ZooEntry
from .shapes import COLORS, SHAPES, draw_shape
from .stages import open_card, run_stages, save_half

IMAGE_SIZE = 32
GRID = 8  # codes per side (IMAGE_SIZE / 4)
CODEBOOK = 128
GRID_POSITIONS = ("top left", "top", "top right", "left", "center", "right", "bottom left", "bottom", "bottom right")
BACKGROUND = (245, 245, 240)
_TEST_SEED_OFFSET = 10_000_000


@dataclass(frozen=True)
class Condition:
    shape: str  # one of SHAPES
    color: str  # one of COLORS
    position: int  # 0..8 on the 3x3 grid, row-major

    @property
    def label(self) -> int:
        """Class index 0..107 (the judge's label)."""
        return (SHAPES.index(self.shape) * len(COLORS) + list(COLORS).index(self.color)) * 9 + self.position

    @classmethod
    def from_label(cls, label: int) -> "Condition":
        if not 0 <= label < NUM_CLASSES:
            raise ValueError(f"label: expected an int in [0, {NUM_CLASSES}), got {label!r}")
        sc, pos = divmod(label, 9)
        s, c = divmod(sc, len(COLORS))
        return cls(SHAPES[s], list(COLORS)[c], pos)

    @classmethod
    def parse(cls, text: str) -> "Condition":
        """"red circle at top left" -> Condition (the caption form :meth:`caption` writes)."""
        words = text.strip().split()
        try:
            at = words.index("at")
            color, shape = words[:at]
            position = GRID_POSITIONS.index(" ".join(words[at + 1 :]))
            return cls(shape, color, position) if shape in SHAPES and color in COLORS else cls._bad(text)
        except ValueError:
            return cls._bad(text)

    @staticmethod
    def _bad(text):
        raise ValueError(f"condition: expected '<colour> <shape> at <position>' with colour in {list(COLORS)}, shape in "
                         f"{list(SHAPES)}, position in {list(GRID_POSITIONS)}, got {text!r}")  # fmt: skip

    def caption(self) -> str:
        return f"{self.color} {self.shape} at {GRID_POSITIONS[self.position]}"


NUM_CLASSES = len(SHAPES) * len(COLORS) * 9
ALL_CONDITIONS = tuple(Condition.from_label(i) for i in range(NUM_CLASSES))
DEMO_CONDITIONS = ("red circle at top left", "blue square at center", "green triangle at bottom right",
                   "yellow circle at right", "red triangle at top", "blue circle at bottom left")  # the demos' default

# Vocabulary of the AR models: codes 0..127, then shape / colour / position tokens, then the null condition.
SHAPE_BASE = CODEBOOK
COLOR_BASE = SHAPE_BASE + len(SHAPES)
POSITION_BASE = COLOR_BASE + len(COLORS)
NULL_TOKEN = POSITION_BASE + 9
VOCAB = NULL_TOKEN + 1
PREFIX_LEN = 3


def to_condition(c) -> Condition:
    """A Condition, a caption ("red circle at top left") or a label 0..107 -> Condition."""
    if isinstance(c, Condition):
        return c
    if isinstance(c, str):
        return Condition.parse(c)
    if isinstance(c, int) and not isinstance(c, bool):
        return Condition.from_label(c)
    raise ValueError(f"condition: expected a caption such as 'red circle at top left', a Condition or a label 0..{NUM_CLASSES - 1}, "
                     f"got {type(c).__name__} {c!r}")  # fmt: skip


def condition_tokens(cond: Condition) -> list[int]:
    return [SHAPE_BASE + SHAPES.index(cond.shape), COLOR_BASE + list(COLORS).index(cond.color), POSITION_BASE + cond.position]


def null_tokens() -> list[int]:
    return [NULL_TOKEN] * PREFIX_LEN


def render(cond: Condition, seed: int) -> Image.Image:
    """One 32x32 image of ``cond`` (size and placement drawn from ``seed``), antialiased (drawn at 4x)."""
    rng = random.Random(seed * 9973 + cond.label)
    scale = 4
    size = IMAGE_SIZE * scale
    img = Image.new("RGB", (size, size), BACKGROUND)
    cell = size / 3
    row, col = divmod(cond.position, 3)
    half = cell * rng.uniform(0.24, 0.4)
    cx = (col + 0.5) * cell + rng.uniform(-1, 1) * (cell / 2 - half)
    cy = (row + 0.5) * cell + rng.uniform(-1, 1) * (cell / 2 - half)
    draw_shape(ImageDraw.Draw(img), cond.shape, cond.color, cx, cy, half)
    return img.resize((IMAGE_SIZE, IMAGE_SIZE), Image.LANCZOS)


def example(index: int, split: str = "train") -> tuple[Condition, Image.Image]:
    """The ``index``-th (condition, image) of a split; test examples come from a disjoint seed range."""
    if split not in ("train", "test"):
        raise ValueError(f"split: expected 'train' or 'test', got {split!r}")
    seed = index + (_TEST_SEED_OFFSET if split == "test" else 0)
    cond = ALL_CONDITIONS[random.Random(seed).randrange(NUM_CLASSES)]
    return cond, render(cond, seed)


def to_tensor(images) -> torch.Tensor:
    """PIL images -> float [B, 3, H, W] in [-1, 1]."""
    arr = np.stack([np.asarray(im.convert("RGB"), dtype=np.float32) for im in images])  # [B, H, W, 3]
    return torch.from_numpy(arr).permute(0, 3, 1, 2) / 127.5 - 1.0


# ----------------------------------------------------------------------------------------------------------------
# Model configurations


def vq_config() -> dict:
    return dict(in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * 3,
                up_block_types=("UpDecoderBlock2D",) * 3, block_out_channels=(16, 32, 64), layers_per_block=1,
                latent_channels=16, num_vq_embeddings=CODEBOOK, vq_embed_dim=16, norm_num_groups=8,
                sample_size=IMAGE_SIZE)  # fmt: skip


def ar_config(hidden: int, layers: int, heads: int, intermediate: int):
    from transformers import LlamaConfig

    return LlamaConfig(vocab_size=VOCAB, hidden_size=hidden, intermediate_size=intermediate, num_hidden_layers=layers,
                       num_attention_heads=heads, num_key_value_heads=heads, max_position_embeddings=PREFIX_LEN + GRID * GRID + 8,
                       bos_token_id=None, eos_token_id=None, pad_token_id=NULL_TOKEN, tie_word_embeddings=False)  # fmt: skip


TARGET_SIZE = dict(hidden=192, layers=4, heads=4, intermediate=512)
DRAFTER_SIZE = dict(hidden=96, layers=1, heads=2, intermediate=256)


def judge_config():
    from transformers import ResNetConfig

    return ResNetConfig(num_channels=3, embedding_size=24, hidden_sizes=[32, 64, 96], depths=[1, 1, 1],
                        layer_type="basic", downsample_in_first_stage=False, num_labels=NUM_CLASSES,
                        id2label={i: c.caption() for i, c in enumerate(ALL_CONDITIONS)},
                        label2id={c.caption(): i for i, c in enumerate(ALL_CONDITIONS)})  # fmt: skip


# ----------------------------------------------------------------------------------------------------------------
# Data batches


def _batch_images(rng: random.Random, batch_size: int) -> tuple[list[Condition], torch.Tensor]:
    pairs = [example(rng.randrange(1 << 30)) for _ in range(batch_size)]
    return [c for c, _ in pairs], to_tensor([im for _, im in pairs])


# ----------------------------------------------------------------------------------------------------------------
# Training


def _train_vq(out: Path, steps: int, batch_size: int, lr: float, seed: int) -> dict:
    from diffusers import VQModel

    torch.manual_seed(seed)
    vq = VQModel(**vq_config()).train()
    usage = torch.zeros(CODEBOOK)
    warmup = steps // 5  # plain autoencoder steps before the codebook exists (then k-means initialises it)
    background = (torch.tensor(BACKGROUND, dtype=torch.float32) / 127.5 - 1)[None, :, None, None]  # [1, 3, 1, 1]

    def loss_fn(rng):
        nonlocal usage
        step = len(losses_seen)
        losses_seen.append(1)
        _, x = _batch_images(rng, batch_size)
        h = vq.encode(x).latents  # [B, C, h, w]
        if step < warmup:
            z_q, commit = h, 0.0
        else:
            if step == warmup:
                _kmeans_init(vq, rng, batch_size)
            z_q, commit, (_, _, idx) = vq.quantize(h)
            usage += torch.bincount(idx.flatten(), minlength=CODEBOOK).float()
            if step % 50 == 49:  # restart dead codes on random encoder outputs (keeps the codebook in use)
                dead = usage == 0
                if bool(dead.any()):
                    flat = h.detach().permute(0, 2, 3, 1).reshape(-1, h.shape[1])
                    pick = torch.randint(len(flat), (int(dead.sum()),))
                    vq.quantize.embedding.weight.data[dead] = flat[pick]
                usage = torch.zeros(CODEBOOK)
        recon = vq.decode(z_q, force_not_quantize=True).sample
        # shapes cover a few % of the pixels: weight them up, or the colours are lost to the background
        weight = 1 + 9 * ((x - background).abs().sum(1, keepdim=True) > 0.1).float()  # [B, 1, H, W]
        err = (recon - x).pow(2) + (recon - x).abs()
        return (weight * err).sum() / (weight.sum() * 3) + commit

    losses_seen: list[int] = []
    losses = fit(loss_fn, vq.parameters(), steps=steps, lr=lr, seed=seed, desc="vq")
    save_half(vq, out / "vq")
    return card_entry(vq, losses, steps, lr, **vq_quality(vq))


@torch.no_grad()
def _kmeans_init(vq, rng: random.Random, batch_size: int, iters: int = 15) -> None:
    """Codebook <- k-means centres of encoder outputs (half of the starting centres from shape regions)."""
    _, x = _batch_images(rng, 4 * batch_size)
    h = vq.encode(x).latents  # [N, C, h, w]
    flat = h.permute(0, 2, 3, 1).reshape(-1, h.shape[1])  # [M, C]
    spread = (flat - flat.mean(0)).norm(dim=-1)  # far from the mean vector: likely shape regions
    g = torch.Generator().manual_seed(rng.randrange(1 << 30))
    far = torch.topk(spread, max(CODEBOOK, len(flat) // 10)).indices
    init = torch.cat([far[torch.randperm(len(far), generator=g)[: CODEBOOK // 2]],
                      torch.randperm(len(flat), generator=g)[: CODEBOOK - CODEBOOK // 2]])  # fmt: skip
    centres = flat[init].clone()
    for _ in range(iters):
        assign = torch.cdist(flat, centres).argmin(-1)  # [M]
        sums = torch.zeros_like(centres).index_add_(0, assign, flat)
        counts = torch.bincount(assign, minlength=CODEBOOK).float()[:, None]
        centres = torch.where(counts > 0, sums / counts.clamp_min(1), centres)
    vq.quantize.embedding.weight.data.copy_(centres)


@torch.no_grad()
def vq_quality(vq, n: int = 256) -> dict:
    """Held-out reconstruction PSNR (dB) and codebook usage of a VQ tokenizer."""
    x = to_tensor([example(i, "test")[1] for i in range(n)])
    codes = images_to_codes(vq, x)
    recon = codes_to_images(vq, codes, (GRID, GRID))
    mse = F.mse_loss(recon.clamp(-1, 1), x).item() / 4  # images in [0, 1]
    return {"recon_psnr_db": round(float(10 * np.log10(1 / mse)), 2), "codes_used": int(codes.unique().numel())}


def _code_dataset(vq, n: int, batch: int = 512) -> tuple[torch.Tensor, torch.Tensor]:
    """Tokenise n training images once: (prefix [n, 3], codes [n, 64])."""
    prefixes, codes = [], []
    for start in range(0, n, batch):
        pairs = [example(i) for i in range(start, min(n, start + batch))]
        prefixes.append(torch.tensor([condition_tokens(c) for c, _ in pairs]))
        codes.append(images_to_codes(vq, to_tensor([im for _, im in pairs])))
    return torch.cat(prefixes), torch.cat(codes)


def _ar_batch(prefix, codes, rng: random.Random, batch_size: int, drop: float) -> tuple[torch.Tensor, torch.Tensor]:
    idx = torch.tensor([rng.randrange(len(codes)) for _ in range(batch_size)])
    pre = prefix[idx].clone()
    dropped = torch.tensor([rng.random() < drop for _ in range(batch_size)])
    pre[dropped] = NULL_TOKEN
    ids = torch.cat([pre, codes[idx]], dim=1)  # [B, 3 + 64]
    labels = ids.clone()
    labels[:, :PREFIX_LEN] = -100
    return ids, labels


def _train_ar(out: Path, name: str, size: dict, prefix, codes, steps, batch_size, lr, seed, teacher=None,
              resume: bool = False) -> dict:  # fmt: skip
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    if resume:  # continue from the saved weights with a fresh warm-up + cosine schedule
        model = LlamaForCausalLM.from_pretrained(out / name, dtype=torch.float32).train()
    else:
        model = LlamaForCausalLM(ar_config(**size)).train()

    def loss_fn(rng):
        ids, labels = _ar_batch(prefix, codes, rng, batch_size, drop=0.1)
        logits = model(input_ids=ids).logits[:, PREFIX_LEN - 1 : -1]  # [B, 64, V] predicts the codes
        if teacher is None:
            return F.cross_entropy(logits.reshape(-1, VOCAB), ids[:, PREFIX_LEN:].reshape(-1))
        with torch.no_grad():
            t = teacher(input_ids=ids).logits[:, PREFIX_LEN - 1 : -1]
        return F.kl_div(F.log_softmax(logits[..., :CODEBOOK], -1), F.log_softmax(t[..., :CODEBOOK], -1),
                        log_target=True, reduction="batchmean") / logits.shape[1]  # fmt: skip

    losses = fit(loss_fn, model.parameters(), steps=steps, lr=lr, seed=seed, desc=name)
    save_half(model, out / name)
    return card_entry(model, losses, steps, lr)


def _train_judge(out: Path, steps: int, batch_size: int, lr: float, seed: int) -> dict:
    from transformers import ResNetForImageClassification

    torch.manual_seed(seed)
    judge = ResNetForImageClassification(judge_config()).train()

    def loss_fn(rng):
        conds, x = _batch_images(rng, batch_size)
        return judge(pixel_values=x, labels=torch.tensor([c.label for c in conds])).loss

    losses = fit(loss_fn, judge.parameters(), steps=steps, lr=lr, seed=seed, desc="judge")
    save_half(judge, out / "judge")
    pairs = [example(i, "test") for i in range(1000)]
    with torch.no_grad():
        pred = judge(pixel_values=to_tensor([im for _, im in pairs])).logits.argmax(-1)
    acc = (pred == torch.tensor([c.label for c, _ in pairs])).float().mean().item()
    return card_entry(judge, losses, steps, lr, test_accuracy=round(acc, 4))


def train(out_dir: str | Path, *, vq_steps: int = 1000, judge_steps: int = 1500, target_steps: int = 4000,
          drafter_steps: int = 1500, dataset_size: int = 20000, batch_size: int = 64, target_lr: float = 2e-3,
          seed: int = 0, only: tuple[str, ...] | None = None, smoke: bool = False, resume_target: bool = False) -> dict:  # fmt: skip
    """Train the shapes-t2i entry into ``out_dir`` (stages: vq, judge, target, drafter; ``only`` picks some).

    ``resume_target=True`` continues the saved target for ``target_steps`` more steps (recorded in the card as a
    second stage). ``smoke=True`` runs a few steps of everything on a tiny dataset (for tests)."""
    from diffusers import VQModel
    from transformers import LlamaForCausalLM

    if smoke:
        vq_steps = judge_steps = target_steps = drafter_steps = 2
        dataset_size, batch_size = 16, 4
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    card = open_card(out, True)
    card.update({"entry": "shapes-t2i", "seed": seed, "image_size": IMAGE_SIZE, "grid": GRID, "codebook": CODEBOOK,
                 "conditions": NUM_CLASSES, "batch_size": batch_size})  # fmt: skip

    @functools.cache
    def dataset():  # the training images tokenised once by the trained VQ, for the target and the drafter
        t0 = time.time()
        vq = VQModel.from_pretrained(out / "vq", torch_dtype=torch.float32).eval()
        prefix, codes = _code_dataset(vq, dataset_size)
        card["dataset"] = {"images": dataset_size, "tokenise_seconds": round(time.time() - t0, 1)}
        return prefix, codes

    def target():
        if not resume_target:
            return _train_ar(out, "target", TARGET_SIZE, *dataset(), target_steps, batch_size, target_lr, seed)
        stage = _train_ar(out, "target", TARGET_SIZE, *dataset(), target_steps, batch_size, target_lr, seed + 1, resume=True)
        previous = card["models"]["target"]
        return {**stage, "steps": previous["steps"] + target_steps, "train_seconds": previous["train_seconds"],
                "stages": previous.get("stages", [{k: previous[k] for k in ("steps", "lr", "final_loss")}])
                + [{"steps": target_steps, "lr": target_lr, "final_loss": stage["final_loss"], "resumed": True}]}  # fmt: skip

    def drafter():
        teacher = LlamaForCausalLM.from_pretrained(out / "target", dtype=torch.float32).eval()
        return _train_ar(out, "drafter", DRAFTER_SIZE, *dataset(), drafter_steps, batch_size, 3e-3, seed, teacher=teacher)

    stages = {"vq": lambda: _train_vq(out, vq_steps, batch_size, 2e-3, seed),
              "judge": lambda: _train_judge(out, judge_steps, batch_size, 2e-3, seed), "target": target, "drafter": drafter}
    return run_stages(out, card, stages, only)


# ---- the entry: what `mmspec.zoo.load("shapes-t2i")` returns ----


@dataclass
class ShapesT2I:
    vq: object  # diffusers VQModel (32x32 <-> 8x8 codes)
    target: object  # LlamaForCausalLM over [condition prefix; codes]
    drafter: object | None  # a 1-layer LlamaForCausalLM with the same vocabulary
    judge: object | None  # transformers ResNetForImageClassification over the 108 conditions

    def speculator(self, cfg_scale: float = 2.0):
        """An :class:`~mmspec.modalities.image_ar.ImageARSpeculator` for this entry; conditions are captions such
        as "red circle at top left", :class:`~mmspec.zoo.shapes_t2i.Condition` objects or labels 0..107."""
        from ..modalities.image_ar import ImageARSpeculator

        return ImageARSpeculator(self.target, self.vq, drafter=self.drafter, conditioner=lambda c: condition_tokens(to_condition(c)),
                                 null_prompt=null_tokens(), grid=(GRID, GRID), codebook_size=CODEBOOK, cfg_scale=cfg_scale)  # fmt: skip


def _load_shapes_t2i(path: Path, dtype=torch.float32, device="cpu") -> ShapesT2I:
    from diffusers import VQModel
    from transformers import LlamaForCausalLM, ResNetForImageClassification

    path = require_weights(path, "shapes-t2i")
    return ShapesT2I(
        vq=load_model(VQModel, path / "vq", dtype, device),
        target=load_model(LlamaForCausalLM, path / "target", dtype, device),
        drafter=load_model(LlamaForCausalLM, path / "drafter", dtype, device, optional=True),
        judge=load_model(ResNetForImageClassification, path / "judge", dtype, device, optional=True),
    )


ZOO.register("shapes-t2i")(ZooEntry("shapes-t2i", train, _load_shapes_t2i))
