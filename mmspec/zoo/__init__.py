"""The zoo: small real models trained here by recipes on procedural data, saved as safetensors.

``load(name)`` returns the entry's models; ``ZOO.get(name).train(out_dir)`` rebuilds it from scratch.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from ..registry import Registry
from .integrity import WeightsIntegrityError, pretrained, verify

__all__ = ["ZOO", "WEIGHTS", "WeightsIntegrityError", "ZooEntry", "load"]

WEIGHTS = Path(__file__).parent / "weights"


@dataclass(frozen=True)
class ZooEntry:
    name: str
    train: Callable[..., dict]  # train(out_dir, **options) -> model card
    load: Callable[..., object]  # load(path, dtype, device) -> the entry's models

    @property
    def path(self) -> Path:
        return WEIGHTS / self.name


ZOO: Registry[ZooEntry] = Registry("zoo entry")


@dataclass
class ShapesVLM:
    target: object  # LlavaForConditionalGeneration
    processor: object  # LlavaProcessor
    drafter_vlm: object  # small LlavaForConditionalGeneration
    drafter_text: object  # LlamaForCausalLM (text-only)
    eagle: object | None = None  # mmspec.drafting.eagle_head.EagleHead on the target (None until trained)


def _load_shapes_vlm(path: Path, dtype=torch.float32, device="cpu") -> ShapesVLM:
    from transformers import AutoProcessor, LlamaForCausalLM, LlavaForConditionalGeneration

    path = Path(path)
    if not (path / "target" / "config.json").exists():
        raise FileNotFoundError(f"zoo entry shapes-vlm: no weights at {path}; run `mmspec zoo train shapes-vlm`")
    load = dict(dtype=dtype)
    return ShapesVLM(
        target=pretrained(LlavaForConditionalGeneration, path / "target", **load).to(device).eval(),
        processor=AutoProcessor.from_pretrained(path / "target", local_files_only=True),
        drafter_vlm=pretrained(LlavaForConditionalGeneration, path / "drafter-vlm", **load).to(device).eval(),
        drafter_text=pretrained(LlamaForCausalLM, path / "drafter-text", **load).to(device).eval(),
        eagle=_load_eagle(path, dtype, device),
    )


def _load_eagle(path: Path, dtype, device):
    if not (path / "eagle" / "config.json").exists():
        return None
    from ..drafting.eagle_head import EagleHead

    return pretrained(EagleHead, path / "eagle").to(device=device, dtype=dtype).eval()


def _train_shapes_vlm(out_dir, **options):
    from .shapes_vlm import train

    return train(out_dir, **options)


ZOO.register("shapes-vlm")(ZooEntry("shapes-vlm", _train_shapes_vlm, _load_shapes_vlm))


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

    path = Path(path)
    if not (path / "target" / "config.json").exists():
        raise FileNotFoundError(f"zoo entry shapes-video: no weights at {path}; run `mmspec zoo train shapes-video`")
    load = dict(dtype=dtype)
    eagle, adaptor, drafter_adaptor = _load_eagle(path, dtype, device), None, None
    drafter_vlm = pretrained(Qwen2VLForConditionalGeneration, path / "drafter-vlm", **load).to(device).eval()
    if (path / "adaptor" / "config.json").exists():
        from ..drafting.query_adaptor import QueryAdaptor

        adaptor = pretrained(QueryAdaptor, path / "adaptor").to(device=device, dtype=dtype).eval()
        drafter_adaptor = drafter_vlm  # trained on both views; an older layout kept a separate copy:
        if (path / "drafter-adaptor" / "config.json").exists():
            drafter_adaptor = pretrained(Qwen2VLForConditionalGeneration, path / "drafter-adaptor", **load).to(device).eval()
    return ShapesVideo(
        target=pretrained(Qwen2VLForConditionalGeneration, path / "target", **load).to(device).eval(),
        processor=AutoProcessor.from_pretrained(path / "target", local_files_only=True),
        drafter_vlm=drafter_vlm,
        drafter_text=pretrained(LlamaForCausalLM, path / "drafter-text", **load).to(device).eval(),
        adaptor=adaptor,
        drafter_adaptor=drafter_adaptor,
        eagle=eagle,
    )


def _train_shapes_video(out_dir, **options):
    from .shapes_video import train

    return train(out_dir, **options)


ZOO.register("shapes-video")(ZooEntry("shapes-video", _train_shapes_video, _load_shapes_video))


@dataclass
class ShapesVideoLong:
    target: object  # Qwen2VLForConditionalGeneration: the shapes-video target fine-tuned on 1-16x slowed-down clips
    processor: object  # Qwen2VLProcessor (the same as shapes-video's)


def _load_shapes_video_long(path: Path, dtype=torch.float32, device="cpu") -> ShapesVideoLong:
    from transformers import AutoProcessor, Qwen2VLForConditionalGeneration

    path = Path(path)
    if not (path / "target" / "config.json").exists():
        raise FileNotFoundError(f"zoo entry shapes-video-long: no weights at {path}; run "
                                "`mmspec zoo train shapes-video-long`")  # fmt: skip
    target = pretrained(Qwen2VLForConditionalGeneration, path / "target", dtype=dtype)
    return ShapesVideoLong(target=target.to(device).eval(),
                           processor=AutoProcessor.from_pretrained(path / "target", local_files_only=True))  # fmt: skip


def _train_shapes_video_long(out_dir, **options):
    from .shapes_video import train_long

    return train_long(out_dir, **{"base": WEIGHTS / "shapes-video", **options})


ZOO.register("shapes-video-long")(ZooEntry("shapes-video-long", _train_shapes_video_long, _load_shapes_video_long))


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
        from .shapes_t2i import CODEBOOK, GRID, condition_tokens, null_tokens, to_condition

        return ImageARSpeculator(self.target, self.vq, drafter=self.drafter, conditioner=lambda c: condition_tokens(to_condition(c)),
                                 null_prompt=null_tokens(), grid=(GRID, GRID), codebook_size=CODEBOOK, cfg_scale=cfg_scale)  # fmt: skip


def _load_shapes_t2i(path: Path, dtype=torch.float32, device="cpu") -> ShapesT2I:
    from diffusers import VQModel
    from transformers import LlamaForCausalLM, ResNetForImageClassification

    path = Path(path)
    if not (path / "target" / "config.json").exists():
        raise FileNotFoundError(f"zoo entry shapes-t2i: no weights at {path}; run `mmspec zoo train shapes-t2i`")
    load = dict(dtype=dtype)
    optional = {name: (path / name / "config.json").exists() for name in ("drafter", "judge")}
    return ShapesT2I(
        vq=pretrained(VQModel, path / "vq", torch_dtype=dtype).to(device).eval(),
        target=pretrained(LlamaForCausalLM, path / "target", **load).to(device).eval(),
        drafter=pretrained(LlamaForCausalLM, path / "drafter", **load).to(device).eval() if optional["drafter"] else None,
        judge=pretrained(ResNetForImageClassification, path / "judge", **load).to(device).eval() if optional["judge"] else None,
    )


def _train_shapes_t2i(out_dir, **options):
    from .shapes_t2i import train

    return train(out_dir, **options)


ZOO.register("shapes-t2i")(ZooEntry("shapes-t2i", _train_shapes_t2i, _load_shapes_t2i))


@dataclass
class ShapesDDPM:
    unet: object  # diffusers UNet2DModel, class-conditional (108 conditions + null id 108), v-prediction
    scheduler: object  # diffusers DDPMScheduler (fixed_small variance)
    judge: object | None  # the shapes-t2i ResNet judge (same conditions and renderer), None if that entry is missing

    def speculator(self, cfg_scale: float = 1.0, **options):
        """A :class:`~mmspec.modalities.diffusion.DiffusionSpeculator` for this entry; conditions are captions
        such as "red circle at top left", :class:`~mmspec.zoo.shapes_t2i.Condition` objects or labels 0..107."""
        from ..modalities.diffusion import DiffusionSpeculator
        from .shapes_ddpm import NULL_CLASS
        from .shapes_t2i import to_condition

        return DiffusionSpeculator((self.unet, self.scheduler), conditioner=lambda c: to_condition(c).label,
                                   null_condition=NULL_CLASS, cfg_scale=cfg_scale, **options)  # fmt: skip


def _load_shapes_ddpm(path: Path, dtype=torch.float32, device="cpu") -> ShapesDDPM:
    from diffusers import DDPMScheduler, UNet2DModel
    from transformers import ResNetForImageClassification

    path = Path(path)
    if not (path / "unet" / "config.json").exists():
        raise FileNotFoundError(f"zoo entry shapes-ddpm: no weights at {path}; run `mmspec zoo train shapes-ddpm`")
    judge_dir = WEIGHTS / "shapes-t2i" / "judge"
    judge = None
    if (judge_dir / "config.json").exists():
        judge = pretrained(ResNetForImageClassification, judge_dir, dtype=dtype).to(device).eval()
    return ShapesDDPM(
        unet=pretrained(UNet2DModel, path / "unet", torch_dtype=dtype).to(device).eval(),
        scheduler=DDPMScheduler.from_pretrained(path / "scheduler", local_files_only=True),
        judge=judge,
    )


def _train_shapes_ddpm(out_dir, **options):
    from .shapes_ddpm import train

    if "only" in options:
        raise ValueError(f"only: shapes-ddpm has one model (the UNet), got only={options['only']!r}")
    renamed = {"target_steps": "steps", "target_lr": "lr"}  # the CLI's --target-steps / --target-lr
    return train(out_dir, **{renamed.get(k, k): v for k, v in options.items()})


ZOO.register("shapes-ddpm")(ZooEntry("shapes-ddpm", _train_shapes_ddpm, _load_shapes_ddpm))


def load(name: str, dtype=torch.float32, device="cpu", *, path=None, verify_weights: bool = True):
    """Load a zoo entry's models (from ``path``, default: the bundled weights). ``verify_weights``: check every file
    against the sha256 its card records first (:mod:`mmspec.zoo.integrity`); False for entries retrained in place."""
    entry = ZOO.get(name)
    root = Path(path) if path is not None else entry.path
    if verify_weights:
        verify(root, name)
    return entry.load(root, dtype=dtype, device=device)
