"""The VLM tab: caption or ask about an image with the shapes-VLM entry (or a folder of the same layout), plain
decoding and a speculative method side by side on the same input and seed."""

from __future__ import annotations

from ..drafters import CompressedVLMDrafter, EagleDrafter, EarlyExitDrafter, ModelDrafter, NgramDrafter, STDDrafter
from .base import (APP_TABS, run_controls, wire, AppTab, accepted_plot, parse_params, round_segments, speed_summary, timed_pair, user_errors,
                   verifier_choices, verifier_defaults, zoo_models)

ENTRY = "shapes-vlm"
# drafter name -> what builds it from the entry's models (the picker's choices, in this order)
DRAFTER_CHOICES = {
    "small VLM": lambda m: ModelDrafter(m.drafter_vlm),
    "small VLM, grid-pooled image (4 of 9 visual tokens)": lambda m: CompressedVLMDrafter(m.drafter_vlm, "grid-pool", 4,
                                                                                           grid=(3, 3)),
    "text-only LM": lambda m: ModelDrafter(m.drafter_text, text_only=True),
    "EAGLE head": lambda m: EagleDrafter(m.target, _eagle(m)),
    "STD: target with 4 visual KV entries per layer": lambda m: STDDrafter(m.target, keep=4),
    "early exit (4 target layers)": lambda m: EarlyExitDrafter(m.target, 4),
    "prompt lookup (n-gram)": lambda m: NgramDrafter(),
}  # fmt: skip


def _eagle(models):
    if models.eagle is None:
        raise ValueError("drafter: this model folder has no EAGLE head (eagle/); pick another drafter")
    return models.eagle


def example_scene(index: int):
    """A held-out scene (PIL image) and its true caption."""
    from ..zoo.shapes import make_scene
    from ..zoo.shapes_vlm import IMAGE_SIZE

    scene = make_scene(int(index), "test")
    return scene.render(IMAGE_SIZE), scene.caption()


def compare(spec, media, prompt: str, drafter: str, verifier: str, verifier_params: str, k: int, temperature: float,
            seed: int, max_new_tokens: int, reps: int, step, **prepare) -> tuple:  # fmt: skip
    """Plain decoding (the target's own ``generate``) and ``spec`` on one (media, prompt), same seed: -> (plain text,
    speculative text coloured by round, summary markdown, accepted-per-round figure). Shared by the image and the
    video tab."""
    import torch

    from ..verifiers import VERIFIERS

    if not prompt or not prompt.strip():
        raise ValueError("prompt: expected a question or 'caption :', got an empty prompt")
    params = parse_params(verifier_params, "verifier parameters")
    target, tok = spec.target, spec.processor.tokenizer
    enc = spec.prepare(media, prompt.strip(), **prepare)

    def plain_run():
        torch.manual_seed(int(seed))  # the same seed on every repetition
        return target.generate(**enc, do_sample=temperature > 0, temperature=float(temperature) or None,
                               max_new_tokens=int(max_new_tokens))  # fmt: skip

    def spec_run():
        return spec.generate(media, prompt.strip(), max_new_tokens=int(max_new_tokens), num_draft_tokens=int(k),
                             verifier=verifier, verifier_params=params, temperature=float(temperature), seed=int(seed),
                             **prepare)  # fmt: skip

    plain, out = timed_pair(plain_run, spec_run, reps, step)
    plain_text = tok.decode(plain.value[0, enc["input_ids"].shape[1] :], skip_special_tokens=True).strip()
    res = out.value
    tokens = [t for t in res.new_tokens[0].tolist() if t != tok.pad_token_id]
    accepted = [r.accepted[0] for r in res.stats.rounds]
    segments = round_segments(tokens, accepted, lambda ids: tok.decode(ids, skip_special_tokens=True))
    cls = VERIFIERS.get(verifier)
    summary = speed_summary(plain, out, cls.lossless, cls.bounds, "tokens", res.stats)
    figure = accepted_plot(accepted, [r.draft_len for r in res.stats.rounds], f"{drafter} + {verifier}, K={k}")
    step(1.0, desc="done")
    return plain_text, segments, summary, figure


def build_drafter(choices: dict, name: str, models):
    if name not in choices:
        raise ValueError(f"drafter: expected one of {list(choices)}, got {name!r}")
    return choices[name](models)


@user_errors
def run(image, prompt: str, drafter: str, verifier: str, verifier_params: str, k: int, temperature: float, seed: int,
        max_new_tokens: int, model_dir: str = "", reps: int = 3, progress=None):  # fmt: skip
    """The VLM tab's button: see :func:`compare`."""
    from ..modalities.vlm import VLMSpeculator

    if image is None:
        raise ValueError("image: expected an image (upload one or pick an example scene), got none")
    step = progress or (lambda *a, **kw: None)
    step(0.05, desc="loading models")
    m = zoo_models(ENTRY, model_dir or None)
    spec = VLMSpeculator(m.target, m.processor, drafter=build_drafter(DRAFTER_CHOICES, drafter, m))
    return compare(spec, image, prompt, drafter, verifier, verifier_params, k, temperature, seed, max_new_tokens, reps,
                   step)  # fmt: skip


def show_verifier_params(name: str):
    """The parameter box for a picked verifier: shown with its defaults when it has parameters, hidden otherwise."""
    import json

    import gradio as gr

    defaults = verifier_defaults(name)
    return gr.update(visible=bool(defaults), value=json.dumps(defaults) if defaults else "")


def token_tab_outputs(prefix: str) -> list:
    """The output column of a token tab: plain text, speculative text coloured by round, summary, accepted plot."""
    import gradio as gr

    return [
        gr.Textbox(label="plain decoding", interactive=False, elem_id=f"{prefix}-plain"),
        gr.HighlightedText(label="speculative decoding (blue: accepted drafts, grey: target tokens)",
                           color_map={"draft": "#1f77b4", "target": "#bbbbbb"}, combine_adjacent=False,
                           elem_id=f"{prefix}-spec"),
        gr.Markdown(elem_id=f"{prefix}-summary"),
        gr.Plot(label="accepted drafts per round", elem_id=f"{prefix}-plot"),
    ]  # fmt: skip


def example_controls(prefix: str, what: str) -> tuple:
    """An example picker for a token tab: (held-out index, load button, the example's true caption)."""
    import gradio as gr

    with gr.Row():
        index = gr.Number(value=0, precision=0, label=f"example {what} (held-out index)", elem_id=f"{prefix}-index")
        load = gr.Button(f"load example {what}", elem_id=f"{prefix}-load")
    return index, load, gr.Textbox(label="true caption of the example", interactive=False, elem_id=f"{prefix}-truth")


def token_controls(prefix: str, drafters: dict, default_drafter: str) -> list:
    """A token tab's method inputs: prompt, drafter, verifier (its parameters shown when it has any), draft length,
    temperature."""
    import gradio as gr

    prompt = gr.Textbox(value="caption :", label="prompt", elem_id=f"{prefix}-prompt")
    drafter = gr.Dropdown(list(drafters), value=default_drafter, label="drafter", elem_id=f"{prefix}-drafter")
    verifier = gr.Dropdown(verifier_choices(), value="greedy", label="verifier", elem_id=f"{prefix}-verifier")
    params = gr.Textbox(value="", label="verifier parameters (JSON)", visible=False, elem_id=f"{prefix}-params")
    verifier.change(show_verifier_params, verifier, params)
    with gr.Row():
        k = gr.Slider(1, 8, value=5, step=1, label="draft length K", elem_id=f"{prefix}-k")
        temperature = gr.Slider(0.0, 1.5, value=0.0, step=0.05, label="temperature (0 = greedy)")
    return [prompt, drafter, verifier, params, k, temperature]


@APP_TABS.register("vlm")
class VLMTab(AppTab):
    title = "VLM: image captioning / QA"
    order = 10

    def build(self) -> None:
        import gradio as gr

        with gr.Row():
            with gr.Column():
                image = gr.Image(type="pil", label="image", elem_id="vlm-image", height=192)
                scene, load, truth = example_controls("vlm", "scene")
                controls = token_controls("vlm", DRAFTER_CHOICES, "small VLM")
                max_new = gr.Slider(4, 64, value=48, step=1, label="max new tokens")
                seed, reps, model_dir, go = run_controls("vlm", ENTRY, "run")
            with gr.Column():
                outputs = token_tab_outputs("vlm")
        load.click(user_errors(example_scene), scene, [image, truth], api_name="vlm_example")
        wire(go, run, [image, *controls, seed, max_new, model_dir, reps], outputs, "vlm")
