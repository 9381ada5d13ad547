"""Draw the committed plots of docs/benchmarks.md from bench/results/*.json (plain SVG).

python -m bench.plot
"""

from __future__ import annotations

import json
import math
from html import escape

from bench.harness import RESULTS, ROOT

OUT = ROOT / "docs" / "benchmarks"
ROW, LABEL_W, BAR_W = 22, 300, 360


def bar_chart(title: str, bars: list[tuple[str, float]], unit: str, *, log: bool = False) -> str:
    """Return an SVG of horizontal bars, one per (label, value); log scale when asked."""
    bars = [(label, value) for label, value in bars if value is not None]
    top = max((value for _, value in bars), default=1) or 1

    def length(value: float) -> float:
        if log:
            low = min(v for _, v in bars if v > 0) / 2
            return BAR_W * math.log(max(value, low) / low) / math.log(top / low)
        return BAR_W * value / top

    height = 40 + ROW * len(bars)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{LABEL_W + BAR_W + 110}" '
        f'height="{height}" font-family="sans-serif" font-size="12">',
        f'<text x="8" y="18" font-weight="bold">{escape(title)}'
        f"{' (log scale)' if log else ''}</text>",
    ]
    for i, (label, value) in enumerate(bars):
        y = 30 + i * ROW
        shade = "#c0392b" if "per-token" in label or "naive" in label else "#2c7fb8"
        if "bare" in label or "floor" in label or "static" in label:
            shade = "#7f8c8d"
        parts.append(f'<text x="8" y="{y + 14}">{escape(label)}</text>')
        parts.append(
            f'<rect x="{LABEL_W}" y="{y + 3}" width="{max(1.0, length(value)):.1f}" '
            f'height="{ROW - 6}" fill="{shade}"/>'
        )
        parts.append(
            f'<text x="{LABEL_W + max(1.0, length(value)) + 6:.1f}" y="{y + 14}">'
            f"{value:,.0f} {escape(unit)}</text>"
        )
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def load(name: str) -> dict | None:
    path = RESULTS / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    fanout = load("fanout")
    if fanout:
        bars = []
        for key, figures in fanout["data"].items():
            bars.append((f"{key} P99", figures.get("lag_p99_ms")))
        (OUT / "fanout-lag.svg").write_text(
            bar_chart("Fan-out: delta lag P99, provider emit to client", bars, "ms", log=True)
        )
    render = load("render")
    if render:
        bars = [(f"{name}: script time", f["script_ms"]) for name, f in render["data"].items()]
        (OUT / "render-script.svg").write_text(
            bar_chart("Browser: main-thread script time, 50,000-character report", bars, "ms")
        )
    first = load("first_text")
    if first:
        from bench.harness import percentile

        bars = []
        for name, samples in first["data"]["samples_ms"].items():
            for p in (50, 95):
                bars.append((f"{name} P{p}", percentile(samples, p)))
        (OUT / "first-text.svg").write_text(
            bar_chart("Click to first visible text, minus the provider's TTFT", bars, "ms")
        )
    print(f"plots in {OUT}")


if __name__ == "__main__":
    main()
