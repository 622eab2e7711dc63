"""The benchmark's scaling chart (bench/chart.py, drawn by bench/bench.py --chart): well-formed SVG
that carries the figures it was given, placed by them, and the chart in docs/ is the one the
stored results draw."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

from bench.chart import scaling_svg

REPO = Path(__file__).resolve().parents[2]
NS = {"svg": "http://www.w3.org/2000/svg"}


def run(wall_runs: list[float], cpu: float) -> dict:
    return {"wall_s": sorted(wall_runs)[len(wall_runs) // 2], "wall_s_runs": wall_runs, "cpu_s": cpu}


RESULTS = {
    "machine": "2 cores (A & B <test>), 8 GiB",
    "repository": 'stand-in "toolkit"',
    "fleets": [
        {"nodes": 1, "first": run([41.5], 1.25), "noop": run([5.1, 3.48, 5.9], 1.06), "verify": run([2.2], 0.87)},
        {"nodes": 4, "first": run([46.2], 1.62), "noop": run([2.46, 1.71], 0.88), "verify": run([1.36], 0.69)},
        {
            "nodes": 64,
            "containers": 16,
            "hosts_per_container": 4,
            "first": {**run([256.7], 8.23), "nodes_provisioned": 16},
            "noop": run([38.4, 36.0], 4.64),
            "verify": run([19.04, 20.9], 2.47),
        },
    ],
}


def panels(svg_text: str) -> dict[str, dict[str, list[tuple[int, float, float, float, str]]]]:
    """Panel title -> run kind -> (hosts, value, x, y, tooltip) of each point."""
    root = ET.fromstring(svg_text)
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    found = {}
    for panel in root.findall("svg:g[@class='panel']", NS):
        found[panel.get("data-figure")] = {
            series.get("data-run"): [
                (
                    int(point.get("data-hosts")),
                    float(point.get("data-value")),
                    float(point.get("cx")),
                    float(point.get("cy")),
                    point.find("svg:title", NS).text,
                )
                for point in series.findall("svg:circle", NS)
            ]
            for series in panel.findall("svg:g[@class='series']", NS)
        }
    return found


def test_the_chart_is_svg_carrying_each_figure_at_its_place():
    drawn = panels(scaling_svg(RESULTS))
    assert list(drawn) == ["wall seconds (fastest of the repeats)", "controller CPU seconds"]
    wall, cpu = drawn.values()
    assert list(wall) == list(cpu) == ["first", "noop", "verify"], "only the runs measured"
    assert [(hosts, value) for hosts, value, *_ in wall["noop"]] == [(1, 3.48), (4, 1.71), (64, 36.0)]
    assert [(hosts, value) for hosts, value, *_ in cpu["first"]] == [(1, 1.25), (4, 1.62), (64, 8.23)]
    assert wall["noop"][2][4] == "no-op re-run, 64 hosts: 36.0 s"
    assert cpu["first"][2][4] == "first provisioning, 64 hosts: 8.23 s (16 containers provisioned)"
    for series in (wall, cpu):
        points = [point for found in series.values() for point in found]
        # Higher figures higher up the page (smaller y), more hosts further right, on log scales.
        by_value = sorted(points, key=lambda point: point[1])
        assert [point[3] for point in by_value] == sorted((point[3] for point in points), reverse=True)
        xs = {hosts: x for hosts, _, x, _, _ in points}
        assert xs[1] < xs[4] < xs[64] and abs((xs[4] - xs[1]) * 2 - (xs[64] - xs[4])) < 0.5, "1 to 4 is half of 4 to 64"


def test_text_from_the_results_is_escaped():
    root = ET.fromstring(scaling_svg(RESULTS))
    notes = [element.text for element in root.iter("{http://www.w3.org/2000/svg}text")]
    assert '2 cores (A & B <test>), 8 GiB; toolkit: stand-in "toolkit"' in notes


def test_the_chart_in_the_docs_is_the_one_the_stored_results_draw():
    """Regenerate with: .venv/bin/python bench/bench.py --from-json bench/results.json --chart docs/benchmark-scaling.svg"""
    stored = json.loads((REPO / "bench" / "results.json").read_text())
    assert (REPO / "docs" / "benchmark-scaling.svg").read_text() == scaling_svg(stored)
    assert "](benchmark-scaling.svg)" in (REPO / "docs" / "benchmark.md").read_text()
