"""``mmspec app``: one Gradio app with a tab per modality (each tab is one module here, registered in APP_TABS)."""

from . import diffusion, image_ar, report, video, vlm  # noqa: F401  (register their tabs)
from .base import APP_TABS, AppTab
from .server import build_app, launch

__all__ = ["APP_TABS", "AppTab", "build_app", "launch"]
