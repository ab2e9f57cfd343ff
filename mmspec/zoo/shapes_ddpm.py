"""Zoo entry ``shapes-ddpm``: a small class-conditional DDPM on the shapes-t2i images.

Data: the 32x32 images of :mod:`mmspec.zoo.shapes_t2i` (one coloured shape; 108 conditions = 3 shapes x 4
colours x 9 positions, size and placement vary). The quality judge is the shapes-t2i ``judge/`` (same
conditions, same renderer), so this entry ships no judge of its own.

Models (diffusers classes, safetensors via ``save_pretrained``):

- ``unet/``      diffusers ``UNet2DModel`` with a class embedding over 109 ids (108 conditions + the null id 108
                 for classifier-free guidance, learnt by dropping the label on 10 % of the training images);
                 v-prediction (an ε-prediction UNet of the same size and steps under-fits the high-noise steps,
                 where x̂0 = (x − √(1−ᾱ)ε̂)/√ᾱ amplifies ε errors ~100x, and samples keep visible noise).
- ``scheduler/`` diffusers ``DDPMScheduler`` config (1000 training steps, linear betas, ``fixed_small``
                 variance, x̂0 clipping) — the sampler the DDPM kernels of :mod:`mmspec.modalities.diffusion`
                 are derived from.

``train(out_dir)`` rebuilds it (``mmspec zoo train shapes-ddpm``).
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm import tqdm

from ..training import count_parameters, fit
from .integrity import load_model, require_weights, write_card
from .registry import WEIGHTS, ZOO, ZooEntry
from .shapes_t2i import IMAGE_SIZE, NUM_CLASSES, example, to_condition, to_tensor
from .stages import save_half

NULL_CLASS = NUM_CLASSES  # the class id of the empty condition (classifier-free guidance)


def unet_config() -> dict:
    return dict(sample_size=IMAGE_SIZE, in_channels=3, out_channels=3, layers_per_block=1,
                block_out_channels=(16, 32, 64), down_block_types=("DownBlock2D", "DownBlock2D", "AttnDownBlock2D"),
                up_block_types=("AttnUpBlock2D", "UpBlock2D", "UpBlock2D"), norm_num_groups=8,
                num_class_embeds=NUM_CLASSES + 1, attention_head_dim=16)  # fmt: skip


def scheduler_config() -> dict:
    return dict(num_train_timesteps=1000, beta_schedule="linear", beta_start=1e-4, beta_end=0.02,
                variance_type="fixed_small", prediction_type="v_prediction", clip_sample=True)  # fmt: skip


def _dataset(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """n rendered training images: uint8 [n, 3, 32, 32] and labels [n] (rendered once; PIL is the slow part)."""
    images, labels = [], []
    for start in tqdm(range(0, n, 500), desc="render"):
        pairs = [example(seed * 1_000_003 + i) for i in range(start, min(n, start + 500))]
        images.append(((to_tensor([im for _, im in pairs]) + 1) * 127.5).round().to(torch.uint8))
        labels.append(torch.tensor([c.label for c, _ in pairs]))
    return torch.cat(images), torch.cat(labels)


def train(out_dir: str | Path, *, steps: int = 10000, dataset_size: int = 30000, batch_size: int = 32, lr: float = 1e-3,
          label_drop: float = 0.1, seed: int = 0, resume: bool = False, smoke: bool = False) -> dict:  # fmt: skip
    """Train the shapes-ddpm UNet into ``out_dir`` (``resume=True`` continues the saved UNet for ``steps`` more
    steps, recorded as a second stage in the card; ``smoke=True`` runs a few steps on a tiny dataset)."""
    from diffusers import DDPMScheduler, UNet2DModel

    if smoke:
        steps, dataset_size, batch_size = 2, 16, 4
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    card_path = out / "card.json"
    card = json.loads(card_path.read_text()) if card_path.exists() and resume else {}
    torch.manual_seed(seed)
    if resume:
        unet = UNet2DModel.from_pretrained(out / "unet", torch_dtype=torch.float32).train()
    else:
        unet = UNet2DModel(**unet_config()).train()
    scheduler = DDPMScheduler(**scheduler_config())
    t0 = time.time()
    images, labels = _dataset(dataset_size, seed + (1 if resume else 0))
    render_seconds = time.time() - t0
    alphas_cumprod = scheduler.alphas_cumprod  # [T]

    def loss_fn(rng: random.Random) -> torch.Tensor:
        idx = torch.tensor([rng.randrange(dataset_size) for _ in range(batch_size)])
        x0 = images[idx].float() / 127.5 - 1.0  # [b, 3, 32, 32]
        y = labels[idx].clone()  # [b]
        y[torch.rand(batch_size) < label_drop] = NULL_CLASS
        t = torch.randint(0, scheduler.config.num_train_timesteps, (batch_size,))
        eps = torch.randn_like(x0)
        a = alphas_cumprod[t].view(-1, 1, 1, 1)
        xt = a.sqrt() * x0 + (1 - a).sqrt() * eps
        v = a.sqrt() * eps - (1 - a).sqrt() * x0  # v-prediction target
        return F.mse_loss(unet(xt, t, class_labels=y).sample, v)

    t0 = time.time()
    losses = fit(loss_fn, unet.parameters(), steps=steps, lr=lr, seed=seed + (1 if resume else 0), desc="ddpm unet",
                 weight_decay=0.0)  # fmt: skip
    stage = {"steps": steps, "lr": lr, "final_loss": round(sum(losses[-100:]) / len(losses[-100:]), 4),
             "train_seconds": round(time.time() - t0, 1)}  # fmt: skip
    save_half(unet, out / "unet")
    scheduler.save_pretrained(out / "scheduler")
    stages = card.get("unet", {}).get("stages", []) + [{**stage, "resumed": resume}]
    card.update({"entry": "shapes-ddpm", "seed": seed, "image_size": IMAGE_SIZE, "conditions": NUM_CLASSES,
                 "null_class": NULL_CLASS, "batch_size": batch_size, "label_drop": label_drop,
                 "judge": "shapes-t2i/judge",
                 "unet": {"parameters": count_parameters(unet), "steps": sum(s["steps"] for s in stages),
                          "final_loss": stage["final_loss"], "train_seconds": round(sum(s["train_seconds"] for s in stages), 1),
                          "stages": stages},
                 "dataset": {"images": dataset_size, "render_seconds": round(render_seconds, 1)}})  # fmt: skip
    if not smoke:
        card["quality"] = evaluate(out)
    write_card(out, card)  # with a sha256 per file, verified on load
    return card


def evaluate(out_dir: str | Path, steps: int = 100, seed: int = 0) -> dict:
    """Judge accuracy of one plain DDPM sample per condition (108 images, ``steps`` steps), with the shapes-t2i
    judge; {} when that entry's judge is missing."""
    from ..metrics import Judge

    models = _load_shapes_ddpm(out_dir)
    if models.judge is None:
        return {}
    labels = list(range(NUM_CLASSES))
    out = models.speculator().generate(labels, method="plain", num_inference_steps=steps, seed=seed, decode=False)
    pred, _ = Judge(models.judge)(out.samples.clamp(-1, 1))
    acc = float((pred == torch.tensor(labels)).float().mean())
    return {"judge_accuracy": round(acc, 4), "images": len(labels), "sampler": f"ddpm {steps} steps", "seed": seed}


# ---- the entry: what `mmspec.zoo.load("shapes-ddpm")` returns ----


@dataclass
class ShapesDDPM:
    unet: object  # diffusers UNet2DModel, class-conditional (108 conditions + null id 108), v-prediction
    scheduler: object  # diffusers DDPMScheduler (fixed_small variance)
    judge: object | None  # the shapes-t2i ResNet judge (same conditions and renderer), None if that entry is missing

    def speculator(self, cfg_scale: float = 1.0, **options):
        """A :class:`~mmspec.modalities.diffusion.DiffusionSpeculator` for this entry; conditions are captions
        such as "red circle at top left", :class:`~mmspec.zoo.shapes_t2i.Condition` objects or labels 0..107."""
        from ..modalities.diffusion import DiffusionSpeculator

        return DiffusionSpeculator((self.unet, self.scheduler), conditioner=lambda c: to_condition(c).label,
                                   null_condition=NULL_CLASS, cfg_scale=cfg_scale, **options)  # fmt: skip


def _load_shapes_ddpm(path: Path, dtype=torch.float32, device="cpu") -> ShapesDDPM:
    from diffusers import DDPMScheduler, UNet2DModel
    from transformers import ResNetForImageClassification

    path = require_weights(path, "shapes-ddpm", "unet")
    return ShapesDDPM(
        unet=load_model(UNet2DModel, path / "unet", dtype, device),
        scheduler=DDPMScheduler.from_pretrained(path / "scheduler", local_files_only=True),
        judge=load_model(ResNetForImageClassification, WEIGHTS / "shapes-t2i" / "judge", dtype, device, optional=True),
    )


def _train_entry(out_dir, **options):
    if "only" in options:
        raise ValueError(f"only: shapes-ddpm has one model (the UNet), got only={options['only']!r}")
    renamed = {"target_steps": "steps", "target_lr": "lr"}  # the CLI's --target-steps / --target-lr
    return train(out_dir, **{renamed.get(k, k): v for k, v in options.items()})


ZOO.register("shapes-ddpm")(ZooEntry("shapes-ddpm", _train_entry, _load_shapes_ddpm))
