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


def nice_max(value: float) -> float:
    """A round axis maximum at or above `value` (1, 2, 5 x 10^n)."""
    if value <= 0:
        return 1.0
    exponent = math.floor(math.log10(value))
    for step in (1, 2, 5, 10):
        candidate = step * 10.0**exponent
        if candidate >= value:
            return candidate
    return 10.0 ** (exponent + 1)


def format_seconds(seconds: float) -> str:
    if seconds == 0:
        return "0"
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 120:
        return f"{seconds:.0f}s" if seconds >= 10 else f"{seconds:.1f}s"
    return f"{seconds / 60:.0f}m"


def _frame(title: str, y_max: float, y_format: Callable[[float], str], count: int,
           legend: Sequence[Series], width: int) -> list[str]:
    plot_w, plot_h = width - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    out = [
        f'<svg class="chart" viewBox="0 0 {width} {HEIGHT}" role="img" '
        f'aria-label="{escape(title)}" xmlns="http://www.w3.org/2000/svg">',
        f"<title>{escape(title)}</title>",
    ]
    # Five divisions when the maximum starts with a 5 (0, 1, 2, 3, 4, 5), else four.
    steps = 5 if f"{y_max:g}".lstrip("0.").startswith("5") else 4
    for i in range(steps + 1):
        y = TOP + plot_h * i / steps
        value = y_max * (steps - i) / steps
        text = y_format(value)
        out.append(f'<line class="grid" x1="{LEFT}" y1="{y:.1f}" x2="{width - RIGHT}" y2="{y:.1f}"/>')
        out.append(f'<text class="axis" x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">'
                   f"{escape(text)}</text>")
    ticks = [(0, f"-{count}m"), (count // 2, f"-{count - count // 2}m"), (count - 1, "now")]
    for index, label in ticks:
        x = LEFT + plot_w * (index + 0.5) / count
        out.append(f'<text class="axis" x="{x:.1f}" y="{HEIGHT - 8}" text-anchor="middle">'
                   f"{escape(label)}</text>")
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
    y_max = nice_max(max(totals))
    plot_w, plot_h = width - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    out = _frame(title, y_max, lambda v: f"{v:g}", count, series, width)
    slot = plot_w / count
    for i in range(count):
        base = 0.0
        for s in series:
            value = s.values[i] or 0.0
            if value <= 0:
                continue
            h = plot_h * value / y_max
            y = TOP + plot_h - plot_h * (base + value) / y_max
            out.append(f'<rect class="{s.css_class}" x="{LEFT + i * slot + 1:.1f}" y="{y:.1f}" '
                       f'width="{max(slot - 2, 1):.1f}" height="{h:.1f}">'
                       f"<title>{escape(s.name)}: {value:g}</title></rect>")
            base += value
    out.append("</svg>")
    return "\n".join(out)


def lines(title: str, series: Sequence[Series], width: int = WIDTH) -> str:
    """Latency-style lines; a None breaks the line (no data that minute)."""
    count = max((len(s.values) for s in series), default=0)
    if count == 0:
        return ""
    finite = [v for s in series for v in s.values if v is not None and math.isfinite(v)]
    y_max = nice_max(max(finite, default=0.0))
    plot_w, plot_h = width - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    out = _frame(title, y_max, format_seconds, count, series, width)
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
