"""A serve result's two charts as self-contained SVG: latency against offered load (every Server run, the bound
drawn) and the batch-size histogram of one LoadGen run. Every text taken from the file is escaped.

They draw what :func:`clsbench.serving.analysis.analyze_serve` derives; :func:`clsbench.serving.analysis.serve_figures`
adds their captions.
"""

from __future__ import annotations

import html
from typing import Any

_W, _H, _PAD = 640, 360, 48
_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")


def latency_chart_svg(analysis: dict[str, Any], mode: str | None = None) -> str:
    """p50 (dashed) and p99 (solid) latency against offered load (target QPS) of every Server run, one colour per
    batching setting, with the latency bound drawn; VALID runs are filled dots, INVALID hollow. Empty string when
    there is no Server run."""
    rows = [r for r in analysis.get("steps") or [] if r["scenario"] == "server" and r["target_qps"]
            and r["p99_ms"] is not None and (mode is None or r["mode"] == mode)]
    if not rows:
        return ""
    bound = analysis.get("bound_ms") or 0.0
    x_max = max(r["target_qps"] for r in rows) * 1.05
    y_max = max(max(r["p99_ms"] for r in rows), bound) * 1.1
    y_max = min(y_max, max(bound * 4, max(r["p50_ms"] or 0 for r in rows) * 1.1, 1e-3)) if bound else y_max

    def px(q: float) -> float:
        return _PAD + (_W - 2 * _PAD) * q / x_max

    def py(ms: float) -> float:
        return _H - _PAD - (_H - 2 * _PAD) * min(ms, y_max) / y_max

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{_W}" height="{_H}" viewBox="0 0 {_W} {_H}" '
             'font-family="sans-serif" font-size="11">',
             f'<rect x="0" y="0" width="{_W}" height="{_H}" fill="white"/>',
             f'<line x1="{_PAD}" y1="{_H - _PAD}" x2="{_W - _PAD}" y2="{_H - _PAD}" stroke="black"/>',
             f'<line x1="{_PAD}" y1="{_PAD}" x2="{_PAD}" y2="{_H - _PAD}" stroke="black"/>',
             f'<text x="{_W / 2}" y="{_H - 10}" text-anchor="middle">offered load (target QPS)</text>',
             f'<text x="14" y="{_H / 2}" transform="rotate(-90 14 {_H / 2})" text-anchor="middle">latency (ms)</text>']
    for k in range(5):
        q, ms = x_max * k / 4, y_max * k / 4
        parts.append(f'<text x="{px(q):.1f}" y="{_H - _PAD + 14}" text-anchor="middle">{q:,.0f}</text>')
        parts.append(f'<text x="{_PAD - 4}" y="{py(ms) + 4:.1f}" text-anchor="end">{ms:.3g}</text>')
    if bound:
        parts.append(f'<line x1="{_PAD}" y1="{py(bound):.1f}" x2="{_W - _PAD}" y2="{py(bound):.1f}" stroke="#555" '
                     'stroke-dasharray="6 3"/>')
        parts.append(f'<text x="{_W - _PAD}" y="{py(bound) - 4:.1f}" text-anchor="end">bound {bound:g} ms</text>')
    settings = list(dict.fromkeys(f"{r['mode']} {r['setting']}" for r in rows))
    for i, name in enumerate(settings):
        colour = _COLOURS[i % len(_COLOURS)]
        series = sorted((r for r in rows if f"{r['mode']} {r['setting']}" == name), key=lambda r: r["target_qps"])
        for key, dash in (("p99_ms", ""), ("p50_ms", ' stroke-dasharray="3 3"')):
            points = " ".join(f"{px(r['target_qps']):.1f},{py(r[key]):.1f}" for r in series if r[key] is not None)
            parts.append(f'<polyline points="{points}" fill="none" stroke="{colour}"{dash}/>')
        for r in series:
            fill = colour if r["valid"] else "white"
            title = html.escape(f"{name}: {r['target_qps']:,.0f} qps, p99 {r['p99_ms']:.2f} ms, "
                                f"{'VALID' if r['valid'] else 'INVALID'}")
            parts.append(f'<circle cx="{px(r["target_qps"]):.1f}" cy="{py(r["p99_ms"]):.1f}" r="3.5" fill="{fill}" '
                         f'stroke="{colour}"><title>{title}</title></circle>')
        parts.append(f'<text x="{_PAD + 8}" y="{_PAD + 14 * (i + 1)}" fill="{colour}">{html.escape(name)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def batch_histogram_svg(row: dict[str, Any]) -> str:
    """The batch-size histogram of one LoadGen run (a step row): how many batches of each size the server ran."""
    hist = {int(k): int(v) for k, v in (row.get("histogram") or {}).items()}
    if not hist:
        return ""
    largest, peak = max(hist), max(hist.values())
    width = (_W - 2 * _PAD) / largest
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{_W}" height="{_H}" viewBox="0 0 {_W} {_H}" '
             'font-family="sans-serif" font-size="11">', f'<rect width="{_W}" height="{_H}" fill="white"/>',
             f'<line x1="{_PAD}" y1="{_H - _PAD}" x2="{_W - _PAD}" y2="{_H - _PAD}" stroke="black"/>',
             f'<text x="{_W / 2}" y="{_H - 10}" text-anchor="middle">batch size (requests)</text>',
             f'<text x="{_PAD}" y="{_PAD - 16}">batches: {sum(hist.values()):,}, largest bar {peak:,}</text>']
    for size, count in sorted(hist.items()):
        h = (_H - 2 * _PAD) * count / peak
        x = _PAD + (size - 1) * width
        parts.append(f'<rect x="{x:.1f}" y="{_H - _PAD - h:.1f}" width="{max(width - 1, 1):.1f}" height="{h:.1f}" '
                     f'fill="#1f77b4"><title>{size}: {count}</title></rect>')
    for k in range(5):
        size = max(1, round(largest * k / 4))
        parts.append(f'<text x="{_PAD + (size - 0.5) * width:.1f}" y="{_H - _PAD + 14}" '
                     f'text-anchor="middle">{size}</text>')
    parts.append("</svg>")
    return "".join(parts)
