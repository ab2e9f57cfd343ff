"""`mmspec bench vlm` end to end on the bundled shapes-VLM pair (one scene, one repetition: a smoke run, no timing
claims): every row present with the documented keys, lossless methods identical to plain decoding."""

from __future__ import annotations

import json

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
    assert data["meta"]["scenes"] == 1


def test_bench_video_cli_on_bundled_models(tmp_path, capsys):
    """`mmspec bench video` on the bundled shapes-video models: every method present, lossless ones identical to plain
    decoding, prefill and decode times reported separately, drafter visual-token budgets recorded."""
    out = tmp_path / "video.json"
    main(["bench", "video", "--clips", "1", "--reps", "1", "--max-new-tokens", "32", "--json", str(out)])
    assert "| drafter visual tokens |" in capsys.readouterr().out
    data = json.loads(out.read_text())
    rows = {r["method"]: r for r in data["rows"]}
    assert data["meta"]["visual_tokens_per_clip"] == 64
    for r in rows.values():
        assert r["identical_to_ar"] is True or not r["lossless"], r["method"]
        assert r["prefill_seconds_median"] is not None and r["decode_seconds_median"] is not None, r["method"]
    for family in ("STD keep", "EAGLE head K=", "query adaptor", "grid-pool 16 visual tokens", "HF assisted small video-LM"):
        assert any(family in name for name in rows), family
    assert rows["mmspec small video-LM K=5"]["mean_accepted_tokens"] > 2.0
    assert rows["mmspec EAGLE head K=5"]["mean_accepted_tokens"] > 2.0
    assert rows["mmspec STD keep 16 K=5"]["params"]["visual_tokens"] == 16


def test_bench_video_cost_breakdowns(capsys):
    main(["bench", "video", "--drafter-prefill"])
    out = capsys.readouterr().out
    assert "LM prefill, compressed" in out and "prompt tokens, compressed: 21" in out
    main(["bench", "video", "--std-scaling", "64,128"])
    assert "| 128 |" in capsys.readouterr().out
