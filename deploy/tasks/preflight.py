"""Stage 1 (read-only): what the node is, and whether it is safe to go on."""

from __future__ import annotations

from dataclasses import dataclass

from pyinfra import host, logger
from pyinfra.api import deploy
from pyinfra.facts.server import Arch, LinuxDistribution

from deploy.distros import Platform, detect_platform
from deploy.settings import Settings, likely_typos


@dataclass(frozen=True)
class Node:
    platform: Platform


@deploy("Preflight")
def preflight(settings: Settings) -> Node:
    for note in likely_typos(host.data.dict()):
        logger.warning(f"{host.print_prefix}{note}")
    platform = detect_platform(host.get_fact(LinuxDistribution), host.get_fact(Arch))
    logger.info(f"{host.print_prefix}platform: {platform.description}, family {platform.family.name}")
    return Node(platform=platform)
