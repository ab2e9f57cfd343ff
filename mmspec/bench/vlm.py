"""``mmspec bench vlm``: the bundled shapes-VLM pair, greedy captioning of held-out scenes.

Methods, all decoding the same processor outputs (batch 1, as Spec-Bench):

- ``plain greedy``: ``target.generate(do_sample=False)``, the baseline every speedup is relative to;
- mmspec: the small-VLM drafter at several draft lengths K, a token tree, HF's +2/-1 length heuristic, the
  text-only drafter, the small-VLM drafter seeing a compressed image (4 of 9 visual tokens: grid pooling, ToMe
  merging, two-stage attention pruning), STD sparse-to-dense self-drafting (4 of 9 visual KV entries per layer),
  the EAGLE head (when the entry ships one), prompt lookup (n-gram) and early-exit self-speculation (own draft
  cache, and shared KV);
- Hugging Face's peers with the same target and draft source: assisted generation
  (``generate(assistant_model=...)``) at each K with a constant schedule and at HF's defaults (heuristic
  schedule, confidence threshold), and prompt lookup decoding (``prompt_lookup_num_tokens``). HF's own early
  exit (``assistant_early_exit``) does not support LLaVA classes, so early exit has no peer row.
"""

from __future__ import annotations


import torch

from .harness import Method, machine_description, markdown_table, run_interleaved, save_json, save_plot, summarise
from ..drafters import CompressedVLMDrafter, EarlyExitDrafter, ModelDrafter, NgramDrafter, STDDrafter
from ..drafters.eagle import EagleDrafter
from .peers import Runners


def vlm_methods(models, max_new_tokens: int, ks=(2, 3, 4, 5, 6, 8), tree=(2, 2, 1, 1), early_exit_layers: int = 4,
                compressors=("grid-pool", "merge", "two-stage")):  # fmt: skip
    target = models.target
    r = Runners(target, models.processor, max_new_tokens)
    hf, hf_assisted, mm = r.hf, r.hf_assisted, r.mm

    small, text = models.drafter_vlm, models.drafter_text
    methods = [Method("plain greedy (HF generate)", "ar", "none", True, hf())]
    for k in ks:
        methods.append(Method(f"mmspec small-VLM K={k}", "mmspec", "small-vlm", True,
                              mm(ModelDrafter(small), num_draft_tokens=k), {"K": k}))  # fmt: skip
    methods += [
        Method(f"mmspec small-VLM tree {tree}", "mmspec", "small-vlm", True, mm(ModelDrafter(small), tree=tree),
               {"tree": list(tree)}),
        Method("mmspec small-VLM heuristic K0=4", "mmspec", "small-vlm", True,
               mm(ModelDrafter(small), num_draft_tokens=4, draft_length_policy="heuristic"), {"policy": "heuristic"}),
        Method("mmspec text-only K=4", "mmspec", "text-only", True, mm(ModelDrafter(text, text_only=True)), {"K": 4}),
        *[Method(f"mmspec small-VLM {c} 4/9 visual tokens K=5", "mmspec", "small-vlm", True,
                 mm(CompressedVLMDrafter(small, c, 4, grid=(3, 3)), num_draft_tokens=5),
                 {"K": 5, "compressor": c, "visual_tokens": 4}) for c in compressors],
        Method("mmspec STD keep 4 of 9 visual KV K=4", "mmspec", "std", True, mm(STDDrafter(target, keep=4)),
               {"K": 4, "visual_tokens": 4}),
        *([Method(f"mmspec EAGLE head K={k}", "mmspec", "eagle", True, mm(EagleDrafter(target, models.eagle),
                                                                         num_draft_tokens=k), {"K": k})
           for k in (4, 5, 6)]
          + [Method("mmspec EAGLE head dynamic tree <= (3, 3, 2, 2, 1, 1)", "mmspec", "eagle", True,
                    mm(EagleDrafter(target, models.eagle, "dynamic", threshold=0.2, max_nodes=12),
                       tree=(3, 3, 2, 2, 1, 1)), {"dynamic": True})]
          if getattr(models, "eagle", None) is not None else []),
        Method("mmspec n-gram K=4", "mmspec", "ngram", True, mm(NgramDrafter()), {"K": 4}),
        Method(f"mmspec early-exit {early_exit_layers} layers K=4", "mmspec", "early-exit", True,
               mm(EarlyExitDrafter(target, early_exit_layers)), {"K": 4, "layers": early_exit_layers}),
        Method(f"mmspec early-exit {early_exit_layers} layers, shared KV K=4", "mmspec", "early-exit", True,
               mm(EarlyExitDrafter(target, early_exit_layers, share_kv=True)),
               {"K": 4, "layers": early_exit_layers, "share_kv": True}),
    ]  # fmt: skip
    for k in ks:
        methods.append(Method(f"HF assisted small-VLM K={k}", "hf", "small-vlm", True,
                              hf_assisted(small, num_assistant_tokens=k, num_assistant_tokens_schedule="constant",
                                          assistant_confidence_threshold=0.0), {"K": k}))  # fmt: skip
    methods += [
        Method("HF assisted small-VLM (HF defaults)", "hf", "small-vlm", True, hf_assisted(small), {"defaults": True}),
        Method("HF assisted text-only K=4", "hf", "text-only", True,
               hf_assisted(text, num_assistant_tokens=4, num_assistant_tokens_schedule="constant",
                           assistant_confidence_threshold=0.0), {"K": 4}),
        Method("HF assisted text-only (HF defaults)", "hf", "text-only", True, hf_assisted(text), {"defaults": True}),
        Method("HF prompt lookup K=4", "hf", "ngram", True, hf(prompt_lookup_num_tokens=4), {"K": 4}),
    ]  # fmt: skip
    return methods


def bench_vlm(*, scenes: int = 8, reps: int = 5, max_new_tokens: int = 48, json_path=None, plot_path=None,
              ks=(2, 3, 4, 5, 6, 8), progress: bool = True, models=None):  # fmt: skip
    from .. import zoo
    from ..zoo.shapes import make_scene
    from ..zoo.shapes_vlm import IMAGE_SIZE, caption_prompt

    if scenes < 1 or reps < 1:
        raise ValueError(f"scenes/reps: expected ints >= 1, got scenes={scenes}, reps={reps}")
    models = models or zoo.load("shapes-vlm")
    processor = models.processor
    inputs = [
        processor(images=[make_scene(i, "test").render(IMAGE_SIZE)], text=[caption_prompt()], return_tensors="pt")
        for i in range(scenes)
    ]
    inputs = [dict(x) for x in inputs]
    methods = vlm_methods(models, max_new_tokens, ks=ks)
    with torch.inference_mode():
        seconds, results, _phases = run_interleaved(methods, inputs, reps, progress)
    rows = summarise(methods, seconds, results, processor.tokenizer.pad_token_id)
    meta = {"benchmark": "vlm", "zoo": "shapes-vlm", "task": "greedy captioning of held-out scenes",
            "scenes": scenes, "reps": reps, "max_new_tokens": max_new_tokens, "machine": machine_description()}  # fmt: skip
    if json_path:
        save_json(rows, json_path, meta)
    if plot_path:
        save_plot(rows, plot_path, f"shapes-VLM greedy captioning ({scenes} scenes, median of {reps} reps)")
    return rows, meta


def print_report(rows, meta) -> None:
    print(f"\nmmspec bench vlm — {meta['task']}, {meta['scenes']} scenes, {meta['reps']} interleaved repetitions, "
          f"max_new_tokens={meta['max_new_tokens']}\nmachine: {meta['machine']}\n")  # fmt: skip
    print(markdown_table(rows))
