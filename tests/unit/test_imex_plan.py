"""
The IMEX step through deploy/gpu_node.py over an inventory of IMEX domains (pyinfra's @fake hosts,
tests/plan.py): each member's nodes_config.cfg lists its domain's members, IMEX comes at the installed
driver's version where the driver stage does not install it, a change of members restarts IMEX only
where its file changed and one host at a time, and a domain that cannot be written fails its hosts in
one line before any change.
"""

from __future__ import annotations

import base64
import json

import pyinfra
import pytest
from plan import DEFAULT, GPU_NODE, PCI_WITH_GPU, QUICK, every, gpu_node, node_lines, run_inventory
from pyinfra.api import Inventory
from pyinfra.facts.systemd import SystemdStatus
from test_read_ahead import digest_lines

from deploy.facts.rack import ImexState
from deploy.operations.files import digest_read
from deploy.rack import imex

RHEL_KERNEL = "5.14.0-427.el9.x86_64"
# the driver stage alone, its driver not installed by the run (a site's own, at 570.172.08)
SHARED = {
    "kernel_modules_load": False,
    "reboot_allowed": False,
    "stages": "driver",
    "nvidia_driver_install": False,
    "first_boot_unit": False,
}
RUNNING = ["Id=nvidia-imex.service", "SubState=running"]


@pytest.fixture(autouse=True)
def as_the_cli(monkeypatch):
    """Operations ordered as pyinfra's CLI orders them (by their place in the code), so one operation is
    one across hosts that run different numbers of them, as _serial needs."""
    monkeypatch.setattr(pyinfra, "is_cli", True)


def inventory(hosts: dict[str, dict]) -> Inventory:
    return Inventory(([(f"@fake/{name}", {**QUICK, **data}) for name, data in hosts.items()], {}), override_data=SHARED)


def rhel_node(*facts, built: str = "570.172.08"):
    return gpu_node(
        "rocky-9", node_survey=node_lines(RHEL_KERNEL, pci=PCI_WITH_GPU, built=built), facts=facts, unstated=DEFAULT
    )


def placed_nodes_config(plan, host: str) -> str | None:
    """The text the run placed as host's nodes_config.cfg (its staged upload), None where it placed none."""
    timeline = plan.timeline
    for index, (name, command) in enumerate(timeline):
        if name == f"@fake/{host}" and command.startswith("upload ") and "/0" in command:
            following = next((c for n, c in timeline[index + 1 :] if n == name and not c.startswith("upload ")), "")
            if f"{imex.NODES_CONFIG}.gpu-node-candidate" in following:
                return plan.uploads[index].decode()
    return None


def host_commands(plan, host: str) -> list[str]:
    return [command for name, command in plan.timeline if name == f"@fake/{host}"]


DOMAIN = {
    "gpu1": {"imex_domain": "rack-a", "imex_address": "10.0.0.3"},
    "gpu2": {"imex_domain": "rack-a", "imex_address": "10.0.0.1"},
    "gpu3": {"imex_domain": "rack-a", "imex_address": "10.0.0.2"},
}


def test_each_member_lists_its_domains_members_gets_imex_at_its_drivers_version_and_the_channel_option():
    plan = run_inventory(inventory(DOMAIN), {f"@fake/{name}": rhel_node() for name in DOMAIN})
    assert plan.error is None and not plan.failures, (plan.error, plan.failures)
    for name in DOMAIN:
        assert placed_nodes_config(plan, name) == "10.0.0.1\n10.0.0.2\n10.0.0.3\n"
        commands = host_commands(plan, name)
        # dnf names the version without the release; held with the driver
        assert "dnf install -y nvidia-imex-570-570.172.08" in commands
        assert "dnf versionlock add nvidia-imex-570" in commands
        assert "systemctl enable nvidia-imex.service" in commands and "systemctl start nvidia-imex.service" in commands
    names = plan.op_names()
    assert "IMEX domain | Put /etc/modprobe.d/gpu-node-imex-channel.conf (imex_channels=module-option)" in names
    assert "IMEX domain | Add NVIDIA's CUDA repository cuda-rhel9-x86_64" in names


def test_a_change_of_members_restarts_imex_only_where_its_file_changed_and_one_host_at_a_time():
    """rack-a gains gpu5: its members' files change and their running IMEX restarts; rack-b's files are
    its members already and its IMEX is left running. The restart is pyinfra's _serial operation."""
    hosts = {
        **{name: {**data} for name, data in DOMAIN.items()},
        "gpu5": {"imex_domain": "rack-a", "imex_address": "10.0.0.5"},
        "gpu8": {"imex_domain": "rack-b", "imex_address": "10.0.1.8"},
        "gpu9": {"imex_domain": "rack-b", "imex_address": "10.0.1.9"},
    }
    rack_b = (digest_read(imex.NODES_CONFIG), digest_lines("10.0.1.8\n10.0.1.9\n"))
    rack_a_before = (digest_read(imex.NODES_CONFIG), digest_lines("10.0.0.1\n10.0.0.2\n10.0.0.3\n"))
    nodes = {
        f"@fake/{name}": rhel_node(
            rack_b if name in ("gpu8", "gpu9") else rack_a_before, (every(SystemdStatus), RUNNING)
        )
        for name in hosts
    }
    plan = run_inventory(inventory(hosts), nodes)
    assert plan.error is None and not plan.failures, (plan.error, plan.failures)
    restarted = [name for name in hosts if "systemctl restart nvidia-imex.service" in host_commands(plan, name)]
    assert restarted == ["gpu1", "gpu2", "gpu3", "gpu5"]
    assert placed_nodes_config(plan, "gpu8") is None and placed_nodes_config(plan, "gpu1") == (
        "10.0.0.1\n10.0.0.2\n10.0.0.3\n10.0.0.5\n"
    )
    [restart] = [
        meta
        for meta in plan.state.op_meta.values()
        if any("Restart nvidia-imex.service" in name for name in meta.names)
    ]
    assert restart.global_arguments["_serial"] is True


def test_a_member_without_an_address_fails_the_domains_hosts_in_one_line_before_any_change():
    hosts = {"gpu1": {"imex_domain": "rack-a", "imex_address": "10.0.0.1"}, "gpu2": {"imex_domain": "rack-a"}}
    plan = run_inventory(inventory(hosts), {f"@fake/{name}": rhel_node() for name in hosts})
    assert plan.failed
    for name in hosts:
        assert not [c for c in host_commands(plan, name) if c.startswith("dnf install") or "gpu-node-candidate" in c]
    line = (
        "host @fake/gpu2 is in an IMEX domain without imex_address, and its SSH host '@fake/gpu2' is not an IP address"
    )
    assert sum(line in failure for failure in plan.failures) == 2, plan.failures


def test_without_the_driver_stages_install_a_host_with_no_driver_is_refused_naming_it():
    plan = run_inventory(inventory({"gpu1": DOMAIN["gpu1"]}), {"@fake/gpu1": rhel_node(built="")})
    assert plan.failed
    assert any(
        "IMEX must be at the driver's version, and this host has no NVIDIA driver" in line for line in plan.failures
    ), plan.failures


def imex_state(ctl: list[str]) -> list[str]:
    """ImexState's output: the unit enabled and active, the domain's file, what nvidia-imex-ctl -N printed."""
    listed = base64.b64encode(b"10.0.0.1\n10.0.0.2\n10.0.0.3\n").decode()
    return [
        "enabled enabled",
        "active active",
        f"nodes_config {listed}",
        "ctl_status 0",
        *(f"ctl {line}" for line in ctl),
    ]


def test_verify_names_the_member_its_domain_is_missing_in_each_members_report(tmp_path):
    """deploy/verify.py over the domain whose gpu1 (10.0.0.3) is down: gpu2's IMEX sees it UNAVAILABLE, gpu3's
    does not list it, gpu1's own nvidia-imex-ctl reaches no daemon; each report's imex_domain step fails naming
    what it saw; nothing of IMEX is read on a host without imex_domain."""
    ready = [
        "Nodes:",
        "Node #0   - 10.0.0.1        - READY                - Version: 570.172",
        "Node #1   - 10.0.0.2        - READY                - Version: 570.172",
    ]
    seen = {
        "gpu2": ready
        + ["Node #2   - 10.0.0.3        - UNAVAILABLE          - Version: 570.172", "Domain State: DEGRADED"],
        "gpu3": ready + ["Domain State: DEGRADED"],
        "gpu1": ["Failed to connect to the IMEX daemon"],
    }
    report = tmp_path / "report.json"
    nodes = {f"@fake/{name}": rhel_node((ImexState, imex_state(lines))) for name, lines in seen.items()}
    nodes["@fake/cpu1"] = rhel_node()
    hosts = {**DOMAIN, "cpu1": {}}
    SHARED.update(verify_report_path=str(report), fleet_report_path=str(tmp_path / "fleet.json"))
    try:
        plan = run_inventory(inventory(hosts), nodes, GPU_NODE.replace("gpu_node.py", "verify.py"))
    finally:
        del SHARED["verify_report_path"], SHARED["fleet_report_path"]
    steps = {
        record["host"]: {step["name"]: step for step in record["steps"]}
        for record in json.loads(report.read_text())["nodes"]
    }
    assert steps["@fake/gpu2"]["imex_domain"]["reason"] == (
        "IMEX domain rack-a is DEGRADED: @fake/gpu1 (10.0.0.3) UNAVAILABLE (nvidia-imex-ctl -N)"
    )
    assert steps["@fake/gpu3"]["imex_domain"]["reason"] == (
        "IMEX domain rack-a is DEGRADED: @fake/gpu1 (10.0.0.3) not listed (nvidia-imex-ctl -N)"
    )
    assert steps["@fake/gpu1"]["imex_domain"]["reason"] == (
        "nvidia-imex-ctl -N (exit 0) named no member of IMEX domain rack-a: Failed to connect to the IMEX daemon"
    )
    assert "imex_domain" not in steps["@fake/cpu1"]
    assert not [command for name, command in plan.timeline if name == "@fake/cpu1" and "nvidia-imex-ctl" in command]


def test_device_node_channels_put_the_boot_unit_and_its_script_and_take_the_module_option_away():
    """imex_channels=device-node on a host that had the module option: the unit and its script (the node's
    channel0 made at every boot) are put and the unit enabled, the option's file removed."""
    option = (digest_read(imex.CHANNEL_OPTION_PATH), digest_lines("# an earlier run's\n"))
    hosts = {"gpu1": {**DOMAIN["gpu1"], "imex_channels": "device-node"}}
    plan = run_inventory(inventory(hosts), {"@fake/gpu1": rhel_node(option)})
    assert plan.error is None and not plan.failures, (plan.error, plan.failures)
    names = plan.op_names()
    assert f"IMEX domain | Put {imex.CHANNEL_SCRIPT} (imex_channels=device-node)" in names
    assert "IMEX domain | Put /etc/systemd/system/gpu-node-imex-channel.service (imex_channels=device-node)" in names
    assert f"IMEX domain | Remove {imex.CHANNEL_OPTION_PATH} (imex_channels=device-node)" in names
    assert "IMEX domain | Enable gpu-node-imex-channel.service (at every boot)" in names
