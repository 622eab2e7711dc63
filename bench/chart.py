"""
The benchmark's scaling figures as an SVG chart (docs/benchmark-scaling.svg), from bench.py's own
results (``bench/results.json``): per run kind, the fastest wall time of the repeats and the
controller CPU seconds against the number of hosts, both axes logarithmic, so a figure that grows
in proportion to the fleet is a line of slope one.

Drawn here rather than by a plotting library: a few lines and circles need no dependency, and the
SVG is built with ElementTree, which escapes every text and attribute it writes.
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET

SVG_NS = "http://www.w3.org/2000/svg"
# run kind in the results -> its name in the chart, and its colour (Okabe and Ito's palette,
# told apart also by readers with a colour vision deficiency)
SERIES = {
    "first": ("first provisioning", "#D55E00"),
    "noop": ("no-op re-run", "#0072B2"),
    "verify": ("verify.py alone", "#009E73"),
    "drift": ("drift check", "#CC79A7"),
    "ansible_noop": ("Ansible no-op playbook", "#E69F00"),
}
# panel title -> the figure of a run it plots
PANELS = {
    "wall seconds (fastest of the repeats)": lambda run: min(run["wall_s_runs"]),
    "controller CPU seconds": lambda run: run["cpu_s"],
}
WIDTH, HEIGHT = 960, 500
PANEL_WIDTH, PANEL_HEIGHT = 360, 300
PANEL_TOP, PANEL_LEFTS = 100, (80, 560)


def points(results: dict, run_kind: str, figure) -> list[tuple[int, float, bool]]:
    """(hosts, figure, provisioned once per container) for each fleet that measured ``run_kind``."""
    return [
        (
            fleet["nodes"],
            figure(fleet[run_kind]),
            run_kind == "first" and fleet[run_kind].get("nodes_provisioned", fleet["nodes"]) != fleet["nodes"],
        )
        for fleet in results["fleets"]
        if run_kind in fleet
    ]


def log_ticks(low: float, high: float) -> list[float]:
    """1, 2 and 5 times the powers of ten from below ``low`` to above ``high``."""
    first, last = math.floor(math.log10(low)), math.ceil(math.log10(high))
    ticks = [step * 10**exponent for exponent in range(first, last + 1) for step in (1, 2, 5)]
    below = max((tick for tick in ticks if tick <= low), default=ticks[0])
    above = min((tick for tick in ticks if tick >= high), default=ticks[-1])
    return [tick for tick in ticks if below <= tick <= above]


def _number(value: float) -> str:
    return f"{value:.3g}" if value < 10 else f"{value:.0f}" if value >= 100 else f"{value:.1f}"


def _tick_label(value: float) -> str:
    return f"{value:g}"


def _add(parent: ET.Element, tag: str, text: str | None = None, **attributes) -> ET.Element:
    element = ET.SubElement(
        parent, tag, {name.rstrip("_").replace("_", "-"): str(value) for name, value in attributes.items()}
    )
    if text is not None:
        element.text = text
    return element


def _panel(svg: ET.Element, results: dict, title: str, figure, left: float) -> None:
    series = {kind: points(results, kind, figure) for kind in SERIES}
    values = [value for found in series.values() for _, value, _ in found]
    hosts = sorted({count for found in series.values() for count, _, _ in found})
    if not values:
        return
    y_ticks = log_ticks(min(values), max(values))
    y_low, y_high = math.log10(y_ticks[0]), math.log10(y_ticks[-1])
    x_low, x_high = math.log10(hosts[0]), math.log10(hosts[-1])

    def x(count: float) -> float:
        span = x_high - x_low
        return round(left + (PANEL_WIDTH * (math.log10(count) - x_low) / span if span else PANEL_WIDTH / 2), 1)

    def y(value: float) -> float:
        return round(PANEL_TOP + PANEL_HEIGHT * (y_high - math.log10(value)) / (y_high - y_low), 1)

    group = _add(svg, "g", class_="panel", data_figure=title)
    _add(group, "text", title, x=left, y=PANEL_TOP - 14, font_size=15, font_weight="bold")
    for tick in y_ticks:
        _add(group, "line", x1=left, x2=left + PANEL_WIDTH, y1=y(tick), y2=y(tick), stroke="#d8dee4", stroke_width=1)
        _add(
            group, "text", _tick_label(tick), x=left - 8, y=y(tick) + 4, text_anchor="end", font_size=12, fill="#57606a"
        )
    for count in hosts:
        _add(
            group,
            "line",
            x1=x(count),
            x2=x(count),
            y1=PANEL_TOP,
            y2=PANEL_TOP + PANEL_HEIGHT,
            stroke="#eaeef2",
            stroke_width=1,
        )
        _add(
            group,
            "text",
            str(count),
            x=x(count),
            y=PANEL_TOP + PANEL_HEIGHT + 18,
            text_anchor="middle",
            font_size=12,
            fill="#57606a",
        )
    _add(
        group,
        "text",
        "hosts",
        x=left + PANEL_WIDTH / 2,
        y=PANEL_TOP + PANEL_HEIGHT + 38,
        text_anchor="middle",
        font_size=13,
    )
    for kind, found in series.items():
        if not found:
            continue
        name, colour = SERIES[kind]
        line = _add(group, "g", class_="series", data_run=kind)
        _add(
            line,
            "polyline",
            points=" ".join(f"{x(count)},{y(value)}" for count, value, _ in found),
            fill="none",
            stroke=colour,
            stroke_width=2.5,
        )
        for count, value, per_container in found:
            point = _add(
                line,
                "circle",
                cx=x(count),
                cy=y(value),
                r=4.5,
                fill="white" if per_container else colour,
                stroke=colour,
                stroke_width=2,
                data_hosts=count,
                data_value=f"{value:.3f}",
            )
            note = f" ({results_containers(results, count)} containers provisioned)" if per_container else ""
            _add(point, "title", f"{name}, {count} host{'s' if count != 1 else ''}: {_number(value)} s{note}")


def results_containers(results: dict, count: int) -> int:
    return next(fleet.get("containers", count) for fleet in results["fleets"] if fleet["nodes"] == count)


def scaling_svg(results: dict) -> str:
    """The chart of ``results`` (bench.py's JSON) as an SVG document."""
    svg = ET.Element(
        "svg",
        {
            "xmlns": SVG_NS,
            "width": str(WIDTH),
            "height": str(HEIGHT),
            "viewBox": f"0 0 {WIDTH} {HEIGHT}",
            "font-family": "sans-serif",
        },
    )
    _add(svg, "title", "gpu-node fleet benchmark: how each run grows with the number of hosts")
    _add(svg, "rect", width=WIDTH, height=HEIGHT, fill="white")
    _add(
        svg,
        "text",
        "How each run grows with the fleet (both axes logarithmic)",
        x=PANEL_LEFTS[0],
        y=28,
        font_size=17,
        font_weight="bold",
    )
    legend_x = PANEL_LEFTS[0]
    for kind, (name, colour) in SERIES.items():
        if not any(kind in fleet for fleet in results["fleets"]):
            continue
        _add(svg, "line", x1=legend_x, x2=legend_x + 22, y1=54, y2=54, stroke=colour, stroke_width=3)
        _add(svg, "text", name, x=legend_x + 28, y=58, font_size=13)
        legend_x += 40 + 7.2 * len(name)
    for (title, figure), left in zip(PANELS.items(), PANEL_LEFTS):
        _panel(svg, results, title, figure, left)
    notes = [
        f"{results.get('machine', '')}; toolkit: {results.get('repository', '')}",
        "bench/bench.py's bench/results.json; hollow: provisioned once per container, not per host",
    ]
    for index, note in enumerate(notes):
        _add(svg, "text", note, x=PANEL_LEFTS[0], y=HEIGHT - 30 + 16 * index, font_size=11, fill="#57606a")
    ET.indent(svg)
    return ET.tostring(svg, encoding="unicode") + "\n"
