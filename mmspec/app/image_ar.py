"""The image-AR tab: class-conditional generation with the shapes-t2i entry, plain AR sampling and a speculative
method side by side (same condition and seed), and the round at which each code was committed as a heat map."""

from __future__ import annotations

import json

from .base import APP_TABS, condition_picker, image_outputs, run_controls, wire, AppTab, parse_params, speed_summary, timed_pair, user_errors, verifier_defaults, zoo_models

ENTRY = "shapes-t2i"
# verifier arguments the speculator builds from its own VQ codebook (and the tab's init picker): not user parameters
BUILT_BY_THE_SPECULATOR = ("neighbours", "embeddings", "dist_threshold", "init")


def method_defaults(method: str) -> dict:
    """The parameters a method's verifier takes from the user (tables it builds itself are left out)."""
    from ..modalities.image_ar import IMAGE_AR_METHODS

    entry = IMAGE_AR_METHODS.get(method)
    if entry.verifier is None:
        return {}
    simple = {k: v for k, v in verifier_defaults(entry.verifier).items() if k not in BUILT_BY_THE_SPECULATOR}
    return {**simple, "neighbours_k": 16} if entry.verifier == "lantern" else simple


def commit_rounds(num_codes: int, accepted: list[int]) -> list[int]:
    """The round that committed each code (0: the target's prefill), for one row: round r commits its accepted
    drafts and one target token."""
    rounds = [0]
    for r, n in enumerate(accepted, start=1):
        rounds += [r] * (n + 1)
    return rounds[:num_codes]


def commit_heatmap(rounds: list[int], grid: tuple[int, int], title: str):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(3.6, 3.2), layout="constrained")
    im = ax.imshow(np.asarray(rounds, dtype=float).reshape(grid), cmap="viridis")
    ax.set_title(title, fontsize=8)
    ax.set_xticks([])
    ax.set_yticks([])
    fig.colorbar(im, ax=ax, label="round that committed the code")
    plt.close(fig)
    return fig


@user_errors
def run(condition: str, method: str, params: str, k: int, cfg_scale: float, temperature: float, seed: int,
        init: str = "random", model_dir: str = "", reps: int = 3, progress=None):  # fmt: skip
    """-> (plain image, speculative image, summary markdown, commit-round heat map)."""
    from ..modalities.image_ar import IMAGE_AR_METHODS

    entry = IMAGE_AR_METHODS.get(method)
    if entry.verifier is None:
        raise ValueError(f"method: expected a speculative method, got {method!r} (plain sampling runs beside it anyway)")
    step = progress or (lambda *a, **kw: None)
    step(0.05, desc="loading models")
    spec = zoo_models(ENTRY, model_dir or None).speculator(cfg_scale=float(cfg_scale))
    common = dict(temperature=float(temperature), seed=int(seed))
    extra = {"init": init} if entry.drafter == "jacobi" else {}
    params = parse_params(params, "method parameters")
    plain, out = timed_pair(lambda: spec.generate([condition], "plain", **common),
                            lambda: spec.generate([condition], method, num_draft_tokens=int(k), **common, **extra, **params),
                            reps, step)  # fmt: skip
    res = out.value
    accepted = [r.accepted[0] for r in res.stats.rounds]
    rounds = commit_rounds(res.codes.shape[1], accepted)
    from ..verifiers import VERIFIERS

    summary = speed_summary(plain, out, res.lossless, VERIFIERS.get(entry.verifier).bounds, "codes", res.stats)
    step(1.0, desc="done")
    return (plain.value.images[0].resize((128, 128), 0), res.images[0].resize((128, 128), 0), summary,
            commit_heatmap(rounds, spec.grid, f"{max(rounds)} rounds, {len(rounds)} codes"))  # fmt: skip


@APP_TABS.register("image-ar")
class ImageARTab(AppTab):
    title = "image AR: VQ-code generation"
    order = 30

    def build(self) -> None:
        import gradio as gr

        from ..modalities.image_ar import IMAGE_AR_METHODS

        methods = [n for n in IMAGE_AR_METHODS.names() if n != "plain"]
        with gr.Row():
            with gr.Column():
                condition = condition_picker("iar")
                method = gr.Dropdown(methods, value="mc-sjd", label="method", elem_id="iar-method")
                params = gr.Textbox(value="", label="method parameters (JSON)", visible=False, elem_id="iar-params")
                init = gr.Radio(["random", "repeat"], value="random", label="fresh Jacobi slots")
                with gr.Row():
                    k = gr.Slider(1, 63, value=16, step=1, label="draft length K (Jacobi window / drafts per round)")
                    cfg = gr.Slider(1.0, 4.0, value=2.0, step=0.25, label="CFG scale")
                temperature = gr.Slider(0.1, 1.5, value=1.0, step=0.05, label="temperature")
                seed, reps, model_dir, go = run_controls("iar", ENTRY, "generate")
            with gr.Column():
                outputs = image_outputs("iar", "plain AR", "when each code was committed")

        def show(name):
            d = method_defaults(name)
            return gr.update(visible=bool(d), value=json.dumps(d) if d else "")

        method.change(show, method, params)
        wire(go, run, [condition, method, params, k, cfg, temperature, seed, init, model_dir, reps], outputs, "image_ar")
