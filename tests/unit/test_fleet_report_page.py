"""
The fleet report's page (deploy/reports/fleet_report.py, ``write_html``) as a browser shows it: Debian's
Chromium, headless, loads the file and dumps the DOM it built; the table is read back from that
DOM. A failure line and a host name carry markup, quotes and a script that would mark the page
if it ran; a control page proves that the same script does run, and marks the page, when a page
lets it.

Chromium comes from scripts/ensure-debian-package.sh chromium (scripts/test runs it); where it cannot be
installed the test skips with that script's one line.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest
from html_dom import DomTree, Element

from deploy.reports.fleet_report import CHANGED, CONVERGED, FAILED, FleetRow, html_path, write_html
from deploy.reports.node_report import FAIL, PASS, SKIP

REPO = Path(__file__).resolve().parents[2]
# What Chromium needs on a test machine: no sandbox (root, in a container), no GPU, nothing fetched
# in the background, a profile of its own.
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
)
MARK = "data-injected-script-ran"
PROBE = f"document.documentElement.setAttribute('{MARK}', 'yes')"
HOSTILE_LINE = (
    f"""config.toml: "</span></td></tr></table><script>{PROBE}</script><img src=x onerror="{PROBE}">' & done"""
)
HOSTILE_HOST = """gpu-"quoted'<b>-9"""
WIRE = "containerd | Wire the nvidia runtime into /etc/containerd/config.toml"
VERIFIED = {PASS: 7, FAIL: 0, SKIP: 5, "failed_steps": []}


@pytest.fixture(scope="module")
def chromium() -> str:
    ensured = subprocess.run(
        ["bash", str(REPO / "scripts" / "ensure-debian-package.sh"), "chromium"], capture_output=True, text=True
    )
    if ensured.returncode != 0:
        pytest.skip(ensured.stderr.strip().splitlines()[-1] if ensured.stderr.strip() else "chromium unavailable")
    return "chromium"


def dump_dom(chromium: str, page: Path, profile: Path) -> str:
    """The DOM Chromium built from ``page``, serialized (``--dump-dom``), with a new empty profile."""
    profile.mkdir()
    process = subprocess.Popen(
        [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--dump-dom", page.resolve().as_uri()],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = process.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)  # its own session: Chromium and its helpers only
        process.communicate()
        raise
    assert process.returncode == 0, err[-2000:]
    return out


def test_the_probe_script_marks_the_page_when_a_page_lets_it_run(chromium, tmp_path):
    """The control: without the report's escaping and policy, the hostile line's script runs."""
    control = tmp_path / "control.html"
    control.write_text(f"<!DOCTYPE html><html><body><p>{HOSTILE_LINE}</p></body></html>")
    root = DomTree(dump_dom(chromium, control, tmp_path / "profile")).root
    assert root.one("html").attrs.get(MARK) == "yes"


def test_chromium_reads_back_a_row_per_node_failures_first_each_with_its_line(chromium, tmp_path):
    rows = [
        FleetRow(
            "gpu-a",
            CONVERGED,
            no_gpu=False,
            reboot_required=False,
            verify=VERIFIED,
            runtime="containerd 1.7.24",
            kernel_module_type="open",
        ),
        FleetRow("gpu-z", FAILED, failed_operations=[WIRE], failure_lines=[HOSTILE_LINE]),
        FleetRow(
            "gpu-m",
            CHANGED,
            changed_operations=["Kernel prerequisites | Persist the Kubernetes sysctls"],
            no_gpu=True,
            reboot_required=True,
            verify={**VERIFIED, FAIL: 1, "failed_steps": ["cuda"]},
            runtime="containerd 2.1.9",
        ),
        FleetRow(
            HOSTILE_HOST,
            FAILED,
            failed_operations=["Driver | Install the NVIDIA driver"],
            failure_lines=["apt-get install failed: E: Sub-process /usr/bin/dpkg returned an error code (1)"],
        ),
    ]
    page = write_html(html_path(tmp_path / "fleet.json"), rows)
    assert page == tmp_path / "fleet.html"
    root = DomTree(dump_dom(chromium, page, tmp_path / "profile")).root

    table = root.one("table", id="fleet")
    body_rows = table.one("tbody").find("tr")
    read = [
        (row.attrs["data-host"], row.one("td", **{"class": "host"}).text(), row.one("td", **{"class": "result"}).text())
        for row in body_rows
    ]
    # Failures first, by name, then changed, then converged.
    assert read == [
        (HOSTILE_HOST, HOSTILE_HOST, "failed"),
        ("gpu-z", "gpu-z", "failed"),
        ("gpu-m", "gpu-m", "changed"),
        ("gpu-a", "gpu-a", "converged"),
    ]

    def steps(row: Element) -> list[tuple[str, str]]:
        return [
            (step.one("span", **{"class": "operation"}).text(), step.one("span", **{"class": "line"}).text())
            for step in row.one("td", **{"class": "failures"}).find("div", **{"class": "step"})
        ]

    assert steps(body_rows[0]) == [
        (
            "Driver | Install the NVIDIA driver",
            "apt-get install failed: E: Sub-process /usr/bin/dpkg returned an error code (1)",
        )
    ]
    assert steps(body_rows[1]) == [(WIRE, HOSTILE_LINE)], "the line reads back as the text it was"
    assert steps(body_rows[2]) == steps(body_rows[3]) == []

    def cells(row: Element) -> list[str]:
        return [row.one("td", **{"class": name}).text() for name in ("reboot", "no-gpu", "runtime", "verify")]

    assert cells(body_rows[1]) == ["?", "?", "-", "not run"]
    assert cells(body_rows[2]) == ["yes", "yes", "containerd 2.1.9", "7 pass, 1 fail, 5 skip: cuda"]
    assert cells(body_rows[3]) == ["no", "no", "containerd 1.7.24", "7 pass, 0 fail, 5 skip"]
    assert [row.attrs["data-host"] for row in root.one("table", id="driver").one("tbody").find("tr")] == [
        "gpu-m",
        "gpu-a",
    ]
    assert " ".join(root.one("p", **{"class": "summary"}).text().split()) == "4 nodes: 2 failed 1 changed 1 converged"

    # The script in the line did not run, and nothing it carried became an element.
    assert MARK not in root.one("html").attrs
    assert not root.find("script") and not root.find("img") and not root.find("b")
    # Self-contained: nothing to fetch.
    assert not [element for element in root.walk() if {"src", "href"} & set(element.attrs)]
    assert "url(" not in root.one("style").text()
