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
