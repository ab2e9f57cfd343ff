"""``mmspec bench vlm``: the bundled shapes-VLM pair, greedy captioning of held-out scenes (batch 1, as Spec-Bench).

The rows of :mod:`.tokens` (compressed drafters and STD keep 4 of the 9 visual tokens), plus the small-VLM drafter
under HF's +2/-1 draft-length heuristic; HF assisted generation at every K of ``ks``.
"""

from __future__ import annotations

from .harness import machine_description, run_token_bench, save_outputs
from .peers import Runners
from .tokens import token_methods
from ..drafters import ModelDrafter


def vlm_methods(models, max_new_tokens: int, ks=(2, 3, 4, 5, 6, 8), early_exit_layers: int = 4, visual: int = 9):
    r = Runners(models.target, models.processor, max_new_tokens)
    heuristic = r.spec("mmspec small-VLM heuristic K0=4", "small-vlm", ModelDrafter(models.drafter_vlm),
                       {"policy": "heuristic", "visual_tokens": "all"}, num_draft_tokens=4, draft_length_policy="heuristic")  # fmt: skip
    return token_methods(r, models, label="small-VLM", visual=visual, ks=ks, k_mid=5, budget=4, std_keeps=(4,),
                         eagle_ks=(4, 5, 6), early_exit_layers=early_exit_layers, compress={"grid": (3, 3)},
                         extra=[heuristic])  # fmt: skip


def bench_vlm(*, scenes: int = 8, reps: int = 5, max_new_tokens: int = 48, json_path=None, plot_path=None,
              ks=(2, 3, 4, 5, 6, 8), progress: bool = True, models=None):  # fmt: skip
    from .. import zoo
    from ..zoo.shapes import make_scene
    from ..zoo.shapes_vlm import IMAGE_SIZE, NUM_IMAGE_TOKENS, caption_prompt

    if scenes < 1 or reps < 1:
        raise ValueError(f"scenes/reps: expected ints >= 1, got scenes={scenes}, reps={reps}")
    models = models or zoo.load("shapes-vlm")
    processor = models.processor
    inputs = [dict(processor(images=[make_scene(i, "test").render(IMAGE_SIZE)], text=[caption_prompt()],
                             return_tensors="pt")) for i in range(scenes)]  # fmt: skip
    methods = vlm_methods(models, max_new_tokens, ks=ks, visual=NUM_IMAGE_TOKENS)
    rows, _, skipped = run_token_bench(methods, inputs, reps, processor.tokenizer.pad_token_id, progress)
    meta = {"benchmark": "vlm", "zoo": "shapes-vlm", "task": "greedy captioning of held-out scenes", "inputs": scenes,
            "visual_tokens": NUM_IMAGE_TOKENS, "reps": reps, "max_new_tokens": max_new_tokens, "machine": machine_description(),
            "skipped": skipped}  # fmt: skip
    save_outputs(rows, meta, json_path, plot_path, f"shapes-VLM greedy captioning ({scenes} scenes, median of {reps} reps)")
    return rows, meta
