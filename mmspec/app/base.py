"""What every tab of ``mmspec app`` shares: the tab registry, lazily loaded models, the error boundary that turns the
library's own errors into ``gr.Error`` messages, and the "where did the speedup come from" views (tokens coloured
by round, accepted length per round).

The functions here take and return plain Python / PIL / matplotlib objects, so they are tested without a browser;
only :meth:`AppTab.build` touches Gradio components.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable

from ..registry import Registry

APP_TABS: Registry[type["AppTab"]] = Registry("app tab")

# errors a user can cause with bad input: the library raises them with a message naming the argument
USER_ERRORS = (ValueError, TypeError, KeyError, FileNotFoundError, IsADirectoryError, OSError)


class AppTab:
    """One modality's tab: ``title`` and ``build()`` (called inside ``gr.Tab(title)`` of the app's Blocks)."""

    title: str = ""
    order: int = 100  # tabs are laid out by this, then by title

    def build(self) -> None:
        raise NotImplementedError  # abstract


def wire(button, fn: Callable, inputs: list, outputs: list, api_name: str) -> None:
    """``button`` runs ``fn(*inputs, progress=...)`` with Gradio's progress bar, filling ``outputs``; the same call is
    the app's API endpoint ``/{api_name}`` (``gradio_client``)."""
    import gradio as gr

    def handler(*args, progress=gr.Progress()):
        return fn(*args, progress=progress)

    button.click(handler, inputs, outputs, api_name=api_name)


def image_outputs(prefix: str, plain_label: str, plot_label: str) -> list:
    """The output column of an image tab: plain and speculative images side by side, the summary, a plot."""
    import gradio as gr

    with gr.Row():
        images = [gr.Image(label=plain_label, elem_id=f"{prefix}-plain"), gr.Image(label="speculative", elem_id=f"{prefix}-spec")]
    return [*images, gr.Markdown(elem_id=f"{prefix}-summary"), gr.Plot(label=plot_label, elem_id=f"{prefix}-plot")]


def run_controls(prefix: str, entry: str, action: str) -> tuple:
    """The end of every tab's input column: the seed, the timed repetitions, the model directory field and the run
    button."""
    import gradio as gr

    with gr.Row():
        seed = gr.Number(value=0, precision=0, label="seed", elem_id=f"{prefix}-seed")
        reps = gr.Slider(1, 10, value=3, step=1, label="timed repetitions (medians)", elem_id=f"{prefix}-reps")
    model_dir = gr.Textbox(value="", label=f"model directory (a {entry} folder; empty: the bundled one)")
    return seed, reps, model_dir, gr.Button(f"{action} plain and speculative", variant="primary", elem_id=f"{prefix}-run")


def condition_picker(prefix: str):
    """The shapes-t2i conditions (shared by the image-AR and diffusion entries) as a dropdown."""
    import gradio as gr

    from ..zoo.shapes_t2i import ALL_CONDITIONS

    captions = [c.caption() for c in ALL_CONDITIONS]
    return gr.Dropdown(captions, value=captions[0], label="condition", elem_id=f"{prefix}-condition")


def user_errors(fn: Callable) -> Callable:
    """Run an event handler; a bad input surfaces as ``gr.Error`` with the library's own message (never a traceback)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        import gradio as gr

        try:
            return fn(*args, **kwargs)
        except gr.Error:
            raise
        except USER_ERRORS as e:
            message = e.args[0] if isinstance(e, KeyError) and e.args else str(e)
            raise gr.Error(f"{type(e).__name__}: {message}") from None

    return wrapper


@functools.lru_cache(maxsize=4)
def zoo_models(entry: str, path: str | None = None):
    """A zoo entry's models, loaded once per (entry, folder); ``path``: a user's folder of the same layout."""
    from .. import zoo

    if path:
        from pathlib import Path

        if not Path(path).is_dir():
            raise FileNotFoundError(f"model directory: no such folder {path!r}")
    return zoo.load(entry, path=path or None, verify_weights=not path)


@dataclass
class Timed:
    value: object  # the warm-up call's output (every call returns the same: same input and seed)
    seconds: float  # median over the timed repetitions
    reps: int


def timed_pair(plain: Callable[[], object], spec: Callable[[], object], reps: int, step=None) -> tuple[Timed, Timed]:
    """Plain and speculative, each warmed up once, then timed over ``reps`` interleaved repetitions: medians (no
    speed the app prints comes from a single run)."""
    import statistics

    from ..timing import interleave

    if step is not None:
        step(0.2, desc=f"plain and speculative: a warm-up, then {int(reps)} interleaved timed repetitions")
    seconds, outputs = interleave({"plain": plain, "spec": spec}, int(reps))
    return tuple(Timed(outputs[n][0], statistics.median(seconds[n]), int(reps)) for n in ("plain", "spec"))


def round_segments(tokens: list[int], accepted: list[int], decode: Callable[[list[int]], str]) -> list[tuple[str, str]]:
    """The generated text split by who produced it, for ``gr.HighlightedText``: [(text, "target" | "draft"), ...].

    ``tokens``: one row's new tokens (padding removed); ``accepted``: that row's accepted drafts per round. The first
    token comes from the target's prefill; each round then commits its accepted drafts and one target token (the
    correction, or the bonus after a fully accepted draft)."""
    spans, i = [(0, 1, "target")], 1
    for n in accepted:
        spans += [(i, i + n, "draft"), (i + n, i + n + 1, "target")]
        i += n + 1
    pieces = [(decode(tokens[start:end]), who) for start, end, who in spans if start < min(end, len(tokens))]
    return [(text, who) for text, who in pieces if text]  # (EOS alone decodes to nothing)


def accepted_plot(accepted: list[int], k: list[int], title: str):
    """Bar chart of accepted drafts per round against the drafted length K (a matplotlib figure)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 2.6), layout="constrained")
    rounds = list(range(1, len(accepted) + 1))
    ax.bar(rounds, k, color="#dddddd", label="drafted (K)")
    ax.bar(rounds, accepted, color="#1f77b4", label="accepted")
    ax.set_xlabel("verification round")
    ax.set_ylabel("tokens")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    plt.close(fig)
    return fig


def speed_summary(plain: Timed, spec: Timed, lossless: bool, bounds: str, units: str, stats) -> str:
    """The Markdown verdict next to the two outputs: times, speedup, mean accepted units, lossless flag."""
    flag = "lossless (the output law is the target's)" if lossless else f"**lossy** — bounds: {bounds}"
    return (f"plain **{plain.seconds:.2f} s**, speculative **{spec.seconds:.2f} s**: **{plain.seconds / spec.seconds:.2f}x** "
            f"(medians of {spec.reps} interleaved runs after a warm-up, this machine)  \n"
            f"mean accepted {units} per target call: **{stats.mean_accepted_tokens:.2f}**, target calls "
            f"{stats.target_forwards}, rounds {stats.num_rounds}  \n{flag}")  # fmt: skip


def verifier_choices(domains: tuple[str, ...] = ("token",)) -> list[str]:
    """Registered verifiers of these domains (the test-only ones left out), for a picker."""
    from ..verifiers import VERIFIERS

    return [n for n in VERIFIERS.names() if VERIFIERS.get(n).domain in domains and not n.startswith("test-")]


def verifier_defaults(name: str) -> dict:
    """A verifier's keyword parameters with their defaults: what the parameter box shows when it is picked."""
    import inspect

    from ..verifiers import VERIFIERS

    params = list(inspect.signature(VERIFIERS.get(name).__init__).parameters.values())[1:]
    return {p.name: p.default for p in params if p.default is not inspect.Parameter.empty}


def parse_params(text: str, what: str) -> dict:
    """A JSON object typed by the user into a parameter box ('' = none)."""
    import json

    if not text or not text.strip():
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{what}: expected a JSON object such as {{\"beta\": 0.1}}, got {text!r} ({e.msg})") from None
    if not isinstance(value, dict):
        raise ValueError(f"{what}: expected a JSON object such as {{\"beta\": 0.1}}, got {text!r}")
    return value
