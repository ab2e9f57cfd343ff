"""What the token benches (``vlm``, ``video``) share: the drafter rows every VLM-shaped target gets, their Hugging
Face peers, the table and the report.

Rows, all decoding the same processor outputs:

- ``plain greedy``: ``target.generate(do_sample=False)``, the baseline every speedup is relative to;
- mmspec: the small drafter at several draft lengths K and as a token tree; the text-only drafter; the small drafter
  seeing a compressed image or clip (grid pooling, ToMe merging, two-stage attention pruning); STD sparse-to-dense
  self-drafting (top-k visual KV per layer); the EAGLE head when the entry ships one (chains, a static tree, a
  confidence-guided dynamic tree); prompt lookup (n-gram); early-exit self-speculation (own draft cache, and
  drafting in the target's cache with verification reusing the draft layers' KV); plus the bench's own rows;
- Hugging Face's peers with the same target and draft source: assisted generation
  (``generate(assistant_model=...)``) with a constant schedule and at HF's defaults (heuristic schedule, confidence
  threshold), and prompt lookup decoding (``prompt_lookup_num_tokens``). HF's own early exit
  (``assistant_early_exit``) does not support LLaVA-style classes, so early exit has no peer row.
"""

from __future__ import annotations

from .harness import TOKEN_COLUMNS, Column, Method, fmt, markdown_table
from .peers import Runners
from ..drafters import CompressedVLMDrafter, EarlyExitDrafter, ModelDrafter, NgramDrafter, STDDrafter
from ..drafters.eagle import EagleDrafter


def token_methods(r: Runners, models, *, label: str, visual: int, ks, k_mid: int, budget: int, std_keeps, eagle_ks,
                  early_exit_layers: int, compress: dict | None = None, tree=(2, 2, 1, 1), eagle_tree=(3, 3, 2, 2, 1, 1),
                  extra=(), peer_ks=None) -> list[Method]:  # fmt: skip
    """The rows of one bench. ``label``: the small drafter's name ("small-VLM"); ``visual``: visual tokens per input;
    ``budget``: what the compressed drafters keep; ``compress``: more compressor arguments; ``extra``: the bench's own
    mmspec rows; ``peer_ks``: HF assisted K values (default: ``ks``)."""
    target, small, text = models.target, models.drafter_vlm, models.drafter_text
    full = {"visual_tokens": "all"}
    methods = [Method("plain greedy (HF generate)", "ar", "none", True, r.hf())]
    methods += [r.spec(f"mmspec {label} K={k}", "small-vlm", ModelDrafter(small), {"K": k, **full}, num_draft_tokens=k)
                for k in ks]  # fmt: skip
    methods += [
        r.spec(f"mmspec {label} tree {tree}", "small-vlm", ModelDrafter(small), {"tree": list(tree), **full}, tree=tree),
        r.spec("mmspec text-only K=4", "text-only", ModelDrafter(text, text_only=True), {"K": 4, "visual_tokens": 0}),
        *[r.spec(f"mmspec {label} {c} {budget}/{visual} visual tokens K={k_mid}", "small-vlm",
                 CompressedVLMDrafter(small, c, budget, **(compress or {})),
                 {"K": k_mid, "compressor": c, "visual_tokens": budget}, num_draft_tokens=k_mid)
          for c in ("grid-pool", "merge", "two-stage")],
        *[r.spec(f"mmspec STD keep {keep} of {visual} visual KV K={k_mid}", "std", STDDrafter(target, keep=keep),
                 {"K": k_mid, "visual_tokens": keep}, num_draft_tokens=k_mid) for keep in std_keeps],
    ]  # fmt: skip
    if getattr(models, "eagle", None) is not None:
        head = models.eagle
        methods += [r.spec(f"mmspec EAGLE head K={k}", "eagle", EagleDrafter(target, head), {"K": k, **full},
                           num_draft_tokens=k) for k in eagle_ks]  # fmt: skip
        methods += [
            r.spec(f"mmspec EAGLE head tree {tree}", "eagle", EagleDrafter(target, head), {"tree": list(tree), **full},
                   tree=tree),
            r.spec(f"mmspec EAGLE head dynamic tree <= {eagle_tree}", "eagle",
                   EagleDrafter(target, head, "dynamic", threshold=0.2, max_nodes=12),
                   {"tree": list(eagle_tree), "dynamic": True, **full}, tree=eagle_tree),
        ]  # fmt: skip
    layers = {"K": 4, "layers": early_exit_layers, **full}
    methods += [
        r.spec("mmspec n-gram K=4", "ngram", NgramDrafter(), {"K": 4}),
        r.spec(f"mmspec early-exit {early_exit_layers} layers K=4", "early-exit", EarlyExitDrafter(target, early_exit_layers),
               layers),
        r.spec(f"mmspec early-exit {early_exit_layers} layers, shared KV K=4", "early-exit",
               EarlyExitDrafter(target, early_exit_layers, share_kv=True), {**layers, "share_kv": True}),
        *extra,
    ]  # fmt: skip
    return [*methods, *r.assisted(label, "small-vlm", small, peer_ks or ks), *r.assisted("text-only", "text-only", text, (4,)),
            r.prompt_lookup(4)]  # fmt: skip


def token_columns(visual: int) -> list[Column]:
    """The token table: the drafter's visual tokens, prefill (drafter set-up) and decode time besides the speedups."""

    def seen(r):
        v = r.params.get("visual_tokens")
        return "—" if v is None else f"{visual if v == 'all' else v}/{visual}"

    def prefill(r):
        extra = "" if r.draft_prefill_seconds_median is None else f" ({fmt(r.draft_prefill_seconds_median, '.0f', 1000)})"
        return fmt(r.prefill_seconds_median, ".0f", 1000) + extra

    return [TOKEN_COLUMNS[0], ("drafter visual tokens", seen), *TOKEN_COLUMNS[2:4], ("prefill ms (drafter)", prefill),
            ("decode ms", lambda r: fmt(r.decode_seconds_median, ".0f", 1000)), *TOKEN_COLUMNS[4:]]  # fmt: skip


def print_report(rows, meta, json_path=None) -> None:
    """The token bench's report on stdout (``json_path``: where the rows were written, if anywhere)."""
    batch = f", batch {meta['batch']}, {meta['frames_per_clip']} frames per clip" if "batch" in meta else ""
    print(f"\nmmspec bench {meta['benchmark']} — {meta['task']}, {meta['inputs']} inputs ({meta['visual_tokens']} visual "
          f"tokens each{batch}), {meta['reps']} interleaved repetitions, max_new_tokens={meta['max_new_tokens']}\n"
          f"machine: {meta['machine']}\n")  # fmt: skip
    if "caption_accuracy" in meta:
        print(f"plain decoding's exact-match caption accuracy on these inputs: {meta['caption_accuracy']:.0%}\n")
    print(markdown_table(rows, token_columns(meta["visual_tokens"])))
    for name, why in meta.get("skipped", {}).items():
        print(f"\nskipped {name}: not supported by the peer library here ({why})")
    if json_path:
        print(f"\nrows written to {json_path}")
