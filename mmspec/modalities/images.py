"""Image tensors <-> PIL, shared by the image-generating modalities (image AR, diffusion)."""

from __future__ import annotations

import torch
from PIL import Image


def to_pil(images: torch.Tensor) -> list[Image.Image]:
    """float [B, C, H, W] in [-1, 1] (C = 1 or 3) -> PIL images (grayscale or RGB)."""
    arr = ((images.detach().float().clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8).permute(0, 2, 3, 1).cpu().numpy()
    return [Image.fromarray(a[..., 0] if a.shape[-1] == 1 else a) for a in arr]
