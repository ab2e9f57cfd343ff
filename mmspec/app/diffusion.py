"""The diffusion tab: class-conditional sampling with the shapes-ddpm entry, the plain sampler and a speculative
method side by side (same condition, initial noise and seed), and the per-round accept/reject timeline."""

from __future__ import annotations

import json

from .base import APP_TABS, parse_params, condition_picker, image_outputs, run_controls, wire, AppTab, speed_summary, timed_pair, user_errors, zoo_models

ENTRY = "shapes-ddpm"
SAMPLERS = ("ddpm", "ddim", "euler-ancestral")


def method_defaults(method: str) -> dict:
    """A method's keyword parameters with their defaults (the drafted-steps one has its own slider)."""
    import inspect

    from ..modalities.diffusion import DIFFUSION_METHODS

    impl = DIFFUSION_METHODS.get(method)
    params = list(inspect.signature(impl.run).parameters.values())[3:]  # after self, ctx, x
    return {p.name: p.default for p in params if p.name in impl.params and p.name != impl.draft_length}


def timeline_figure(timeline: list[tuple[int, int, int, int]], steps: int, title: str):
    """Each speculative round as a bar over the steps it drafted: accepted part, then the rejected rest."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 2.4), layout="constrained")
    for i, (_, start, drafted, accepted) in enumerate(timeline):
        ax.barh(i, accepted, left=start, color="#2ca02c", height=0.8)
        ax.barh(i, drafted - accepted, left=start + accepted, color="#d62728", height=0.8)
    ax.set_xlim(0, steps)
    ax.invert_yaxis()
    ax.set_xlabel("sampler step (green: drafted steps accepted, red: rejected and resampled)")
    ax.set_ylabel("round")
    ax.set_title(title, fontsize=9)
    plt.close(fig)
    return fig


@user_errors
def run(condition: str, method: str, params: str, sampler: str, steps: int, k: int, eta: float, cfg_scale: float,
        seed: int, model_dir: str = "", reps: int = 3, progress=None):  # fmt: skip
    """-> (plain image, speculative image, summary markdown, accept/reject timeline)."""
    step = progress or (lambda *a, **kw: None)
    step(0.05, desc="loading models")
    spec = zoo_models(ENTRY, model_dir or None).speculator(cfg_scale=float(cfg_scale))
    common = dict(num_inference_steps=int(steps), sampler=sampler, seed=int(seed),
                  eta=float(eta) if sampler == "ddim" else None)  # fmt: skip
    from ..modalities.diffusion import DIFFUSION_METHODS

    drafts = {"num_draft_tokens": int(k)} if DIFFUSION_METHODS.get(method).draft_length else {}  # speca drafts none
    params = parse_params(params, "method parameters")
    plain, out = timed_pair(lambda: spec.generate([condition], method="plain", **common),
                            lambda: spec.generate([condition], method=method, **drafts, **common, **params), reps, step)
    res = out.value
    from ..verifiers import VERIFIERS

    bounds = {"paradigms": "each committed step changed by at most tolerance x sigma (Picard convergence)",
              "speca": VERIFIERS.get("forecast-gating").bounds}.get(method, "")  # the lossy methods  # fmt: skip
    summary = speed_summary(plain, out, res.lossless, bounds, "steps", res.stats)
    figure = timeline_figure(res.stats.timeline, res.stats.steps, f"{method}: {res.stats.rounds} target calls for "
                             f"{res.stats.steps} steps") if res.stats.timeline else None  # fmt: skip
    step(1.0, desc="done")
    return plain.value.images[0].resize((128, 128), 0), res.images[0].resize((128, 128), 0), summary, figure


@APP_TABS.register("diffusion")
class DiffusionTab(AppTab):
    title = "diffusion: speculative sampling"
    order = 40

    def build(self) -> None:
        import gradio as gr

        from ..modalities.diffusion import DIFFUSION_METHODS

        with gr.Row():
            with gr.Column():
                condition = condition_picker("dif")
                method = gr.Dropdown([n for n in DIFFUSION_METHODS.names() if n != "plain"], value="asd", label="method",
                                     elem_id="dif-method")  # fmt: skip
                params = gr.Textbox(value=json.dumps(method_defaults("asd")), label="method parameters (JSON)",
                                    elem_id="dif-params")  # fmt: skip
                sampler = gr.Dropdown(list(SAMPLERS), value="ddpm", label="sampler", elem_id="dif-sampler")
                eta = gr.Slider(0.0, 1.0, value=1.0, step=0.05, label="DDIM eta", visible=False)
                with gr.Row():
                    steps = gr.Slider(2, 200, value=50, step=1, label="sampler steps")
                    k = gr.Slider(1, 16, value=4, step=1, label="drafted steps per round (lookahead / window)")
                cfg = gr.Slider(1.0, 4.0, value=1.0, step=0.25, label="CFG scale")
                seed, reps, model_dir, go = run_controls("dif", ENTRY, "sample")
            with gr.Column():
                outputs = image_outputs("dif", "plain sampler", "accept / reject per round")
        sampler.change(lambda s: gr.update(visible=s == "ddim"), sampler, eta)
        method.change(lambda m: json.dumps(method_defaults(m)), method, params)
        wire(go, run, [condition, method, params, sampler, steps, k, eta, cfg, seed, model_dir, reps], outputs, "diffusion")
