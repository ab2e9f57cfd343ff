"""The video tab: caption or ask about a clip with the shapes-video entry (or a folder of the same layout), plain
decoding and a speculative method side by side (the VLM tab's comparison on a video)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from ..drafters import CompressedVLMDrafter, EagleDrafter, EarlyExitDrafter, ModelDrafter, NgramDrafter, STDDrafter
from .base import APP_TABS, run_controls, wire, AppTab, user_errors, zoo_models
from .vlm import _eagle, build_drafter, compare, example_controls, token_controls, token_tab_outputs

ENTRY = "shapes-video"


def _adaptor(m):
    if m.adaptor is None:
        raise ValueError("drafter: this model folder has no query adaptor (adaptor/); pick another drafter")
    return CompressedVLMDrafter(m.drafter_adaptor, m.adaptor, m.adaptor.num_queries)


DRAFTER_CHOICES = {
    "small video LM": lambda m: ModelDrafter(m.drafter_vlm),
    "small video LM, grid-pooled clip (16 of 64 visual tokens)": lambda m: CompressedVLMDrafter(m.drafter_vlm, "grid-pool", 16),
    "small video LM on the query adaptor (16 tokens from the target's features)": _adaptor,
    "text-only LM": lambda m: ModelDrafter(m.drafter_text, text_only=True),
    "EAGLE head": lambda m: EagleDrafter(m.target, _eagle(m)),
    "STD: target with 16 visual KV entries per layer": lambda m: STDDrafter(m.target, keep=16),
    "early exit (2 target layers)": lambda m: EarlyExitDrafter(m.target, 2),
    "prompt lookup (n-gram)": lambda m: NgramDrafter(),
}  # fmt: skip


def example_clip(index: int) -> tuple[str, str]:
    """A held-out clip written to a temporary .webm (VP8: what a browser's video player plays) and its caption."""
    from ..modalities.video import write_video
    from ..zoo.shapes_video import make_clip

    clip = make_clip(int(index), "test")
    path = Path(tempfile.mkdtemp(prefix="mmspec-clip-")) / f"clip-{int(index)}.webm"
    return str(write_video(clip.frames_array(), path, fps=4.0)), clip.caption()


@user_errors
def run(video, prompt: str, drafter: str, verifier: str, verifier_params: str, k: int, temperature: float, seed: int,
        max_new_tokens: int, num_frames: int = 8, model_dir: str = "", reps: int = 3, progress=None):  # fmt: skip
    """The video tab's button: see :func:`mmspec.app.vlm.compare` (``video``: a file path)."""
    from ..modalities.video import VideoSpeculator

    if not video:
        raise ValueError("video: expected a video file (upload one or pick an example clip), got none")
    step = progress or (lambda *a, **kw: None)
    step(0.05, desc="loading models")
    m = zoo_models(ENTRY, model_dir or None)
    spec = VideoSpeculator(m.target, m.processor, drafter=build_drafter(DRAFTER_CHOICES, drafter, m))
    return compare(spec, video, prompt, drafter, verifier, verifier_params, k, temperature, seed, max_new_tokens, reps,
                   step, num_frames=int(num_frames))  # fmt: skip


@APP_TABS.register("video")
class VideoTab(AppTab):
    title = "video LM: clip captioning / QA"
    order = 20

    def build(self) -> None:
        import gradio as gr

        with gr.Row():
            with gr.Column():
                video = gr.Video(label="video", elem_id="vid-video", height=192)
                index, load, truth = example_controls("vid", "clip")
                controls = token_controls("vid", DRAFTER_CHOICES, "small video LM")
                with gr.Row():
                    max_new = gr.Slider(4, 96, value=64, step=1, label="max new tokens")
                    frames = gr.Slider(2, 32, value=8, step=2, label="frames sampled from the clip")
                seed, reps, model_dir, go = run_controls("vid", ENTRY, "run")
            with gr.Column():
                outputs = token_tab_outputs("vid")
        load.click(user_errors(example_clip), index, [video, truth], api_name="video_example")
        wire(go, run, [video, *controls, seed, max_new, frames, model_dir, reps], outputs, "video")
