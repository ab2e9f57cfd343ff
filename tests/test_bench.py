"""`mmspec bench vlm` end to end on the bundled shapes-VLM pair (one scene, one repetition: a smoke run, no timing
claims): every row present with the documented keys, lossless methods identical to plain decoding."""

from __future__ import annotations

import json

import pytest

import torch

from mmspec.cli import main


def test_bench_vlm_cli_writes_rows(tmp_path, capsys):
    out = tmp_path / "bench.json"
    main(["bench", "vlm", "--scenes", "1", "--reps", "1", "--ks", "4", "--json", str(out), "--plot", str(tmp_path / "b.png")])
    assert "| method |" in capsys.readouterr().out
    data = json.loads(out.read_text())
    rows = {r["method"]: r for r in data["rows"]}
    for r in rows.values():
        assert {"method", "lossless", "mean_accepted_tokens", "speedup_vs_ar", "speedup_vs_hf", "identical_to_ar"} <= set(r)
        assert r["identical_to_ar"] is True or not r["lossless"], r["method"]
    plain = rows["plain greedy (HF generate)"]
    assert plain["mean_accepted_tokens"] == 1.0 and plain["speedup_vs_ar"] == 1.0
    spec = rows["mmspec small-VLM K=4"]
    assert spec["mean_accepted_tokens"] > 2.0  # the trained small-VLM drafter agrees with the target
    assert spec["speedup_vs_hf"] is not None and "HF assisted small-VLM K=4" in rows
    assert (tmp_path / "b.png").stat().st_size > 1000
    assert data["meta"]["inputs"] == 1


def test_bench_video_cli_on_bundled_models(tmp_path, capsys):
    """`mmspec bench video` on the bundled shapes-video models: every method present, lossless ones identical to plain
    decoding, prefill and decode times reported separately, drafter visual-token budgets recorded."""
    out = tmp_path / "video.json"
    main(["bench", "video", "--clips", "1", "--reps", "1", "--max-new-tokens", "32", "--json", str(out)])
    assert "| drafter visual tokens |" in capsys.readouterr().out
    data = json.loads(out.read_text())
    rows = {r["method"]: r for r in data["rows"]}
    assert data["meta"]["visual_tokens"] == 64
    for r in rows.values():
        assert r["identical_to_ar"] is True or not r["lossless"], r["method"]
        assert r["prefill_seconds_median"] is not None and r["decode_seconds_median"] is not None, r["method"]
    for family in ("STD keep", "EAGLE head K=", "query adaptor", "grid-pool 16/64 visual tokens", "HF assisted small video-LM"):
        assert any(family in name for name in rows), family
    assert rows["mmspec small video-LM K=5"]["mean_accepted_tokens"] > 2.0
    assert rows["mmspec EAGLE head K=5"]["mean_accepted_tokens"] > 2.0
    assert rows["mmspec STD keep 16 of 64 visual KV K=5"]["params"]["visual_tokens"] == 16


def test_bench_video_long_cli_on_bundled_models(tmp_path, capsys):
    """`mmspec bench video --long` on the bundled shapes-video-long target (2 clips at 2x, one batch): plain vs STD
    with aligned and per-row commits, identical to plain; HF assisted generation (batch 1 only) is reported as
    skipped at batch 2."""
    out = tmp_path / "long.json"
    main(["bench", "video", "--long", "--clips", "2", "--batch", "2", "--slowdown", "2", "--reps", "1",
          "--max-new-tokens", "16", "--json", str(out)])  # fmt: skip
    printed = capsys.readouterr().out
    assert "batch 2, 16 frames per clip" in printed and "caption accuracy" in printed
    data = json.loads(out.read_text())
    rows = {r["method"]: r for r in data["rows"]}
    assert data["meta"]["visual_tokens"] == 128 and data["meta"]["slowdown"] == 2
    assert {"mmspec STD keep 16 K=5, rows aligned", "mmspec STD keep 16 K=5, rows independent",
            "mmspec STD keep 64 K=5, rows independent"} <= set(rows)  # fmt: skip
    for r in rows.values():
        assert r["identical_to_ar"] is True, r["method"]
    assert "HF assisted small video-LM K=5" in data["meta"]["skipped"]


def test_bench_video_cost_breakdowns(capsys):
    from mmspec.zoo import ZOO

    main(["bench", "video", "--drafter-prefill"])
    out = capsys.readouterr().out
    assert "set-up, grid-pool 16: LM prefill:" in out and "prompt tokens, grid-pool 16: 21" in out
    # the bundled adaptor reads the target's features: its drafter set-up and its parts (timed inside the session)
    assert "set-up, query adaptor 16 (target-features):" in out and "set-up, query adaptor 16 (target-features): LM prefill:" in out
    other = str(ZOO.get("shapes-video").path)  # another copy's adaptor drafter, timed in the same loop
    main(["bench", "video", "--drafter-prefill", "--compare-zoo-path", other])
    out = capsys.readouterr().out
    assert "set-up, query adaptor 16 (target-features; bundled):" in out
    assert f"set-up, query adaptor 16 (target-features; {other}):" in out
    main(["bench", "video", "--std-scaling", "64,128"])
    assert "| 128 |" in capsys.readouterr().out


def test_bench_image_ar_cli_on_bundled_models(tmp_path, capsys):
    """`mmspec bench image-ar` on the bundled shapes-t2i models (a smoke run: 24 images, one repetition, a few
    methods): rows with step compression, wall speedup, judge accuracy and Fréchet distance; the plot is written."""
    out, plot = tmp_path / "image_ar.json", tmp_path / "sweep.png"
    main(["bench", "image-ar", "--classes", "12", "--per-class", "2", "--batch", "12", "--reps", "1",
          "--only", "mc-sjd W=32 repeat-init,lantern-jacobi δ=0.2", "--json", str(out), "--plot", str(plot)])  # fmt: skip
    assert "| step compression (per image) |" in capsys.readouterr().out
    data = json.loads(out.read_text())
    rows = {r["method"]: r for r in data["rows"]}
    mc = rows["mc-sjd W=32 repeat-init"]
    assert {"plain", "plain (run 2)", "plain (run 3)", "HF generate (CFG, sampling)", "lantern-jacobi δ=0.2"} <= set(rows)
    assert rows["plain"]["step_compression"] == 1.0 and rows["plain"]["lossless"]
    assert mc["step_compression"] > 1.5 and mc["lossless"]
    assert not rows["lantern-jacobi δ=0.2"]["lossless"]
    assert rows["plain"]["condition_accuracy"] > 0.5  # the trained target draws what it is asked for
    assert all(r["frechet_distance"] >= 0 for r in rows.values())
    assert plot.stat().st_size > 1000 and data["meta"]["images"] == 24


def test_bench_diffusion_cli_on_bundled_models(tmp_path, capsys):
    """`mmspec bench diffusion` on the bundled shapes-ddpm model (a smoke run: 12 images, 20 steps, a few methods):
    rows with rounds, evaluations, wall speedups vs plain and vs the diffusers loop, judge quality; plot written."""
    out, plot = tmp_path / "diffusion.json", tmp_path / "lookahead.png"
    main(["bench", "diffusion", "--classes", "12", "--per-class", "1", "--batch", "12", "--steps", "20",
          "--lookaheads", "2,4", "--only", "speculative,asd", "--json", str(out), "--plot", str(plot)])  # fmt: skip
    assert "| round compression (batch) |" in capsys.readouterr().out
    data = json.loads(out.read_text())
    rows = {r["method"]: r for r in data["rows"]}
    assert {"plain", "plain (run 2)", "plain (run 3)", "diffusers loop (scale_model_input + step)", "speculative L=2",
            "asd L=4"} <= set(rows)  # fmt: skip
    assert rows["plain"]["round_compression"] == 1.0 and rows["plain"]["evaluations_per_sample"] == 20
    assert rows["asd L=4"]["lossless"] and rows["asd L=4"]["round_compression"] > 1.2
    assert rows["asd L=4"]["sample_round_compression"] >= rows["asd L=4"]["round_compression"]
    assert all(r["frechet_distance"] >= 0 and 0 <= r["condition_accuracy"] <= 1 for r in rows.values())
    assert plot.stat().st_size > 1000 and data["meta"]["images"] == 12 and data["meta"]["sampler"] == "ddpm"


def test_ratios_are_per_repetition_and_a_drifting_baseline_is_flagged(capsys):
    """Load that changes mid-run (repetition 2 runs 3x slower for everyone) leaves per-repetition ratios intact,
    while the baseline's drift is reported loudly and marks the rows."""
    from mmspec.bench.harness import Method, RunResult, baseline_drift, markdown_table, per_rep_ratio, summarise

    seconds = {"plain": [1.0, 3.0, 1.0], "fast": [0.5, 1.5, 0.5], "hf": [0.9, 2.7, 0.9]}
    r = per_rep_ratio(seconds, "fast", ["plain"])
    assert (r.median, r.low, r.high) == (2.0, 2.0, 2.0)
    assert baseline_drift(seconds, ["plain"]) == 2.0 and "drifted by 200%" in capsys.readouterr().err
    tokens = torch.ones(1, 10, dtype=torch.long)
    results = {name: [RunResult(tokens, 10, 10, overhead_seconds=0.01, rounds=5)] for name in seconds}
    methods = [Method("plain", "ar", "none", True, None), Method("fast", "mmspec", "small", True, None),
               Method("hf", "hf", "small", True, None)]  # fmt: skip
    rows = {row.method: row for row in summarise(methods, seconds, results, pad_token_id=0)}
    assert rows["fast"].speedup_vs_ar == 2.0 and rows["fast"].speedup_vs_ar_range == (2.0, 2.0)
    assert rows["fast"].speedup_vs_hf == 1.8 and rows["fast"].unstable_baseline and rows["fast"].overhead_ms_per_round == 2.0
    assert "unstable baseline" in markdown_table(list(rows.values()))
    steady = {"plain": [1.0, 1.1, 1.0], "fast": [0.5, 0.6, 0.4]}
    assert baseline_drift(steady, ["plain"]) < 0.2 and per_rep_ratio(steady, "fast", ["plain"]).range == (1.833, 2.5)


def test_interleaved_seconds_warms_up_then_times_each_callable_per_repetition():
    from mmspec.timing import interleaved_seconds

    calls = {"a": 0, "b": 0}

    def bump(name):
        calls[name] += 1

    out = interleaved_seconds({"a": lambda: bump("a"), "b": lambda: bump("b")}, reps=3)
    assert calls == {"a": 4, "b": 4} and set(out) == {"a", "b"} and all(v >= 0 for v in out.values())
    with pytest.raises(ValueError, match="reps"):
        interleaved_seconds({"a": lambda: None}, reps=0)
