"""The README's Python example runs as written (the README stays honest)."""

from __future__ import annotations

import re
from pathlib import Path


def test_readme_examples_run():
    """Every ```python block, in order, in one namespace (later blocks may use names from earlier ones)."""
    text = (Path(__file__).parents[1] / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) >= 2
    scope: dict = {}
    for block in blocks:
        scope.pop("out", None)
        exec(compile(block, "README.md", "exec"), scope)
        out = scope["out"]
        if hasattr(out, "texts"):  # text generation (VLM, video)
            assert out.texts and out.stats.mean_accepted_tokens >= 1.0
        elif hasattr(out, "codes"):  # image AR
            assert out.images and out.stats.compression >= 1.0
        else:  # diffusion
            assert out.images and out.stats.batch_compression >= 1.0 and out.lossless


def test_readme_verifier_table_is_current():
    from mmspec.verifiers.base import verifier_table

    text = (Path(__file__).parents[1] / "README.md").read_text()
    table = text.split("<!-- verifier-table -->\n", 1)[1].split("\n<!-- /verifier-table -->", 1)[0]
    assert table == verifier_table(), "README's verifier table is stale: paste the output of `mmspec verifiers`"
