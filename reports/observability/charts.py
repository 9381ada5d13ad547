"""Server-rendered SVG charts: percentile bars and stage waterfalls.

No script and no `style` attribute (the Content-Security-Policy refuses both): shapes
carry classes, coloured by static/css/observability.css, and a `<title>` each, which
browsers show on hover.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from reports.observability.percentiles import Figure, Summary

LABEL_W = 250  # left column: the row labels
PLOT_W = 560
RIGHT_W = 90  # right column: the sample count
ROW_H = 30
AXIS_H = 26


def format_ms(ms: float | None) -> str:
    """Return '340 ms', '3.2 s' or '4.5 min'; '-' when not measured."""
    if ms is None:
        return "-"
    if ms < 1000:
        return f"{ms:.3g} ms" if ms < 10 else f"{ms:.0f} ms"
    if ms < 120_000:
        return f"{ms / 1000:.3g} s"
    return f"{ms / 60_000:.3g} min"


def format_figure(figure: Figure | None) -> str:
    if figure is None:
        return "-"
    return ("≥ " if figure.at_least else "") + format_ms(figure.ms)


def _svg(width: int, height: int, label: str, body: list[str]) -> SafeString:
    return mark_safe(
        f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
        f'width="{width}" height="{height}" role="img" aria-label="{escape(label)}">'
        + "".join(body)
        + "</svg>"
    )


def _text(x: float, y: float, text: str, cls: str, anchor: str = "start") -> str:
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" class="{cls}" text-anchor="{anchor}">{escape(text)}</text>'
    )


def _rect(x: float, y: float, w: float, h: float, cls: str, title: str) -> str:
    return (
        f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(w, 1.5):.1f}" height="{h:.1f}" '
        f'class="{cls}"><title>{escape(title)}</title></rect>'
    )


# --- percentile bars, on a logarithmic axis --------------------------------------------


def _log_ticks(lo: float, hi: float) -> list[float]:
    return [10.0**e for e in range(round(math.log10(lo)), round(math.log10(hi)) + 1)]


def percentile_chart(rows: list[tuple[str, Summary]], label: str) -> SafeString:
    """Bars of P50 (darkest), P95 and P99 (lightest) per row, on one logarithmic axis.

    A logarithmic axis keeps a 2 ms parse and a 20 s generation readable in one chart;
    each step of the grid is ten times the one before.
    """
    values = [f.ms for _, s in rows for f in s.figures.values() if f is not None and f.ms > 0]
    lo = 10.0 ** math.floor(math.log10(min(values))) if values else 1.0
    hi = 10.0 ** math.ceil(math.log10(max(values))) if values else 1000.0
    if hi <= lo:
        hi = lo * 10

    def x(ms: float) -> float:
        ms = min(max(ms, lo), hi)
        return LABEL_W + (math.log10(ms) - math.log10(lo)) / math.log10(hi / lo) * PLOT_W

    height = AXIS_H + ROW_H * len(rows) + 8
    body = []
    for tick in _log_ticks(lo, hi):
        body.append(
            f'<line x1="{x(tick):.1f}" y1="{AXIS_H - 6}" x2="{x(tick):.1f}" '
            f'y2="{height - 4}" class="grid"/>'
        )
        body.append(_text(x(tick), AXIS_H - 10, format_ms(tick), "tick", "middle"))
    for i, (name, summary) in enumerate(rows):
        top = AXIS_H + i * ROW_H
        body.append(_text(LABEL_W - 8, top + ROW_H / 2 + 4, name, "row-label", "end"))
        for p, height_frac in ((99, 0.7), (95, 0.5), (50, 0.3)):
            figure = summary[p]
            if figure is None:
                continue
            bar_h = ROW_H * height_frac
            cls = f"bar p{p}" + (" at-least" if figure.at_least else "")
            body.append(
                _rect(
                    LABEL_W,
                    top + (ROW_H - bar_h) / 2,
                    x(figure.ms) - LABEL_W,
                    bar_h,
                    cls,
                    f"{name}: P{p} {format_figure(figure)} (n={summary.count})",
                )
            )
        count = f"n={summary.count}" + (" small" if summary.small else "")
        body.append(
            _text(
                LABEL_W + PLOT_W + 8,
                top + ROW_H / 2 + 4,
                count,
                "count small-sample" if summary.small else "count",
            )
        )
    return _svg(LABEL_W + PLOT_W + RIGHT_W, height, label, body)


# --- waterfalls, on a linear axis shared by the rows (and by compared tasks) -----------


@dataclass
class Segment:
    kind: str  # queue, parse, prepare, generate, validate, render, save, other
    start_ms: float
    end_ms: float
    title: str


@dataclass
class Row:
    label: str
    segments: list[Segment] = field(default_factory=list)
    markers: list[tuple[float, str]] = field(default_factory=list)  # first text

    @property
    def end_ms(self) -> float:
        ends = [s.end_ms for s in self.segments] + [ms for ms, _ in self.markers]
        return max(ends, default=0.0)


def _linear_ticks(axis_ms: float) -> list[float]:
    raw = axis_ms / 6
    magnitude = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    return [i * step for i in range(int(axis_ms // step) + 1)]


def waterfall_chart(rows: list[Row], axis_ms: float, label: str) -> SafeString:
    """One row per attempt (and the queue before it), stages end to end on one time axis."""
    axis_ms = max(axis_ms, 1.0)

    def x(ms: float) -> float:
        return LABEL_W + min(max(ms, 0.0), axis_ms) / axis_ms * PLOT_W

    height = AXIS_H + ROW_H * len(rows) + 8
    body = []
    for tick in _linear_ticks(axis_ms):
        body.append(
            f'<line x1="{x(tick):.1f}" y1="{AXIS_H - 6}" x2="{x(tick):.1f}" '
            f'y2="{height - 4}" class="grid"/>'
        )
        body.append(_text(x(tick), AXIS_H - 10, format_ms(tick), "tick", "middle"))
    for i, row in enumerate(rows):
        top = AXIS_H + i * ROW_H
        body.append(_text(LABEL_W - 8, top + ROW_H / 2 + 4, row.label, "row-label", "end"))
        for seg in row.segments:
            body.append(
                _rect(
                    x(seg.start_ms),
                    top + 6,
                    x(seg.end_ms) - x(seg.start_ms),
                    ROW_H - 12,
                    f"seg {seg.kind}",
                    seg.title,
                )
            )
        for ms, title in row.markers:
            body.append(
                f'<path d="M{x(ms):.1f} {top + 2} l5 -0 l-5 8 l-5 -8 z" class="marker">'
                f"<title>{escape(title)}</title></path>"
                f'<line x1="{x(ms):.1f}" y1="{top + 4}" x2="{x(ms):.1f}" y2="{top + ROW_H - 4}" '
                f'class="marker-line"/>'
            )
        body.append(
            _text(LABEL_W + PLOT_W + 8, top + ROW_H / 2 + 4, format_ms(row.end_ms), "count")
        )
    return _svg(LABEL_W + PLOT_W + RIGHT_W, height, label, body)
