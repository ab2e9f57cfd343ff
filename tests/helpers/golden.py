"""Golden outputs of every method on the bundled models: token ids (VLM, video), codes (image AR) and sample hashes
(diffusion) per method and seed. ``python -m tests.helpers.golden OUT.json`` records them; tests/test_golden.py
compares the current code against the file recorded at commit 36b3cb6 (before the one-loop refactor).

The cases use public APIs; the recording at 36b3cb6 used the paths of that tree (see the golden file's commit).
"""

from __future__ import annotations

import hashlib
import json
import sys

import torch

SCENES, CLIPS, CONDITIONS = 3, 2, ["red circle at top left", "blue square at center"]
SAMPLED = dict(temperature=0.8, top_p=0.95, seed=0)


def _ids(out) -> list:
    return out.new_tokens.tolist()


def _sha(t: torch.Tensor) -> str:
    return hashlib.sha256(t.detach().float().contiguous().numpy().tobytes()).hexdigest()[:16]


def vlm_cases():
    """name -> callable() -> list of generated ids per scene (greedy and seeded sampling, every lossless drafter)."""
    import mmspec
    from mmspec import EarlyExitDrafter, NgramDrafter, STDDrafter, VLMSpeculator, zoo
    from mmspec.drafters import CompressedVLMDrafter
    from mmspec.drafters.eagle import EagleDrafter
    from mmspec.zoo.shapes import make_scene

    m = zoo.load("shapes-vlm")
    images = [make_scene(i, "test").render(96) for i in range(SCENES)]
    drafters = {
        "small-vlm": m.drafter_vlm, "text-only": m.drafter_text, "ngram": NgramDrafter(),
        "early-exit": EarlyExitDrafter(m.target, 4), "early-exit-shared": EarlyExitDrafter(m.target, 4, share_kv=True),
        "eagle": EagleDrafter(m.target, m.eagle), "std": STDDrafter(m.target, keep=4),
        "grid-pool": CompressedVLMDrafter(m.drafter_vlm, "grid-pool", budget=4),
    }  # fmt: skip
    cases = {}
    for name, d in drafters.items():
        spec = VLMSpeculator(m.target, m.processor, drafter=d, num_draft_tokens=4, rows="aligned")  # the default then
        cases[f"vlm/{name}/greedy"] = lambda spec=spec: _ids(spec.generate(images, "caption :", max_new_tokens=32))
        if name in ("small-vlm", "eagle", "text-only"):
            cases[f"vlm/{name}/sampled"] = lambda spec=spec: _ids(spec.generate(images, "caption :", max_new_tokens=32,
                                                                                **SAMPLED))  # fmt: skip
    spec = VLMSpeculator(m.target, m.processor, drafter=m.drafter_vlm, num_draft_tokens=4, tree=(2, 2, 1))
    cases["vlm/small-vlm-tree/greedy"] = lambda: _ids(spec.generate(images, "caption :", max_new_tokens=32))
    spec_rows = VLMSpeculator(m.target, m.processor, drafter=m.drafter_vlm, num_draft_tokens=4, rows="independent")
    cases["vlm/small-vlm-per-row/greedy"] = lambda: _ids(spec_rows.generate(images, "caption :", max_new_tokens=32))
    cases["vlm/small-vlm-per-row/sampled"] = lambda: _ids(spec_rows.generate(images, "caption :", max_new_tokens=32, **SAMPLED))
    del mmspec
    return cases


def video_cases():
    from mmspec import STDDrafter, VideoSpeculator, zoo
    from mmspec.drafters import CompressedVLMDrafter
    from mmspec.drafters.eagle import EagleDrafter
    from mmspec.zoo.shapes_video import make_clip

    v = zoo.load("shapes-video")
    clips = [make_clip(i, "test").frames_array() for i in range(CLIPS)]
    drafters = {"small-vlm": v.drafter_vlm, "eagle": EagleDrafter(v.target, v.eagle), "std": STDDrafter(v.target, keep=16),
                "adaptor": CompressedVLMDrafter(v.drafter_adaptor, v.adaptor, budget=16)}  # fmt: skip
    cases = {}
    for name, d in drafters.items():
        spec = VideoSpeculator(v.target, v.processor, drafter=d, num_draft_tokens=5, rows="aligned")  # the default then
        cases[f"video/{name}/greedy"] = lambda spec=spec: _ids(spec.generate(clips, "caption :", max_new_tokens=24))
        if name in ("small-vlm", "eagle"):
            cases[f"video/{name}/sampled"] = lambda spec=spec: _ids(spec.generate(clips, "caption :", max_new_tokens=24,
                                                                                  **SAMPLED))  # fmt: skip
    return cases


# Image-AR methods with the small AR drafter ran, before the one-loop refactor, in a Jacobi loop that drew an
# initial window of uniform codes (torch.randint, [B, K]) right after the first token although a drafter, not the
# window, drafted: one wasted draw that shifted the random stream. The one loop no longer makes it. To show that the
# loop is otherwise the same, these cases reproduce that draw with a test-only drafter wrapper (LegacyWindowDraw).
LEGACY_WINDOW_DRAW = ("speculative", "lantern")


def _legacy_drafter_run(spec, method: str, seed: int):
    from mmspec import IMAGE_AR_METHODS, ModelDrafter, SpecConfig, SpeculativeEngine

    entry = IMAGE_AR_METHODS.get(method)
    prefix = spec.prefix_ids(CONDITIONS)
    params = entry.params(spec, {}) if entry.params else {}
    cfg = SpecConfig(num_draft_tokens=entry.num_draft_tokens, verifier=entry.verifier, verifier_params=params,
                     temperature=1.0, max_new_tokens=spec.grid[0] * spec.grid[1], rows="independent", fixed_length=True)
    drafter = _legacy_wrapper()(ModelDrafter(spec.guided(spec.drafter, spec.cfg_scale)), entry.num_draft_tokens,
                               spec.codebook_size)  # fmt: skip
    engine = SpeculativeEngine(spec.guided(spec.target, spec.cfg_scale), drafter, cfg, vocab_size=spec.codebook_size)
    return engine.generate(prefix, generator=torch.Generator().manual_seed(seed)).new_tokens.tolist()


def image_ar_cases(legacy: bool = True):
    from mmspec import IMAGE_AR_METHODS, zoo

    spec = zoo.load("shapes-t2i").speculator()
    cases = {}
    for method in IMAGE_AR_METHODS.names():
        for seed in (0, 1):
            if legacy and method in LEGACY_WINDOW_DRAW:
                cases[f"image-ar/{method}/seed{seed}"] = lambda method=method, seed=seed: _legacy_drafter_run(spec, method, seed)
            else:
                cases[f"image-ar/{method}/seed{seed}"] = lambda method=method, seed=seed: spec.generate(
                    CONDITIONS, method=method, seed=seed, decode=False).codes.tolist()
    return cases


def _legacy_wrapper():
    from mmspec.drafters.base import Drafter, DraftSession

    class LegacyWindowDraw(Drafter):
        """Wraps a drafter; before its first drafts, draws the old loop's unused window (see LEGACY_WINDOW_DRAW)."""

        def __init__(self, inner, k: int, vocab: int):
            self.inner, self.k, self.vocab = inner, k, vocab

        def check_compatible(self, target, vocab_size):
            self.inner.check_compatible(target, vocab_size)

        def start(self, request):
            inner, outer = self.inner.start(request), self

            class Session(DraftSession):
                drew = False

                @property
                def forwards(self):
                    return inner.forwards

                def propose(self, pending, k, generator=None, stop_below=None):
                    if not self.drew:
                        torch.randint(outer.vocab, (pending.shape[0], outer.k), device=pending.device, generator=generator)
                        self.drew = True
                    return inner.propose(pending, k, generator, stop_below)

                def accept(self, commit):
                    inner.accept(commit)

            return Session()

    return LegacyWindowDraw


def diffusion_cases():
    from mmspec import zoo
    from mmspec.modalities.diffusion import DIFFUSION_METHODS

    spec = zoo.load("shapes-ddpm").speculator()
    cases = {}
    for method in DIFFUSION_METHODS.names():
        for seed in (0, 1):
            cases[f"diffusion/{method}/seed{seed}"] = lambda method=method, seed=seed: _sha(
                spec.generate(CONDITIONS, method=method, seed=seed, num_inference_steps=20, decode=False).samples)
    return cases


def __getattr__(name):  # LegacyWindowDraw is built lazily (it needs mmspec's drafter base class)
    if name == "LegacyWindowDraw":
        return _legacy_wrapper()
    raise AttributeError(name)


def all_cases() -> dict:
    torch.set_num_threads(2)
    cases = {}
    for group in (vlm_cases, video_cases, image_ar_cases, diffusion_cases):
        cases.update(group())
    return cases


def record(path: str) -> None:
    out = {}
    for name, run in all_cases().items():
        out[name] = run()
        print(name, str(out[name])[:80], flush=True)
    with open(path, "w") as f:
        json.dump(out, f, indent=0, sort_keys=True)


if __name__ == "__main__":
    record(sys.argv[1])
