"""Zoo entry ``shapes-video``: the clip world, tokenizer and processor (:mod:`.data`) and the recipe and loader of the
target, its drafters, query adaptor and EAGLE head (:mod:`.recipe`)."""

from .data import (DRAFTER_SIZES, ENTRY, EVENT_FRAMES, FRAME_SIZE, NUM_FRAMES, PATCH_SIZE, SPECIAL, TARGET_SIZES, Actor,
                   Clip, Event, Sizes, build_processor, build_tokenizer, caption_accuracy, caption_prompt, collate, example,
                   make_clip, question_prompt, text_config, video_config, video_prompt, vocabulary)
from .recipe import ShapesVideo, train

__all__ = [
    "DRAFTER_SIZES", "ENTRY", "EVENT_FRAMES", "FRAME_SIZE", "NUM_FRAMES", "PATCH_SIZE", "SPECIAL", "TARGET_SIZES", "Actor",
    "Clip", "Event", "ShapesVideo", "Sizes", "build_processor", "build_tokenizer", "caption_accuracy", "caption_prompt",
    "collate", "example", "make_clip", "question_prompt", "text_config", "train", "video_config", "video_prompt",
    "vocabulary",
]  # fmt: skip
