"""Video modality adapter: a clip (frames or a video file) + prompt -> text, through the model's own processor.

>>> spec = VideoSpeculator(target, processor, drafter=STDDrafter(target, keep=16))
>>> out = spec.generate("clip.mp4", "what happens first ?", num_frames=8, max_new_tokens=32)
>>> out.texts[0], out.stats.mean_accepted_tokens, out.stats.prefill_seconds

Clips are given as a video file path (read with OpenCV), an array ``[T, H, W, 3]`` of uint8 RGB frames, or a list
of PIL images / ``[H, W, 3]`` arrays. ``num_frames`` samples that many frames uniformly over the clip (first and last
included). Works with Hugging Face video-capable classes that take ``videos=`` in their processor and
``pixel_values_videos`` in the model: Qwen2-VL (M-RoPE, video_grid_thw) and LLaVA-OneVision are tested.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

from ..checks import check_int
from .vlm import VLMOutput, VLMSpeculator, _as_list, model_inputs, on_target, pair_prompts


def sample_indices(total: int, num_frames: int | None) -> np.ndarray:
    """``num_frames`` indices spread uniformly over ``total`` frames (first and last included); all when None."""
    if num_frames is None:
        return np.arange(total)
    check_int("num_frames", num_frames, 1, note=" or None (every frame)")
    if num_frames > total:
        raise ValueError(f"num_frames: the clip has {total} frames, fewer than the {num_frames} asked for; pass "
                         f"num_frames <= {total} or None (every frame)")  # fmt: skip
    return np.linspace(0, total - 1, num_frames).round().astype(int)


def read_video(path: str | Path, num_frames: int | None = None) -> np.ndarray:
    """Decode a video file with OpenCV -> RGB uint8 frames [T, H, W, 3] (``num_frames`` sampled uniformly)."""
    import cv2

    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"video: expected a video file, got the directory {str(path)!r}")
    if not path.is_file():
        raise FileNotFoundError(f"video: no such file {str(path)!r}")
    cap = cv2.VideoCapture(str(path))
    try:
        frames = []
        while True:
            ok, frame = cap.read()  # BGR
            if not ok:
                break
            frames.append(frame)
    finally:
        cap.release()
    if not frames:
        raise ValueError(f"video: OpenCV could not decode any frame from {str(path)!r}")
    keep = sample_indices(len(frames), num_frames)
    return np.stack([cv2.cvtColor(frames[i], cv2.COLOR_BGR2RGB) for i in keep])


def write_video(frames, path: str | Path, fps: float = 4.0) -> Path:
    """Write RGB frames to a video file with OpenCV (``.avi``: MJPG, ``.mp4``: mp4v, ``.webm``: VP8 — the one browsers
    play). Returns the path.

    Written to a temporary name first and renamed at the end, so a failure leaves no half-written file.
    """
    import cv2

    array = load_frames(frames)
    path = Path(path)
    codecs = {".avi": "MJPG", ".mp4": "mp4v", ".webm": "VP80"}
    if path.suffix.lower() not in codecs:
        raise ValueError(f"path: expected a .avi, .mp4 or .webm file name, got {str(path)!r}")
    tmp = path.with_name(f".{path.stem}.partial{path.suffix}")
    h, w = array.shape[1:3]
    writer = cv2.VideoWriter(str(tmp), cv2.VideoWriter_fourcc(*codecs[path.suffix.lower()]), fps, (w, h))
    try:
        if not writer.isOpened():
            raise RuntimeError(f"path: OpenCV cannot open a {codecs[path.suffix.lower()]} writer for {str(path)!r}")
        for frame in array:
            writer.write(cv2.cvtColor(frame, cv2.COLOR_RGB2BGR))
    except BaseException:
        writer.release()
        tmp.unlink(missing_ok=True)
        raise
    writer.release()
    tmp.replace(path)
    return path


def load_frames(video, num_frames: int | None = None) -> np.ndarray:
    """A clip as RGB uint8 frames [T, H, W, 3]: from a file path, an array [T, H, W, 3] or a list of frames."""
    if isinstance(video, (str, Path)):
        return read_video(video, num_frames)
    if isinstance(video, np.ndarray):
        array = video
    elif isinstance(video, (list, tuple)) and video:
        if all(isinstance(f, Image.Image) for f in video):
            sizes = sorted({f.size for f in video})
            if len(sizes) != 1:
                raise ValueError(f"video: expected frames of one size, got PIL images of sizes (w, h) {sizes}")
            array = np.stack([np.asarray(f.convert("RGB")) for f in video])
        elif all(isinstance(f, np.ndarray) for f in video):
            shapes = {f.shape for f in video}
            if len(shapes) != 1:
                raise ValueError(f"video: expected frames of one shape, got {sorted(shapes)}")
            array = np.stack(video)
        else:
            kinds = sorted({type(f).__name__ for f in video})
            raise TypeError(f"video: expected a list of PIL images or of [H, W, 3] arrays, got a list of {kinds}")
    else:
        got = "an empty list" if isinstance(video, (list, tuple)) else type(video).__name__
        raise TypeError(f"video: expected a file path, a uint8 array [T, H, W, 3] or a list of frames, got {got}")
    if array.ndim != 4 or array.shape[-1] != 3 or array.dtype != np.uint8 or array.shape[0] < 1:
        raise ValueError(f"video: expected uint8 RGB frames [T, H, W, 3], got {array.dtype} array of shape {array.shape}")
    return array[sample_indices(array.shape[0], num_frames)]


def _is_clip(value) -> bool:
    if isinstance(value, (str, Path)):
        return True
    if isinstance(value, np.ndarray):
        return value.ndim == 4
    return isinstance(value, (list, tuple)) and bool(value) and isinstance(value[0], (Image.Image, np.ndarray)) and not (
        isinstance(value[0], np.ndarray) and value[0].ndim == 4
    )


class VideoSpeculator(VLMSpeculator):
    """Speculative decoding for video-text-to-text models (Qwen2-VL, LLaVA-OneVision and other HF classes)."""

    def __init__(self, target, processor, drafter, verifier: str | None = None, num_draft_tokens: int = 4,
                 num_frames: int | None = None, **config_kwargs):  # fmt: skip
        if getattr(processor, "video_processor", None) is None or not getattr(processor, "video_token", None):
            raise ValueError(f"processor: expected a video-capable processor (with a video_processor and a video "
                             f"token), got {type(processor).__name__}")  # fmt: skip
        super().__init__(target, processor, drafter, verifier, num_draft_tokens, **config_kwargs)
        self.num_frames = num_frames
        tok = processor.tokenizer
        start, end = getattr(tok, "vision_start_token", None), getattr(tok, "vision_end_token", None)
        token = processor.video_token
        self.video_placeholder = f"{start}{token}{end}" if start and end else token

    def prepare(self, videos, prompts, num_frames: int | None = None) -> dict:
        """Processor inputs for a batch: one clip per prompt; prompts get the video placeholder if missing."""
        clips = [videos] if _is_clip(videos) else _as_list(videos, "video", object, "a clip")
        clips = [load_frames(c, num_frames or self.num_frames) for c in clips]
        prompts = pair_prompts(clips, prompts, "video", "clip")
        token = self.processor.video_token
        prompts = [p if token in p else f"{self.video_placeholder} {p}" for p in prompts]
        enc = self.processor(videos=clips, text=prompts, padding=True, return_tensors="pt")
        return on_target(self.target, model_inputs(self.target, enc))

    def generate(self, video, prompt, *, num_frames: int | None = None, max_new_tokens: int = 32, generator=None,
                 drafter=None, **overrides) -> VLMOutput:  # fmt: skip
        """Caption / answer: ``video`` a clip (path, frames array or list of frames) or a list of clips; the other
        arguments as :meth:`VLMSpeculator.generate`."""
        return self._decode(self.prepare(video, prompt, num_frames), max_new_tokens, generator, overrides, drafter)
