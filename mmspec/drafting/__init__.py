"""Shared drafting optimisations (usable by every modality's drafters): visual token compression, ..."""

from .compression import COMPRESSORS, visual_attention_scores

__all__ = ["COMPRESSORS", "visual_attention_scores"]
