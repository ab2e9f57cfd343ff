"""The ``mmspec`` command: demo, bench (vlm, video, image-ar, diffusion, verifiers), verifiers, zoo train."""

from __future__ import annotations

import argparse
from pathlib import Path


def demo(args) -> None:
    """Caption a few held-out scenes with plain greedy decoding and with speculative decoding; compare."""
    from . import VLMSpeculator, zoo
    from .zoo.shapes import make_scene
    from .zoo.shapes_vlm import IMAGE_SIZE

    from .timing import interleaved_seconds

    m = zoo.load("shapes-vlm")
    spec = VLMSpeculator(m.target, m.processor, drafter=m.drafter_vlm, num_draft_tokens=args.k)
    scenes = [make_scene(i, "test") for i in range(args.scenes)]
    images = [s.render(IMAGE_SIZE) for s in scenes]
    encs = [spec.prepare(image, "caption :") for image in images]
    committed = rounds = 0
    for s, image, enc in zip(scenes, images, encs):
        ref = m.target.generate(**enc, do_sample=False, max_new_tokens=48)
        out = spec.generate(image, "caption :", max_new_tokens=48)
        committed += sum(r.committed for r in out.stats.rounds)
        rounds += len(out.stats.rounds)
        plain = m.processor.tokenizer.decode(ref[0, enc["input_ids"].shape[1] :], skip_special_tokens=True).strip()
        pad = " " * (len(str(s.seed)) + 7)
        print(f"scene {s.seed}: truth       {s.caption()}")
        print(f"{pad} plain       {plain}")
        print(f"{pad} speculative {out.texts[0]}")
        print(f"{pad} identical to plain: {plain == out.texts[0]}, target forwards {out.stats.target_forwards} "
              f"for {out.new_tokens.shape[1]} tokens, mean accepted tokens {out.stats.mean_accepted_tokens:.2f}")  # fmt: skip
    seconds = interleaved_seconds({
        "plain": lambda: [m.target.generate(**enc, do_sample=False, max_new_tokens=48) for enc in encs],
        "spec": lambda: [spec.generate(image, "caption :", max_new_tokens=48) for image in images]}, args.reps)  # fmt: skip
    plain_s, spec_s = seconds["plain"], seconds["spec"]
    print(f"\nsmall-VLM drafter, K={args.k}: mean accepted tokens {committed / max(1, rounds):.2f} per target forward")
    print(f"plain greedy {plain_s:.2f}s, speculative {spec_s:.2f}s for the {len(scenes)} scenes: {plain_s / spec_s:.2f}x on "
          f"this machine (medians of {args.reps} interleaved runs; `mmspec bench vlm` for per-run ratios and the HF "
          "comparison)")  # fmt: skip


def bench(args) -> None:
    from .bench.tokens import print_report
    from .bench.vlm import bench_vlm

    ks = tuple(int(k) for k in args.ks.split(","))
    rows, meta = bench_vlm(scenes=args.scenes, reps=args.reps, max_new_tokens=args.max_new_tokens,
                           json_path=args.json, plot_path=args.plot, ks=ks)  # fmt: skip
    print_report(rows, meta, args.json)


def bench_video(args) -> None:
    from . import zoo
    from .bench.tokens import print_report
    from .bench.video import bench_video as run

    models = _zoo(args, "shapes-video")
    if args.std_scaling:
        from .bench.video import std_scaling, std_scaling_table

        contexts = tuple(int(c) for c in args.std_scaling.split(","))
        batch = args.batch or 1
        print(f"\nSTD cost model: one decode step, dense vs sparse view, shapes-video target (synthetic contexts, "
              f"batch {batch})\n")  # fmt: skip
        print(std_scaling_table(std_scaling(models.target, contexts, keep=16, k=5, batch=batch), keep=16, k=5))
        return
    if args.drafter_prefill:
        from .bench.video import drafter_prefill_breakdown

        others = {path: zoo.load("shapes-video", path=path) for path in args.compare_zoo_path or ()}
        print("\ndrafter set-up, ms per clip (medians; set-up over 8 clips, parts on the first; grid-pool keeps 16):")
        for key, value in drafter_prefill_breakdown(models, others=others).items():
            print(f"  {key}: {value}")
        return
    if args.long:
        from .bench.video import bench_video_long

        long_models = zoo.load("shapes-video-long", path=args.long_zoo_path) if args.long_zoo_path else None
        rows, meta = bench_video_long(clips=args.clips or 16, batch=args.batch or 16, slowdown=args.slowdown, reps=args.reps,
                                      max_new_tokens=args.max_new_tokens, json_path=args.json, plot_path=args.plot,
                                      models=long_models, drafter=models.drafter_vlm)  # fmt: skip
    else:
        rows, meta = run(clips=args.clips or 8, reps=args.reps, max_new_tokens=args.max_new_tokens, json_path=args.json,
                         plot_path=args.plot, models=models, methods_filter=args.only)  # fmt: skip
    print_report(rows, meta, args.json)


def bench_image_ar(args) -> None:
    from .bench.image_ar import bench_image_ar as run, image_ar_table, save_sweep_plot

    rows, meta = run(_zoo(args, "shapes-t2i"), per_class=args.per_class, batch=args.batch, reps=args.reps,
                     cfg_scale=args.cfg_scale, window=args.window, only=_only(args), classes=args.classes)  # fmt: skip
    _quality_report(args, f"image-ar — shapes-t2i, {meta['images']} images, batch {meta['batch']}, temperature 1, "
                          f"CFG {meta['cfg_scale']}", image_ar_table(rows), "plain-AR", rows, meta, save_sweep_plot, "sweep plot")  # fmt: skip


def bench_diffusion(args) -> None:
    from .bench.diffusion import bench_diffusion as run, diffusion_table, save_lookahead_plot

    rows, meta = run(_zoo(args, "shapes-ddpm"), per_class=args.per_class, classes=args.classes, batch=args.batch,
                     reps=args.reps, steps=args.steps, sampler=args.sampler, eta=args.eta, cfg_scale=args.cfg_scale,
                     lookaheads=tuple(int(v) for v in args.lookaheads.split(",")), only=_only(args))  # fmt: skip
    _quality_report(args, f"diffusion — shapes-ddpm, {meta['images']} images, batch {meta['batch']}, {meta['sampler']} "
                          f"{meta['steps']} steps, CFG {meta['cfg_scale']}", diffusion_table(rows), "plain", rows, meta,
                    save_lookahead_plot, "lookahead plot")  # fmt: skip


def _zoo(args, name: str):
    from . import zoo

    return zoo.load(name, path=args.zoo_path)


def _only(args) -> list[str] | None:
    return args.only.split(",") if args.only else None


def _quality_report(args, title: str, table: str, plain: str, rows, meta, save_plot, plot_name: str) -> None:
    """Print a quality bench's (image-ar, diffusion) table with its plain-run quality; write --json and --plot."""
    from .bench.harness import save_json

    print(f"\nmmspec bench {title}, {meta['reps']} interleaved reps; {meta['machine']}\n\n{table}")
    print(f"\n{plain} runs: accuracy {meta['plain_accuracy']}, Fréchet {meta['plain_frechet']}; "
          f"real-vs-real Fréchet (estimator floor) {meta['real_vs_real_frechet']}")  # fmt: skip
    if args.json:
        save_json(rows, args.json, meta)
        print(f"rows written to {args.json}")
    if args.plot:
        save_plot(rows, args.plot, meta)
        print(f"{plot_name} written to {args.plot}")


def bench_verifiers(args) -> None:
    from .bench.verifiers import bench_verifiers as run, markdown

    rows, meta = run(batch=args.batch, k=args.k, vocab=args.vocab, reps=args.reps, json_path=args.json)
    print("\nmmspec bench verifiers — vectorised rule vs per-position reference loop\n")
    print(markdown(rows, meta))


def app(args) -> None:
    from .app import launch

    print(f"mmspec app on http://{args.host}:{args.port} (Ctrl+C stops it)")
    launch(args.host, args.port, tabs=args.tabs.split(",") if args.tabs else None)


def report(args) -> None:
    from .app.report import write_report

    print(f"benchmark report written to {write_report(args.folder, args.out)}")


def verifiers(args) -> None:
    from .verifiers.base import verifier_table

    print(verifier_table())


def zoo_train(args) -> None:
    from .zoo import ZOO

    entry = ZOO.get(args.name)
    options = {"smoke": True} if args.smoke else {}
    if args.only:
        options["only"] = tuple(args.only.split(","))
    for key in ("target_steps", "target_lr"):
        if getattr(args, key) is not None:
            options[key] = getattr(args, key)
    card = entry.train(args.out or entry.path, **options)
    print(card)


def zoo_checksum(args) -> None:
    from .zoo import ZOO
    from .zoo.integrity import record, verify

    entry = ZOO.get(args.name)
    root = Path(args.path) if args.path else entry.path
    if args.check:
        verify(root, args.name)
        print(f"{args.name}: every file under {root} matches its recorded sha256")
        return
    print(f"{args.name}: recorded the sha256 of every file under {root} in {record(root)}")


ONLY_ROWS = "run only rows whose name contains one of these (comma-separated)"


def _outputs(p, *, reps: int, plot: str | None = None, zoo: str | None = None, only: str | None = None) -> None:
    """The options every bench shares: repetitions, --json, and where they apply --plot, --zoo-path, --only."""
    p.add_argument("--reps", type=int, default=reps, help="interleaved timed repetitions (after one warm-up)")
    p.add_argument("--json", default=None, help="write the rows as JSON here")
    if plot:
        p.add_argument("--plot", default=None, help=f"write {plot} (PNG) here")
    if zoo:
        p.add_argument("--zoo-path", default=None, help=f"load the {zoo} models from here (default: bundled)")
    if only:
        p.add_argument("--only", default=None, help=only)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="mmspec")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("demo", help="caption generated scenes, speculative vs plain decoding")
    p.add_argument("--scenes", type=int, default=4)
    p.add_argument("--k", type=int, default=5, help="draft length (5 is the best K in BENCHMARKS.md)")
    p.add_argument("--reps", type=int, default=3, help="interleaved timed repetitions (medians are shown)")
    p.set_defaults(func=demo)
    b = sub.add_parser("bench", help="benchmarks").add_subparsers(dest="bench_command", required=True)
    v = b.add_parser("vlm", help="shapes-VLM: plain greedy vs mmspec drafters/verifiers vs HF assisted generation")
    v.add_argument("--scenes", type=int, default=8, help="held-out scenes to caption")
    v.add_argument("--max-new-tokens", type=int, default=48)
    v.add_argument("--ks", default="2,3,4,5,6,8", help="draft lengths for the small-VLM drafter (comma-separated)")
    _outputs(v, reps=5, plot="a speedup bar chart")
    v.set_defaults(func=bench)
    vv = b.add_parser("video", help="shapes-video: plain greedy vs mmspec drafters (STD, EAGLE, compression) vs HF")
    vv.add_argument("--clips", type=int, default=None, help="held-out clips to caption (8; with --long: 16)")
    vv.add_argument("--max-new-tokens", type=int, default=64)
    _outputs(vv, reps=5, plot="a speedup bar chart", zoo="shapes-video",
             only="run only methods whose name contains this (plus plain decoding)")  # fmt: skip
    vv.add_argument("--std-scaling", default=None, metavar="N1,N2,...",
                    help="instead: STD draft-step vs dense-step cost at these visual context lengths")  # fmt: skip
    vv.add_argument("--drafter-prefill", action="store_true",
                    help="instead: where the small drafter's set-up time goes (vision, compression, LM prefill)")  # fmt: skip
    vv.add_argument("--compare-zoo-path", action="append", default=None, metavar="PATH",
                    help="with --drafter-prefill: also time the adaptor drafter of this shapes-video copy (same "
                         "target, e.g. another adaptor query count), in the same loop; repeatable")  # fmt: skip
    vv.add_argument("--long", action="store_true",
                    help="instead: STD on long clips (shapes-video-long target, clips rendered --slowdown times "
                         "slower, --batch clips per call), plain vs STD with aligned and per-row commits")  # fmt: skip
    vv.add_argument("--slowdown", type=int, default=16, help="with --long: frames per event step (16: 1,024 video tokens)")
    vv.add_argument("--batch", type=int, default=None,
                    help="with --long: clips captioned per call (16); with --std-scaling: rows per step (1)")
    vv.add_argument("--long-zoo-path", default=None, help="with --long: load shapes-video-long from here")
    vv.set_defaults(func=bench_video)
    ia = b.add_parser("image-ar", help="shapes-t2i: plain AR vs SJD / MC-SJD / LANTERN / GSD (speed and quality)")
    ia.add_argument("--per-class", type=int, default=4, help="images per condition (108 conditions)")
    ia.add_argument("--classes", type=int, default=None, help="use only the first N conditions (default: all 108)")
    ia.add_argument("--batch", type=int, default=54, help="images generated per call")
    ia.add_argument("--cfg-scale", type=float, default=2.0, help="classifier-free guidance scale (2.0: the best plain-AR quality on shapes-t2i)")
    ia.add_argument("--window", type=int, default=32, help="Jacobi window (draft slots)")
    _outputs(ia, reps=3, plot="the speedup-vs-quality sweep plot", zoo="shapes-t2i", only=ONLY_ROWS)
    ia.set_defaults(func=bench_image_ar)
    d = b.add_parser("diffusion", help="shapes-ddpm: plain sampler vs speculative / ASD / Picard / forecast gating")
    d.add_argument("--per-class", type=int, default=2, help="images per condition")
    d.add_argument("--classes", type=int, default=None, help="use only the first N of the 108 conditions (default: all)")
    d.add_argument("--batch", type=int, default=54, help="images sampled per call")
    d.add_argument("--steps", type=int, default=100, help="sampler steps")
    d.add_argument("--sampler", default="ddpm", help="ddpm, ddim (with --eta) or euler-ancestral")
    d.add_argument("--eta", type=float, default=None, help="DDIM noise scale (ddim only; 0 = deterministic)")
    d.add_argument("--cfg-scale", type=float, default=1.0, help="classifier-free guidance scale (1.0: none)")
    d.add_argument("--lookaheads", default="2,4,8", help="lookaheads L of the speculative / ASD rows")
    _outputs(d, reps=1, plot="the lookahead sweep plot", zoo="shapes-ddpm", only=ONLY_ROWS)
    d.set_defaults(func=bench_diffusion)
    w = b.add_parser("verifiers", help="every acceptance rule: vectorised vs a per-position reference loop")
    w.add_argument("--batch", type=int, default=8)
    w.add_argument("--k", type=int, default=8, help="draft length")
    w.add_argument("--vocab", type=int, default=16384, help="vocabulary size (state dimension for continuous rules)")
    _outputs(w, reps=5)
    w.set_defaults(func=bench_verifiers)
    a = sub.add_parser("app", help="the Gradio app: every modality, plain vs speculative, in a browser")
    a.add_argument("--host", default="127.0.0.1")
    a.add_argument("--port", type=int, default=7860)
    a.add_argument("--tabs", default=None, help="only these tabs, comma-separated (default: all)")
    a.set_defaults(func=app)
    r = sub.add_parser("report", help="the committed benchmark JSON files as one self-contained HTML page")
    r.add_argument("--folder", default="benchmarks", help="where the bench-*.json files are")
    r.add_argument("--out", default="report.html")
    r.set_defaults(func=report)
    sub.add_parser("verifiers", help="table of every registered verifier (markdown)").set_defaults(func=verifiers)
    z = sub.add_parser("zoo", help="zoo entries").add_subparsers(dest="zoo_command", required=True)
    t = z.add_parser("train", help="retrain a zoo entry from scratch")
    t.add_argument("name")
    t.add_argument("--out", default=None, help="output folder (default: the bundled weights folder)")
    t.add_argument("--smoke", action="store_true", help="a few steps only (checks the recipe runs)")
    t.add_argument("--only", default=None, help="retrain just these models, comma-separated (e.g. target)")
    t.add_argument("--target-steps", type=int, default=None, help="optimizer steps for the target (default: the recipe's)")
    t.add_argument("--target-lr", type=float, default=None, help="peak learning rate for the target (default 1e-3)")
    t.set_defaults(func=zoo_train)
    c = z.add_parser("checksum", help="record the sha256 of an entry's files in its card (after retraining in place)")
    c.add_argument("name")
    c.add_argument("--path", default=None, help="the entry's folder (default: the bundled weights folder)")
    c.add_argument("--check", action="store_true", help="verify instead of recording")
    c.set_defaults(func=zoo_checksum)
    args = parser.parse_args(argv)
    args.func(args)


if __name__ == "__main__":
    main()
