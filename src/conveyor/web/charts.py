"""Small server-side SVG charts: no JavaScript library, nothing to download.

Every value put in the markup is a number we computed or text passed through
`html.escape`, so the result is safe to embed as-is.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape

WIDTH, HEIGHT = 640, 180
LEFT, RIGHT, TOP, BOTTOM = 48, 12, 14, 26


@dataclass(frozen=True, slots=True)
class Series:
    name: str
    values: Sequence[float | None]  # None: nothing measured then (a gap)
    css_class: str


# Steps a duration axis may take: round in their own unit (ms, s, min, h, days).
DURATION_STEPS = (
    0.001,
    0.002,
    0.005,
    0.01,
    0.02,
    0.05,
    0.1,
    0.2,
    0.5,
    1,
    2,
    5,
    10,
    15,
    30,
    60,
    120,
    300,
    600,
    900,
    1800,
    3600,
    7200,
    10800,
    21600,
    43200,
    86400,
    172800,
    604800,
)
MAX_DIVISIONS = 5


def count_ticks(value: float) -> list[float]:
    """Ticks for a count axis from 0 to at least `value`: 1, 2 or 5 x 10^n apart,
    at most five divisions (0, 20, 40, 60)."""
    top = max(value, 1.0)
    exponent = math.floor(math.log10(top / MAX_DIVISIONS)) if top > MAX_DIVISIONS else 0
    for base in (1, 2, 5, 10, 20):
        step = base * 10.0**exponent
        if math.ceil(top / step - 1e-9) <= MAX_DIVISIONS:
            break
    return [i * step for i in range(math.ceil(top / step - 1e-9) + 1)]


def duration_ticks(seconds: float) -> list[float]:
    """Ticks for a duration axis from 0 to at least `seconds`, a round step apart in
    one unit (0, 2m, 4m, 6m), at most five divisions."""
    top = seconds if seconds > 0 else 1.0
    step = next(
        (s for s in DURATION_STEPS if math.ceil(top / s - 1e-9) <= MAX_DIVISIONS),
        DURATION_STEPS[-1] * math.ceil(top / DURATION_STEPS[-1] / MAX_DIVISIONS),
    )
    return [i * step for i in range(math.ceil(top / step - 1e-9) + 1)]


def format_seconds(seconds: float, step: float | None = None) -> str:
    """A tick label in the unit of the axis step (every label of one axis alike):
    250ms, 15s, 5m, 2h, 1d."""
    # Alone, a value up to two minutes reads best in seconds (90s, not 1.5m).
    unit = step if step is not None else (1.0 if 1 <= seconds < 120 else seconds)
    if seconds == 0:
        return "0"
    if unit < 1:
        return f"{seconds * 1000:g}ms"
    if unit < 60:
        return f"{seconds:g}s"
    if unit < 3600:
        return f"{seconds / 60:g}m"
    if unit < 86400:
        return f"{seconds / 3600:g}h"
    return f"{seconds / 86400:g}d"


def _frame(
    title: str,
    ticks: Sequence[float],
    y_format: Callable[[float], str],
    count: int,
    legend: Sequence[Series],
    width: int,
) -> list[str]:
    plot_w, plot_h = width - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    out = [
        f'<svg class="chart" viewBox="0 0 {width} {HEIGHT}" role="img" '
        f'aria-label="{escape(title)}" xmlns="http://www.w3.org/2000/svg">',
        f"<title>{escape(title)}</title>",
    ]
    y_max = ticks[-1]
    for value in ticks:
        y = TOP + plot_h - plot_h * value / y_max
        text = y_format(value)
        out.append(
            f'<line class="grid" x1="{LEFT}" y1="{y:.1f}" x2="{width - RIGHT}" y2="{y:.1f}"/>'
        )
        out.append(
            f'<text class="axis" x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">'
            f"{escape(text)}</text>"
        )
    x_ticks = [(0, f"-{count}m"), (count // 2, f"-{count - count // 2}m"), (count - 1, "now")]
    for index, label in x_ticks:
        x = LEFT + plot_w * (index + 0.5) / count
        out.append(
            f'<text class="axis" x="{x:.1f}" y="{HEIGHT - 8}" text-anchor="middle">'
            f"{escape(label)}</text>"
        )
    x = LEFT + 4
    for series in legend:
        out.append(f'<rect class="{series.css_class}" x="{x}" y="2" width="10" height="8"/>')
        out.append(f'<text class="legend" x="{x + 14}" y="10">{escape(series.name)}</text>')
        x += 24 + 7 * len(series.name)
    return out


def stacked_bars(title: str, series: Sequence[Series], width: int = WIDTH) -> str:
    """One bar per point, the series stacked (e.g. completed and failed per minute)."""
    count = max((len(s.values) for s in series), default=0)
    if count == 0:
        return ""
    totals = [sum((s.values[i] or 0.0) for s in series) for i in range(count)]
    ticks = count_ticks(max(totals))
    y_max = ticks[-1]
    plot_w, plot_h = width - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    out = _frame(title, ticks, lambda v: f"{v:g}", count, series, width)
    slot = plot_w / count
    for i in range(count):
        base = 0.0
        for s in series:
            value = s.values[i] or 0.0
            if value <= 0:
                continue
            h = plot_h * value / y_max
            y = TOP + plot_h - plot_h * (base + value) / y_max
            out.append(
                f'<rect class="{s.css_class}" x="{LEFT + i * slot + 1:.1f}" y="{y:.1f}" '
                f'width="{max(slot - 2, 1):.1f}" height="{h:.1f}">'
                f"<title>{escape(s.name)}: {value:g}</title></rect>"
            )
            base += value
    out.append("</svg>")
    return "\n".join(out)


def lines(title: str, series: Sequence[Series], width: int = WIDTH) -> str:
    """Latency-style lines; a None breaks the line (no data that minute)."""
    count = max((len(s.values) for s in series), default=0)
    if count == 0:
        return ""
    finite = [v for s in series for v in s.values if v is not None and math.isfinite(v)]
    ticks = duration_ticks(max(finite, default=0.0))
    y_max, step = ticks[-1], ticks[1]
    plot_w, plot_h = width - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    out = _frame(title, ticks, lambda v: format_seconds(v, step), count, series, width)
    for s in series:
        segment: list[str] = []
        segments: list[list[str]] = []
        for i, value in enumerate(s.values):
            if value is None or not math.isfinite(value):
                if segment:
                    segments.append(segment)
                segment = []
                continue
            x = LEFT + plot_w * (i + 0.5) / count
            y = TOP + plot_h - plot_h * min(value, y_max) / y_max
            segment.append(f"{x:.1f},{y:.1f}")
        if segment:
            segments.append(segment)
        for points in segments:
            if len(points) == 1:
                cx, cy = points[0].split(",")
                out.append(f'<circle class="{s.css_class}" cx="{cx}" cy="{cy}" r="2"/>')
            else:
                out.append(f'<polyline class="{s.css_class}" points="{" ".join(points)}"/>')
    out.append("</svg>")
    return "\n".join(out)
