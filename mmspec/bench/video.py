"""``mmspec bench video``: the bundled shapes-video models, greedy captioning of held-out clips (batch 1).

Every method decodes the same processor outputs; times are medians of interleaved repetitions (see
:mod:`mmspec.bench`). Prefill (prompt pass + drafter set-up, up to the first token) and decode time are reported
separately: visual tokens dominate a video prompt, so prefill grows with frames while decoding is what speculation
speeds up. For HF rows, "prefill" is the time to the end of the target's first forward (generate's set-up, the
vision encoding it runs before that forward, and the prompt pass). Rows: those of :mod:`.tokens` (compressed
drafters keep 16 of the 64 visual tokens), STD with verifier-attention feedback, and the learned query adaptor (16
tokens read off the target's own prefill features, so that drafter runs no vision tower).

``--long`` (:func:`bench_video_long`): STD where it pays, on batches of long clips (the shapes-video-long target,
clips rendered 16x slower: 1,024 video tokens), with lock-step and per-row commits (``SpecConfig.rows``).
"""

from __future__ import annotations

import torch

from .harness import Method, machine_description, markdown_table, run_token_bench, save_outputs
from .peers import Runners
from .tokens import token_methods
from ..drafters import CompressedVLMDrafter, ModelDrafter, STDDrafter
from ..modalities.video import VideoSpeculator


def video_methods(models, max_new_tokens: int, visual: int = 64, k_mid: int = 5, std_keeps=(8, 16)) -> list[Method]:
    """The rows of :mod:`.tokens` (compressed drafters keep 16 visual tokens, STD 8 and 16 KV entries) plus STD with
    verifier-attention feedback and, when the entry ships one, the query-adaptor drafter."""
    target = models.target
    r = Runners(target, models.processor, max_new_tokens, speculator_cls=VideoSpeculator)
    extra = [r.spec(f"mmspec STD keep {std_keeps[0]} of {visual} visual KV + verifier feedback K={k_mid}", "std",
                    STDDrafter(target, keep=std_keeps[0], feedback=True),
                    {"K": k_mid, "visual_tokens": std_keeps[0], "feedback": True}, num_draft_tokens=k_mid)]  # fmt: skip
    if getattr(models, "adaptor", None) is not None:
        q, source = models.adaptor.num_queries, models.adaptor.source
        reads = "the target's features" if source == "target-features" else f"{source} tokens"
        extra.append(r.spec(f"mmspec adaptor-trained video-LM, query adaptor on {reads}, {q} visual tokens K={k_mid}",
                            "small-vlm", CompressedVLMDrafter(models.drafter_adaptor, models.adaptor, q),
                            {"K": k_mid, "compressor": "query-adaptor", "source": source, "visual_tokens": q},
                            num_draft_tokens=k_mid))  # fmt: skip
    return token_methods(r, models, label="small video-LM", visual=visual, ks=(3, 4, 5, 6), k_mid=k_mid, budget=16,
                         std_keeps=std_keeps, eagle_ks=(4, 5, 6, 8), early_exit_layers=2, extra=extra, peer_ks=(k_mid,))  # fmt: skip


def _visual_tokens(processor, input_ids) -> int:
    return int((input_ids[0] == processor.tokenizer.convert_tokens_to_ids(processor.video_token)).sum())


def bench_video(*, clips: int = 8, reps: int = 5, max_new_tokens: int = 64, json_path=None, plot_path=None,
                progress: bool = True, models=None, methods_filter: str | None = None):  # fmt: skip
    from .. import zoo
    from ..zoo.shapes_video import caption_prompt, make_clip

    if clips < 1 or reps < 1:
        raise ValueError(f"clips/reps: expected ints >= 1, got clips={clips}, reps={reps}")
    models = models or zoo.load("shapes-video")
    processor = models.processor
    inputs = [dict(processor(videos=[make_clip(i, "test").frames_array()], text=[caption_prompt()], return_tensors="pt"))
              for i in range(clips)]  # fmt: skip
    visual = _visual_tokens(processor, inputs[0]["input_ids"])
    methods = video_methods(models, max_new_tokens, visual)
    if methods_filter:  # keep plain decoding (the baseline) and the methods whose name contains the filter
        methods = [m for m in methods if m.family == "ar" or methods_filter in m.name]
    rows, _, skipped = run_token_bench(methods, inputs, reps, processor.tokenizer.pad_token_id, progress)
    meta = {"benchmark": "video", "zoo": "shapes-video", "task": "greedy captioning of held-out clips", "inputs": clips,
            "reps": reps, "max_new_tokens": max_new_tokens, "visual_tokens": visual, "machine": machine_description(),
            "skipped": skipped}  # fmt: skip
    save_outputs(rows, meta, json_path, plot_path, f"shapes-video greedy captioning ({clips} clips, median of {reps} reps)")
    return rows, meta


def long_video_methods(models, max_new_tokens: int, keeps=(16, 64), ks=(3, 5)):
    """STD on long clips: plain decoding, STD with batch-aligned commits (first keep, last K) and with per-row commits
    (every keep and K), and HF assisted generation with the shapes-video small drafter where HF supports it (batch 1
    only: dropped and reported otherwise)."""
    target = models.target
    r = Runners(target, models.processor, max_new_tokens, speculator_cls=VideoSpeculator)
    configs = [("aligned", keeps[0], ks[-1])] + [("independent", keep, k) for keep in keeps for k in ks]
    methods = [Method("plain greedy (HF generate)", "ar", "none", True, r.hf())]
    methods += [r.spec(f"mmspec STD keep {keep} K={k}, rows {rows}", "std", STDDrafter(target, keep=keep),
                       {"K": k, "visual_tokens": keep, "rows": rows}, num_draft_tokens=k, rows=rows)
                for rows, keep, k in configs]  # fmt: skip
    if getattr(models, "drafter_vlm", None) is not None:
        methods += r.assisted("small video-LM", "small-vlm", models.drafter_vlm, (ks[-1],))
    return methods


def bench_video_long(*, clips: int = 16, batch: int = 16, slowdown: int = 16, reps: int = 3, max_new_tokens: int = 64,
                     keeps=(16, 64), ks=(3, 5), json_path=None, plot_path=None, progress: bool = True,
                     models=None, drafter=None):  # fmt: skip
    """STD where it pays: ``clips`` held-out clips rendered ``slowdown`` times slower (8 * slowdown frames, 64 *
    slowdown video tokens), captioned ``batch`` at a time by the ``shapes-video-long`` target (the shapes-video target
    fine-tuned on long clips). ``drafter``: a small video LM for the HF assisted peer (default: shapes-video's)."""
    from types import SimpleNamespace

    from .. import zoo
    from ..zoo.shapes_video import caption_prompt, make_clip

    if clips < 1 or reps < 1 or batch < 1 or clips % batch:
        raise ValueError(f"clips/batch/reps: expected ints >= 1 with clips a multiple of batch, got clips={clips}, "
                         f"batch={batch}, reps={reps}")  # fmt: skip
    models = models or zoo.load("shapes-video-long")
    if drafter is None:
        drafter = zoo.load("shapes-video").drafter_vlm
    processor = models.processor
    frames = [make_clip(i, "test").frames_array(slowdown=slowdown) for i in range(clips)]
    inputs = [dict(processor(videos=frames[i : i + batch], text=[caption_prompt()] * batch, padding=True,
                             return_tensors="pt")) for i in range(0, clips, batch)]  # fmt: skip
    methods = long_video_methods(SimpleNamespace(target=models.target, processor=processor, drafter_vlm=drafter),
                                 max_new_tokens, keeps, ks)  # fmt: skip
    rows, results, skipped = run_token_bench(methods, inputs, reps, processor.tokenizer.pad_token_id, progress)
    texts = [t for r in results[methods[0].name] for t in processor.tokenizer.batch_decode(r.new_tokens,
                                                                                           skip_special_tokens=True)]
    correct = sum(t.strip() == make_clip(i, "test").caption() for i, t in enumerate(texts))
    meta = {"benchmark": "video --long", "zoo": "shapes-video-long", "task": "greedy captioning of long held-out clips",
            "inputs": clips, "batch": batch, "slowdown": slowdown, "frames_per_clip": int(frames[0].shape[0]),
            "reps": reps, "max_new_tokens": max_new_tokens, "visual_tokens": _visual_tokens(processor, inputs[0]["input_ids"]),
            "caption_accuracy": round(correct / clips, 3), "machine": machine_description(), "skipped": skipped}  # fmt: skip
    save_outputs(rows, meta, json_path, plot_path, f"shapes-video-long: STD on {slowdown}x clips, batch {batch} (median of {reps} reps)")
    return rows, meta


@torch.inference_mode()
def std_scaling(target, contexts=(64, 256, 1024, 4096), keep: int = 16, k: int = 5, reps: int = 7, text: int = 8,
                batch: int = 1):  # fmt: skip
    """Where STD pays off: per-token cost of STD's sparse draft forward vs the dense forward, as the visual context
    grows (synthetic visual embeddings of the target's scale; the timing does not depend on their content).

    Returns rows {visual_tokens, dense_ms, sparse_ms, verify_ms, draft_cost_ratio, break_even_accepted}: one
    single-token forward over the full cache (plain decoding's step), the same over the sparse view (``keep`` visual
    entries per layer + text), and one (K+1)-token verification forward. ``break_even_accepted`` = the tokens a round
    must commit for STD to match plain decoding: (K * sparse + verify) / dense. ``batch`` rows decode together (the
    KV read grows with the batch, a step's fixed cost does not).
    """
    import statistics
    import time

    from ..drafting.kv_sharing import sparse_kv_index
    from ..runner import ModelRunner

    embed = target.get_input_embeddings().weight
    scale = float(embed.float().std())
    rows = []
    g = torch.Generator().manual_seed(0)
    for n in contexts:
        t = n + text
        embeds = (torch.randn(batch, t, embed.shape[1], generator=g) * scale).to(embed.dtype)
        mask = torch.ones(batch, t, dtype=torch.long)
        pos = torch.arange(t)[None, None].expand(3, batch, t) if ModelRunner(target).mrope else torch.arange(t)[None].expand(batch, t)
        dense = ModelRunner(target)
        dense.prefill(None, mask, inputs_embeds=embeds, position_ids=pos)
        visual = torch.zeros(batch, t, dtype=torch.bool)
        visual[:, :n] = True
        layers = len(dense.cache.layers)
        scores = torch.rand(layers, batch, n, generator=g)
        sparse = ModelRunner(target)
        sparse.prefill_from(dense, index=sparse_kv_index(visual, scores, min(keep, n)))
        token = torch.full((batch, 1), 5)
        block = torch.full((batch, k + 1), 5)
        timings = {"dense": [], "sparse": [], "verify": []}
        for _ in range(reps + 1):  # the first repetition is a warm-up
            for name, runner, ids in (("dense", dense, token), ("sparse", sparse, token), ("verify", dense, block)):
                t0 = time.perf_counter()
                runner.extend(ids)
                timings[name].append(time.perf_counter() - t0)
                runner.commit(0)
        med = {name: statistics.median(v[1:]) for name, v in timings.items()}
        rows.append({"visual_tokens": n, "dense_ms": round(1000 * med["dense"], 2), "sparse_ms": round(1000 * med["sparse"], 2),
                     "verify_ms": round(1000 * med["verify"], 2), "draft_cost_ratio": round(med["sparse"] / med["dense"], 3),
                     "break_even_accepted": round((k * med["sparse"] + med["verify"]) / med["dense"], 2)})  # fmt: skip
    return rows


def std_scaling_table(rows, keep: int, k: int) -> str:
    return markdown_table(rows, [
        ("visual tokens in context", lambda r: str(r["visual_tokens"])), ("dense step ms", lambda r: f"{r['dense_ms']:.2f}"),
        (f"STD draft step ms (keep {keep})", lambda r: f"{r['sparse_ms']:.2f}"),
        (f"verify {k + 1} tokens ms", lambda r: f"{r['verify_ms']:.2f}"), ("draft / dense", lambda r: f"{r['draft_cost_ratio']:.2f}"),
        ("tokens a round must commit to break even", lambda r: f"{r['break_even_accepted']:.2f} (of at most {k + 1})")])  # fmt: skip


@torch.inference_mode()
def drafter_prefill_breakdown(models, budget: int = 16, reps: int = 20, clips: int = 8, others=None) -> dict:
    """Where drafter set-up time goes (ms per clip, medians over ``reps`` interleaved repetitions after two warm-up
    ones), timing the drafters' own sessions (``drafter.start`` right after the target's prefill, not counted).

    End to end over ``clips`` held-out clips: the small drafter seeing the full clip, the same drafter with grid
    pooling to ``budget`` visual tokens, and the query-adaptor drafter (on the target's features when the bundled
    adaptor reads them); ``others`` ({label: loaded shapes-video entry}) adds the adaptor drafters of other entries
    trained on the same target (e.g. another query count), timed in the same loop. Then the compressed sessions'
    steps on the first clip, read from their profiler labels (:data:`~mmspec.drafters.compressed.SETUP_STEPS`: the
    drafter's embedding of the prompt — its vision tower, or only the text for a target source —, the compression,
    the LM prefill over the compressed prompt), with the prompt lengths."""
    import statistics
    import time

    from ..drafters.base import DraftRequest
    from ..drafters.compressed import SETUP_STEPS
    from ..runner import ModelRunner
    from ..zoo.shapes_video import caption_prompt, make_clip

    if clips < 1 or reps < 1:
        raise ValueError(f"clips/reps: expected ints >= 1, got clips={clips}, reps={reps}")
    processor = models.processor
    video_id = processor.tokenizer.convert_tokens_to_ids(processor.video_token)
    requests = []
    for i in range(clips):
        enc = dict(processor(videos=[make_clip(i, "test").frames_array()], text=[caption_prompt()], return_tensors="pt"))
        ids, mask = enc.pop("input_ids"), enc.pop("attention_mask")
        target = ModelRunner(models.target, keep_features=True)
        target.prefill(ids, mask, **enc)
        requests.append(DraftRequest(input_ids=ids, attention_mask=mask, model_kwargs=enc, placeholder_ids=(video_id,),
                                     vocab_size=target.vocab_size, target_runner=target))  # fmt: skip
    starts = {"set-up, full view": ModelDrafter(models.drafter_vlm),
              f"set-up, grid-pool {budget}": CompressedVLMDrafter(models.drafter_vlm, "grid-pool", budget)}  # fmt: skip
    for label, entry in {"bundled" if others else "": models, **(others or {})}.items():
        a = getattr(entry, "adaptor", None)
        if a is not None:
            name = f"set-up, query adaptor {a.num_queries} ({a.source}{'; ' + label if label else ''})"
            starts[name] = CompressedVLMDrafter(entry.drafter_adaptor, a, a.num_queries)
    times: dict[str, list[float]] = {}
    lengths = {"prompt tokens, full": requests[0].input_ids.shape[1]}
    for rep in range(reps + 2):
        for name, d in starts.items():
            t0 = time.perf_counter()
            for request in requests:
                d.start(request)
            if rep >= 2:
                times.setdefault(name, []).append((time.perf_counter() - t0) / clips)
            if isinstance(d, CompressedVLMDrafter):  # its steps, on the first clip, under the profiler
                with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
                    session = d.start(requests[0])
                steps = {e.key: e.cpu_time_total / 1e6 for e in prof.key_averages() if e.key in SETUP_STEPS}
                for step in SETUP_STEPS * (rep >= 2):
                    times.setdefault(f"{name}: {step.split(': ')[1]}", []).append(steps[step])
                lengths[f"prompt tokens, {name.removeprefix('set-up, ')}"] = session.runner.cache.get_seq_length()
    return {**{k: round(1000 * statistics.median(v), 2) for k, v in times.items()}, **lengths}
