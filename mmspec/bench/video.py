"""``mmspec bench video``: the bundled shapes-video models, greedy captioning of held-out clips (batch 1).

Every method decodes the same processor outputs; times are medians of interleaved repetitions (see
:mod:`mmspec.bench`). Prefill (prompt pass + drafter set-up, up to the first token) and decode time are reported
separately: visual tokens dominate a video prompt, so prefill grows with frames while decoding is what speculation
speeds up. Methods:

- ``plain greedy``: ``target.generate(do_sample=False)``;
- mmspec: the small video-LM drafter at several K and as a tree; the text-only drafter; the small drafter seeing a
  compressed clip (grid pooling over time and space, ToMe merging, two-stage pruning: 16 of 64 visual tokens); the
  learned query adaptor (16 tokens read off the target's own prefill features, so that drafter runs no vision
  tower); STD sparse-to-dense self-drafting (top-k visual KV per layer, with and without verifier-attention
  feedback); the EAGLE head (chain, static tree, confidence-guided dynamic tree); early exit
  (own draft cache, and drafting in the target's cache with verification reusing the draft layers' KV); prompt
  lookup;
- Hugging Face peers: assisted generation with the same small drafter / text-only drafter (constant K and HF
  defaults) and prompt lookup decoding. For HF rows, "prefill" is the time to the end of the target's first forward
  (generate's set-up, the vision encoding it runs before that forward, and the prompt pass).

``--long`` (:func:`bench_video_long`): STD where it pays, on batches of long clips (the shapes-video-long target,
clips rendered 16x slower: 1,024 video tokens), with lock-step and per-row commits (``SpecConfig.rows``).
"""

from __future__ import annotations

import torch

from .harness import (Method, drop_unsupported, machine_description, run_interleaved, save_json, save_plot, summarise,
                      with_spread)
from .peers import Runners
from ..drafters import CompressedVLMDrafter, EarlyExitDrafter, ModelDrafter, NgramDrafter, STDDrafter
from ..drafters.eagle import EagleDrafter
from ..modalities.video import VideoSpeculator


def video_methods(models, max_new_tokens: int, ks=(3, 4, 5, 6), budget: int = 16, std_keep=(8, 16),
                  early_exit_layers: int = 2, tree=(2, 2, 1, 1), eagle_ks=(4, 5, 6, 8),
                  eagle_tree=(3, 3, 2, 2, 1, 1)):  # fmt: skip
    target = models.target
    r = Runners(target, models.processor, max_new_tokens, speculator_cls=VideoSpeculator)
    hf, hf_assisted, mm = r.hf, r.hf_assisted, r.mm

    small, text = models.drafter_vlm, models.drafter_text
    full = {"visual_tokens": "all"}
    methods = [Method("plain greedy (HF generate)", "ar", "none", True, hf())]
    for k in ks:
        methods.append(Method(f"mmspec small video-LM K={k}", "mmspec", "small-vlm", True,
                              mm(ModelDrafter(small), num_draft_tokens=k), {"K": k, **full}))  # fmt: skip
    k_mid = ks[len(ks) // 2]
    methods += [
        Method(f"mmspec small video-LM tree {tree}", "mmspec", "small-vlm", True, mm(ModelDrafter(small), tree=tree),
               {"tree": list(tree), **full}),
        Method("mmspec text-only K=4", "mmspec", "text-only", True, mm(ModelDrafter(text, text_only=True)),
               {"K": 4, "visual_tokens": 0}),
    ]  # fmt: skip
    for c in ("grid-pool", "merge", "two-stage"):
        methods.append(Method(f"mmspec small video-LM {c} {budget} visual tokens K={k_mid}", "mmspec", "small-vlm", True,
                              mm(CompressedVLMDrafter(small, c, budget), num_draft_tokens=k_mid),
                              {"K": k_mid, "compressor": c, "visual_tokens": budget}))  # fmt: skip
    if getattr(models, "adaptor", None) is not None:
        q, source = models.adaptor.num_queries, models.adaptor.source
        reads = "the target's features" if source == "target-features" else f"{source} tokens"
        methods.append(Method(f"mmspec adaptor-trained video-LM, query adaptor on {reads}, {q} visual tokens K={k_mid}",
                              "mmspec", "small-vlm", True,
                              mm(CompressedVLMDrafter(models.drafter_adaptor, models.adaptor, q), num_draft_tokens=k_mid),
                              {"K": k_mid, "compressor": "query-adaptor", "source": source, "visual_tokens": q}))  # fmt: skip
    for keep in std_keep:
        methods.append(Method(f"mmspec STD keep {keep} K={k_mid}", "mmspec", "std", True,
                              mm(STDDrafter(target, keep=keep), num_draft_tokens=k_mid),
                              {"K": k_mid, "visual_tokens": keep}))  # fmt: skip
    methods.append(Method(f"mmspec STD keep {std_keep[0]} + verifier feedback K={k_mid}", "mmspec", "std", True,
                          mm(STDDrafter(target, keep=std_keep[0], feedback=True), num_draft_tokens=k_mid),
                          {"K": k_mid, "visual_tokens": std_keep[0], "feedback": True}))  # fmt: skip
    if getattr(models, "eagle", None) is not None:
        head = models.eagle
        for k in eagle_ks:
            methods.append(Method(f"mmspec EAGLE head K={k}", "mmspec", "eagle", True,
                                  mm(EagleDrafter(target, head), num_draft_tokens=k), {"K": k, **full}))  # fmt: skip
        methods += [
            Method(f"mmspec EAGLE head tree {tree}", "mmspec", "eagle", True, mm(EagleDrafter(target, head), tree=tree),
                   {"tree": list(tree), **full}),
            Method(f"mmspec EAGLE head dynamic tree <= {eagle_tree}", "mmspec", "eagle", True,
                   mm(EagleDrafter(target, head, "dynamic", threshold=0.2, max_nodes=12), tree=eagle_tree),
                   {"tree": list(eagle_tree), "dynamic": True, **full}),
        ]  # fmt: skip
    methods += [
        Method(f"mmspec early-exit {early_exit_layers} layers K=4", "mmspec", "early-exit", True,
               mm(EarlyExitDrafter(target, early_exit_layers)), {"K": 4, "layers": early_exit_layers, **full}),
        Method(f"mmspec early-exit {early_exit_layers} layers, shared KV K=4", "mmspec", "early-exit", True,
               mm(EarlyExitDrafter(target, early_exit_layers, share_kv=True)),
               {"K": 4, "layers": early_exit_layers, "share_kv": True, **full}),
        Method("mmspec n-gram K=4", "mmspec", "ngram", True, mm(NgramDrafter()), {"K": 4}),
    ]  # fmt: skip
    for k in (k_mid,):
        methods.append(Method(f"HF assisted small video-LM K={k}", "hf", "small-vlm", True,
                              hf_assisted(small, num_assistant_tokens=k, num_assistant_tokens_schedule="constant",
                                          assistant_confidence_threshold=0.0), {"K": k}))  # fmt: skip
    methods += [
        Method("HF assisted small video-LM (HF defaults)", "hf", "small-vlm", True, hf_assisted(small), {"defaults": True}),
        Method("HF assisted text-only K=4", "hf", "text-only", True,
               hf_assisted(text, num_assistant_tokens=4, num_assistant_tokens_schedule="constant",
                           assistant_confidence_threshold=0.0), {"K": 4}),
        Method("HF prompt lookup K=4", "hf", "ngram", True, hf(prompt_lookup_num_tokens=4), {"K": 4}),
    ]  # fmt: skip
    return methods


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
    methods = video_methods(models, max_new_tokens)
    if methods_filter:  # keep plain decoding (the baseline) and the methods whose name contains the filter
        methods = [m for m in methods if m.family == "ar" or methods_filter in m.name]
    with torch.inference_mode():
        methods, skipped = drop_unsupported(methods, inputs)
        seconds, results, phases = run_interleaved(methods, inputs, reps, progress)
    rows = summarise(methods, seconds, results, processor.tokenizer.pad_token_id, phases)
    visual = int((inputs[0]["input_ids"] == processor.tokenizer.convert_tokens_to_ids(processor.video_token)).sum())
    meta = {"benchmark": "video", "zoo": "shapes-video", "task": "greedy captioning of held-out clips",
            "clips": clips, "reps": reps, "max_new_tokens": max_new_tokens, "visual_tokens_per_clip": visual,
            "machine": machine_description(), "skipped": skipped}  # fmt: skip
    if json_path:
        save_json(rows, json_path, meta)
    if plot_path:
        save_plot(rows, plot_path, f"shapes-video greedy captioning ({clips} clips, median of {reps} reps)")
    return rows, meta


def long_video_methods(models, max_new_tokens: int, keeps=(16, 64), ks=(3, 5)):
    """STD on long clips: plain decoding, STD with batch-aligned commits (first keep, last K) and with per-row commits
    (every keep and K), and HF assisted generation with the shapes-video small drafter where HF supports it (batch 1
    only: dropped and reported otherwise)."""
    target = models.target
    r = Runners(target, models.processor, max_new_tokens, speculator_cls=VideoSpeculator)
    configs = [("aligned", keeps[0], ks[-1])] + [("independent", keep, k) for keep in keeps for k in ks]
    methods = [Method("plain greedy (HF generate)", "ar", "none", True, r.hf())]
    for rows, keep, k in configs:
        methods.append(Method(f"mmspec STD keep {keep} K={k}, rows {rows}", "mmspec", "std", True,
                              r.mm(STDDrafter(target, keep=keep), num_draft_tokens=k, rows=rows),
                              {"K": k, "visual_tokens": keep, "rows": rows}))  # fmt: skip
    if getattr(models, "drafter_vlm", None) is not None:
        methods.append(Method(f"HF assisted small video-LM K={ks[-1]}", "hf", "small-vlm", True,
                              r.hf_assisted(models.drafter_vlm, num_assistant_tokens=ks[-1],
                                            num_assistant_tokens_schedule="constant", assistant_confidence_threshold=0.0),
                              {"K": ks[-1]}))  # fmt: skip
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
    with torch.inference_mode():
        methods, skipped = drop_unsupported(methods, inputs)
        seconds, results, phases = run_interleaved(methods, inputs, reps, progress)
    rows = summarise(methods, seconds, results, processor.tokenizer.pad_token_id, phases)
    visual = int((inputs[0]["input_ids"][0] == processor.tokenizer.convert_tokens_to_ids(processor.video_token)).sum())
    texts = [t for r in results[methods[0].name] for t in processor.tokenizer.batch_decode(r.new_tokens,
                                                                                           skip_special_tokens=True)]
    correct = sum(t.strip() == make_clip(i, "test").caption() for i, t in enumerate(texts))
    meta = {"benchmark": "video-long", "zoo": "shapes-video-long", "task": "greedy captioning of long held-out clips",
            "clips": clips, "batch": batch, "slowdown": slowdown, "frames_per_clip": int(frames[0].shape[0]),
            "reps": reps, "max_new_tokens": max_new_tokens, "visual_tokens_per_clip": visual,
            "caption_accuracy": round(correct / clips, 3), "machine": machine_description(), "skipped": skipped}  # fmt: skip
    if json_path:
        save_json(rows, json_path, meta)
    if plot_path:
        save_plot(rows, plot_path, f"shapes-video-long: STD on {slowdown}x clips, batch {batch} (median of {reps} reps)")
    return rows, meta


def video_table(rows, visual_per_clip: int) -> str:
    lines = ["| method | drafter visual tokens | mean accepted tokens | tokens/s | prefill ms (drafter) | decode ms | "
             "speedup vs plain (min-max) | speedup vs HF (min-max) | loop ms/round | identical to plain |",
             "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        vis = r.params.get("visual_tokens", "—")
        vis = f"{visual_per_clip}/{visual_per_clip}" if vis == "all" else (f"{vis}/{visual_per_clip}" if vis != "—" else vis)
        pre = f"{1000 * r.prefill_seconds_median:.0f}" if r.prefill_seconds_median is not None else "—"
        if r.draft_prefill_seconds_median is not None:
            pre += f" ({1000 * r.draft_prefill_seconds_median:.0f})"
        dec = f"{1000 * r.decode_seconds_median:.0f}" if r.decode_seconds_median is not None else "—"
        oh = f"{r.overhead_ms_per_round:.2f}" if r.overhead_ms_per_round is not None else "—"
        lines.append(f"| {r.method} | {vis} | {r.mean_accepted_tokens:.2f} | {r.tokens_per_s:.1f} | {pre} | {dec} | "
                     f"{with_spread(r.speedup_vs_ar, r.speedup_vs_ar_range)} | {with_spread(r.speedup_vs_hf, r.speedup_vs_hf_range)} | "
                     f"{oh} | {'yes' if r.identical_to_ar else 'NO'} |")  # fmt: skip
    if rows and rows[0].unstable_baseline:
        lines.append("\n**unstable baseline**: plain throughput drifted by more than 20 % across repetitions")
    return "\n".join(lines)


def print_report(rows, meta) -> None:
    batch = f", batch {meta['batch']}, {meta['frames_per_clip']} frames per clip" if "batch" in meta else ""
    print(f"\nmmspec bench video — {meta['task']}, {meta['clips']} clips ({meta['visual_tokens_per_clip']} visual tokens "
          f"each{batch}), {meta['reps']} interleaved repetitions, max_new_tokens={meta['max_new_tokens']}\n"
          f"machine: {meta['machine']}\n")  # fmt: skip
    if "caption_accuracy" in meta:
        print(f"plain decoding's exact-match caption accuracy on these clips: {meta['caption_accuracy']:.0%}\n")
    print(video_table(rows, meta["visual_tokens_per_clip"]))
    for name, why in meta.get("skipped", {}).items():
        print(f"\nskipped {name}: not supported by the peer library here ({why})")


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
    lines = [f"| visual tokens in context | dense step ms | STD draft step ms (keep {keep}) | verify {k + 1} tokens ms | "
             "draft / dense | tokens a round must commit to break even |",
             "|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        lines.append(f"| {r['visual_tokens']} | {r['dense_ms']:.2f} | {r['sparse_ms']:.2f} | {r['verify_ms']:.2f} | "
                     f"{r['draft_cost_ratio']:.2f} | {r['break_even_accepted']:.2f} (of at most {k + 1}) |")  # fmt: skip
    return "\n".join(lines)


@torch.inference_mode()
def drafter_prefill_breakdown(models, budget: int = 16, reps: int = 20, clips: int = 8, others=None) -> dict:
    """Where drafter set-up time goes (ms per clip, medians over ``reps`` interleaved repetitions after two warm-up
    ones).

    End to end, as the engine does it (``drafter.start`` right after the target's prefill, which is not counted),
    summed over ``clips`` held-out clips: the small drafter seeing the full clip, the same drafter with grid pooling to
    ``budget`` visual tokens, and the query-adaptor drafter (on the target's features when the bundled adaptor reads
    them); ``others`` ({label: loaded shapes-video entry}) adds the adaptor drafters of other entries trained on the
    same target (e.g. an adaptor with another query count), timed in the same loop. Then the parts, on the first
    clip: the drafter's vision tower + embedding merge, its LM prefill over the full and the compressed prompt, the
    grid-pool step, and the adaptor step (text embedding + adaptor + splice)."""
    import statistics
    import time

    from ..drafters.base import DraftRequest
    from ..drafters.compressed import TARGET_VIEWS, compress_prompt, text_embeddings, visual_grid
    from ..models import prompt_embeddings
    from ..drafting.compression import grid_pool
    from ..runner import ModelRunner
    from ..zoo.shapes_video import caption_prompt, make_clip

    if clips < 1 or reps < 1:
        raise ValueError(f"clips/reps: expected ints >= 1, got clips={clips}, reps={reps}")
    drafter, processor = models.drafter_vlm, models.processor
    video_id = processor.tokenizer.convert_tokens_to_ids(processor.video_token)
    requests = []
    for i in range(clips):
        enc = dict(processor(videos=[make_clip(i, "test").frames_array()], text=[caption_prompt()], return_tensors="pt"))
        ids, mask = enc.pop("input_ids"), enc.pop("attention_mask")
        target = ModelRunner(models.target, keep_features=True)
        target.prefill(ids, mask, **enc)
        requests.append(DraftRequest(input_ids=ids, attention_mask=mask, model_kwargs=enc, placeholder_ids=(video_id,),
                                     vocab_size=target.vocab_size, target_runner=target))  # fmt: skip
    first = requests[0]
    ids, mask, enc, target = first.input_ids, first.attention_mask, first.model_kwargs, first.target_runner
    starts = {"set-up, full view": ModelDrafter(drafter),
              f"set-up, grid-pool {budget}": CompressedVLMDrafter(drafter, "grid-pool", budget)}  # fmt: skip
    adaptor = getattr(models, "adaptor", None)
    for label, entry in {"bundled" if others else "": models, **(others or {})}.items():
        a = getattr(entry, "adaptor", None)
        if a is not None:
            name = f"set-up, query adaptor {a.num_queries} ({a.source}{'; ' + label if label else ''})"
            starts[name] = CompressedVLMDrafter(entry.drafter_adaptor, a, a.num_queries)
    runner = ModelRunner(drafter)
    grid = visual_grid(drafter, enc)
    parts = ["vision tower + merge", "LM prefill, full", "grid-pool step", "LM prefill, grid-pooled"]
    if adaptor is not None and adaptor.source != "drafter":
        parts += ["adaptor step (text embedding + adaptor + splice)", "LM prefill, adaptor"]
    times: dict[str, list[float]] = {k: [] for k in [*starts, *parts]}
    for rep in range(reps + 2):
        lap = {}
        for name, d in starts.items():
            t0 = time.perf_counter()
            for request in requests:
                d.start(request)
            lap[name] = (time.perf_counter() - t0) / clips
        t0 = time.perf_counter()
        pos = runner.prompt_positions(ids, mask, enc)
        embeds = prompt_embeddings(drafter, ids, mask, pos, enc)
        t1 = time.perf_counter()
        runner.prefill(None, mask, inputs_embeds=embeds, position_ids=pos)
        t2 = time.perf_counter()
        out = compress_prompt(embeds, ids, mask, (video_id,),
                              lambda v, m, c: grid_pool(v, budget, grid=grid, carry=c), pos.permute(1, 2, 0))  # fmt: skip
        t3 = time.perf_counter()
        runner.prefill(None, out.mask, inputs_embeds=out.embeds, position_ids=out.positions.permute(2, 0, 1))
        t4 = time.perf_counter()
        lap.update(zip(parts, (t1 - t0, t2 - t1, t3 - t2, t4 - t3)))
        if len(parts) > 4:
            small, small_runner = models.drafter_adaptor, ModelRunner(models.drafter_adaptor)
            t0 = time.perf_counter()
            pos = small_runner.prompt_positions(ids, mask, enc)
            out = compress_prompt(text_embeddings(small, ids), ids, mask, (video_id,),
                                  lambda v, m, c: adaptor(v, carry=c), pos.permute(1, 2, 0),
                                  visual_source=TARGET_VIEWS.get(adaptor.source)(target))  # fmt: skip
            t1 = time.perf_counter()
            small_runner.prefill(None, out.mask, inputs_embeds=out.embeds, position_ids=out.positions.permute(2, 0, 1))
            t2 = time.perf_counter()
            lap.update(zip(parts[4:], (t1 - t0, t2 - t1)))
        if rep >= 2:
            for key, dt in lap.items():
                times[key].append(dt)
    med = {k: round(1000 * statistics.median(v), 2) for k, v in times.items()}
    med["prompt tokens, full"], med["prompt tokens, compressed"] = ids.shape[1], out.mask.shape[1]
    return med
