"""
IMEX domains, pure: the hosts of one multi-node NVLink domain (GB200/GB300 NVL72 compute trays) run
NVIDIA's IMEX daemon at the driver's version, each listing every member of its domain in
``nodes_config.cfg`` (NVIDIA's IMEX guide: one IP address per line, the same list on every member),
and CUDA's fabric memory needs an IMEX channel (``/dev/nvidia-caps-imex-channels/channel0``).

A host's domain is its ``imex_domain`` setting (host data, or group_data of an inventory group per
domain); its address is ``imex_address``, else the inventory's SSH host where that is an IP address.
``nvidia-imex-ctl -N`` prints the domain's state: a ``Node #N - ADDRESS - STATE - Version: V`` line
per member and ``Domain State: UP|DEGRADED|DOWN`` (the format NVIDIA's guide and AWS's IMEX guide
show), which verify reads.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass

from .values import ip_address

IMEX_UNIT = "nvidia-imex.service"
NODES_CONFIG = "/etc/nvidia-imex/nodes_config.cfg"
# imex_channels=module-option: the driver creates channel0 as it loads (NVIDIA's IMEX guide, "IMEX Channels")
CHANNEL_OPTION_PATH = "/etc/modprobe.d/gpu-node-imex-channel.conf"
CHANNEL_OPTION = "options nvidia NVreg_CreateImexChannel0=1\n"
CHANNEL_DEVICE = "/dev/nvidia-caps-imex-channels/channel0"
# imex_channels=device-node: a oneshot unit creates it at every boot (channels do not survive a reboot),
# after the driver loads and before IMEX starts (deploy/shell/imex_channel.sh)
CHANNEL_UNIT = "gpu-node-imex-channel.service"
CHANNEL_SCRIPT = "/usr/lib/gpu-node/imex-channel.sh"
# The daemon's state where it serves its domain (nvidia-imex-ctl -N, -q)
READY = "READY"


class DomainRefusal(ValueError):
    """A domain that cannot be written: one line naming the host and the setting that fixes it."""


@dataclass(frozen=True)
class Member:
    host: str  # the inventory's name
    address: str  # where its peers reach its IMEX daemon


def member_address(host: str, imex_address: str | None, ssh_host: str) -> str:
    """The address ``host``'s peers reach it at: ``imex_address``, else its SSH host when that is an
    IP address (IMEX's node list holds addresses, not names)."""
    if imex_address:
        return imex_address
    address = ip_address(ssh_host)
    if address is None:
        raise DomainRefusal(
            f"host {host} is in an IMEX domain without imex_address, and its SSH host {ssh_host!r} is "
            "not an IP address: set imex_address to the address its peers reach it at"
        )
    return address


def domain_members(domain: str, hosts: Iterable[tuple[str, str | None, str | None, str]]) -> tuple[Member, ...]:
    """The members of ``domain`` from every inventory host's (name, imex_domain, imex_address, SSH
    host), in the order every member lists them (by address: the same file on each, as IMEX needs);
    two members at one address are refused."""
    members = [
        Member(name, member_address(name, address, ssh_host))
        for name, host_domain, address, ssh_host in hosts
        if host_domain == domain
    ]
    seen: dict[str, str] = {}
    for member in members:
        if member.address in seen:
            raise DomainRefusal(
                f"hosts {seen[member.address]} and {member.host} of IMEX domain {domain!r} have one "
                f"address, {member.address}: set each one's imex_address"
            )
        seen[member.address] = member.host
    return tuple(sorted(members, key=lambda member: ipaddress.ip_address(member.address)))


def nodes_config_text(members: Iterable[Member]) -> str:
    """``nodes_config.cfg``: the members' addresses, one a line. No comment line: NVIDIA documents
    none in this file, and every member must read the same list."""
    return "".join(f"{member.address}\n" for member in members)


@dataclass(frozen=True)
class NodeStatus:
    index: int
    address: str
    state: str
    version: str


@dataclass(frozen=True)
class DomainStatus:
    nodes: tuple[NodeStatus, ...]
    state: str | None  # UP, DEGRADED, DOWN; None: no "Domain State:" line


NODE_LINE = re.compile(r"^Node #(\d+)\s+-\s+(\S+)\s+-\s+(\S+)\s+-\s+Version:\s*(\S*)")
DOMAIN_LINE = re.compile(r"^Domain State:\s*(\S+)")


def domain_status(lines: Iterable[str]) -> DomainStatus:
    """``nvidia-imex-ctl -N``'s node lines and domain state (other lines, the connectivity table, skipped)."""
    nodes, state = [], None
    for line in lines:
        text = line.strip()
        node = NODE_LINE.match(text)
        if node:
            nodes.append(NodeStatus(int(node.group(1)), node.group(2), node.group(3), node.group(4)))
        domain = DOMAIN_LINE.match(text)
        if domain:
            state = domain.group(1)
    return DomainStatus(tuple(nodes), state)


def missing_peers(status: DomainStatus, members: Iterable[Member]) -> list[str]:
    """Each member not READY in ``status``, as "HOST (ADDRESS) STATE", or "not listed"."""
    by_address = {node.address: node for node in status.nodes}
    missing = []
    for member in members:
        node = by_address.get(member.address)
        if node is None:
            missing.append(f"{member.host} ({member.address}) not listed")
        elif node.state != READY:
            missing.append(f"{member.host} ({member.address}) {node.state}")
    return missing
