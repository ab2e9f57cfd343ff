"""The results page: the committed benchmark JSON files (``benchmarks/bench-*.json``) as one self-contained HTML
file (``mmspec report``) or the app's results tab — a table and a plot per benchmark: speedup against plain
decoding and against the peer a user would otherwise pick, and quality next to speed for the lossy methods."""

from __future__ import annotations

import base64
import html
import io
import json
from pathlib import Path

from .base import APP_TABS, AppTab

# per kind of row: (speedup vs plain, speedup vs the peer, the peer's name, what one target call yields)
SPEED_KEYS = [
    ("speedup_vs_plain", "speedup_vs_diffusers", "diffusers' loop", "round_compression"),
    ("speedup_vs_ar", "speedup_vs_hf", "Hugging Face", "mean_accepted_tokens"),
]
QUALITY_KEYS = ("condition_accuracy", "frechet_distance")


def load_results(folder: str | Path) -> list[tuple[str, dict]]:
    """(file stem, {"meta", "rows"}) for every ``bench-*.json`` in ``folder``, sorted by name."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"folder: no such benchmark folder {str(folder)!r}")
    out = []
    for path in sorted(folder.glob("bench-*.json")):
        data = json.loads(path.read_text())
        if not isinstance(data, dict) or not isinstance(data.get("rows"), list):
            raise ValueError(f"{path}: expected a bench JSON object with 'meta' and 'rows', got {type(data).__name__}")
        out.append((path.stem, data))
    if not out:
        raise FileNotFoundError(f"folder: no bench-*.json files in {str(folder)!r}")
    return out


def _keys(row: dict) -> tuple[str, str, str, str]:
    for keys in SPEED_KEYS:
        if keys[0] in row:
            return keys
    raise ValueError(f"rows: expected a speedup column ({', '.join(k[0] for k in SPEED_KEYS)}), got {sorted(row)}")


def _cell(value) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.3g}"
    return html.escape(str(value))


def table_html(rows: list[dict]) -> str:
    plain, peer, peer_name, per_call = _keys(rows[0])
    quality = [k for k in QUALITY_KEYS if k in rows[0]]
    headers = ["method", "lossless", per_call.replace("_", " "), "speedup vs plain", f"vs {peer_name}", *quality]
    lines = ["<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in headers) + "</tr>"]
    for r in rows:
        cells = [r.get("method"), r.get("lossless"), r.get(per_call), r.get(plain), r.get(peer), *[r.get(q) for q in quality]]
        lossy = "" if r.get("lossless", True) else ' class="lossy"'
        lines.append(f"<tr{lossy}>" + "".join(f"<td>{_cell(c)}</td>" for c in cells) + "</tr>")
    return "\n".join(lines + ["</table>"])


def speed_figure(rows: list[dict], title: str):
    """Speedup vs plain and vs the peer per method (bars); with quality columns, speed against quality too."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plain, peer, peer_name, _ = _keys(rows[0])
    quality = "condition_accuracy" if "condition_accuracy" in rows[0] else None
    fig, axes = plt.subplots(1, 2 if quality else 1, figsize=(12 if quality else 8, 0.3 * len(rows) + 1.5),
                             layout="constrained", squeeze=False)  # fmt: skip
    names = [r["method"] for r in rows][::-1]
    ax = axes[0, 0]
    y = range(len(rows))
    ax.barh([i + 0.2 for i in y], [r.get(plain) or 0 for r in rows][::-1], height=0.4, label="vs plain", color="#1f77b4")
    ax.barh([i - 0.2 for i in y], [r.get(peer) or 0 for r in rows][::-1], height=0.4, label=f"vs {peer_name}",
            color="#ff7f0e")  # fmt: skip
    ax.set_yticks(list(y), names, fontsize=7)
    ax.axvline(1.0, color="black", lw=0.8)
    ax.set_xlabel("wall-clock speedup (medians)")
    ax.legend(fontsize=7)
    if quality:
        ax = axes[0, 1]
        for lossless, marker, label in ((True, "s", "lossless"), (False, "o", "lossy")):
            pts = [r for r in rows if bool(r.get("lossless")) == lossless and r.get(plain) is not None]
            ax.scatter([r[plain] for r in pts], [r[quality] for r in pts], marker=marker, label=label)
        ax.set_xlabel("speedup vs plain")
        ax.set_ylabel(quality.replace("_", " "))
        ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    plt.close(fig)
    return fig


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    return base64.b64encode(buf.getvalue()).decode()


def report_html(folder: str | Path) -> str:
    """One self-contained HTML page (tables, inline PNG plots) for every benchmark file in ``folder``."""
    parts = ["<!doctype html><html><head><meta charset='utf-8'><title>mmspec benchmarks</title><style>"
             "body{font-family:sans-serif;margin:2em} table{border-collapse:collapse;font-size:12px}"
             "td,th{border:1px solid #ccc;padding:2px 6px} tr.lossy td{background:#fff4e0}</style></head><body>",
             "<h1>mmspec benchmarks</h1><p>Lossy rows are shaded; every speedup is measured side by side with plain "
             "decoding and the peer in the same run (BENCHMARKS.md explains each).</p>"]  # fmt: skip
    for stem, data in load_results(folder):
        meta = data.get("meta", {})
        title = f"{stem}: {meta.get('task', meta.get('benchmark', ''))}"
        parts.append(f"<h2>{html.escape(title)}</h2><p>{html.escape(str(meta.get('machine', '')))}</p>")
        if data["rows"]:
            parts.append(table_html(data["rows"]))
            parts.append(f"<p><img alt='{html.escape(stem)}' src='data:image/png;base64,{_png(speed_figure(data['rows'], title))}'></p>")
    return "\n".join(parts + ["</body></html>"])


def write_report(folder: str | Path, out: str | Path) -> Path:
    out = Path(out)
    text = report_html(folder)
    tmp = out.with_suffix(out.suffix + ".tmp")
    tmp.write_text(text)
    tmp.replace(out)  # never a half-written page
    return out


BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"  # the committed results (a source checkout)


@APP_TABS.register("results")
class ResultsTab(AppTab):
    """The committed benchmark results as the report page renders them."""

    title = "benchmark results"
    order = 90

    def build(self) -> None:
        import gradio as gr

        try:
            page = report_html(BENCHMARKS)
        except (FileNotFoundError, ValueError) as e:
            page = f"<p>{html.escape(str(e))}</p>"
        gr.HTML(page, elem_id="results")
