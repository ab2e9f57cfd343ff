"""Build the Blocks app from the registered tabs and serve it on this machine."""

from __future__ import annotations

from .base import APP_TABS

INTRO = ("**mmspec**: speculative decoding for multimodal generation. Each tab runs plain decoding and a speculative "
         "method on the same input and seed, side by side, and shows where the speedup came from.")  # fmt: skip


def build_app(tabs: list[str] | None = None):
    """A ``gr.Blocks`` with one tab per registered modality (``tabs``: only these names, in registry order)."""
    try:
        import gradio as gr
    except ImportError:
        raise ImportError("gradio: the app needs it; install it with pip install 'mmspec[app]'") from None

    names = tabs or APP_TABS.names()
    unknown = [n for n in names if n not in APP_TABS]
    if unknown:
        raise ValueError(f"tabs: expected names among {APP_TABS.names()}, got {unknown}")
    ordered = sorted((APP_TABS.get(n)() for n in names), key=lambda t: (t.order, t.title))
    with gr.Blocks(title="mmspec") as app:
        gr.Markdown(INTRO)
        for tab in ordered:
            with gr.Tab(tab.title):
                tab.build()
    return app


def launch(host: str = "127.0.0.1", port: int = 7860, tabs: list[str] | None = None, block: bool = True):
    """Serve the app (queued: long runs stream progress); returns the Blocks when ``block`` is False."""
    app = build_app(tabs)
    app.queue().launch(server_name=host, server_port=port, prevent_thread_lock=not block, show_error=False,
                       inbrowser=False)  # fmt: skip
    return app
