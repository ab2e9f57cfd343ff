"""Helpers drafters share (never drafters themselves): visual token compression, KV sharing between draft and
verification passes, the learned query adaptor and the EAGLE head model."""

from .compression import COMPRESSORS, visual_attention_scores
from .eagle_head import EagleHead
from .kv_sharing import layer_visual_scores, sparse_kv_index, visual_mask
from .query_adaptor import QueryAdaptor

__all__ = ["COMPRESSORS", "EagleHead", "QueryAdaptor", "layer_visual_scores", "sparse_kv_index", "visual_attention_scores",
           "visual_mask"]  # fmt: skip
