"""
What the rack's settings hold, parsed, pure and light: an IMEX member's address and a MIG layout.
deploy/settings/values.py checks the settings with these, so a run imports them and not the domains
that use them (imex.py, mig.py; docs/datacenter.md).
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


def ip_address(value: str) -> str | None:
    """``value`` as an IP address (its canonical text), None when it is not one."""
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        return None


# A MIG profile as NVIDIA names them (MIG user guide): [<compute>c.]<slices>g.<memory>gb[+<attributes>]
PROFILE = re.compile(r"([1-9][0-9]?c\.)?[1-9][0-9]?g\.[1-9][0-9]*gb(\+[a-z]+(\.[a-z]+)*(,[a-z]+(\.[a-z]+)*)*)?")
LAYOUT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
MAX_COUNT = 8  # no GPU has more MIG slices
ALLOWED = (
    'a layout: {"name": NAME, "gpus": {"all" or "0,1": {PROFILE: COUNT} or "disabled"}}, e.g. '
    '{"name": "inference", "gpus": {"all": {"1g.10gb": 7}}} (JSON on the command line)'
)


@dataclass(frozen=True)
class GpuLayout:
    devices: str | tuple[int, ...]  # "all" or GPU indexes
    profiles: tuple[tuple[str, int], ...]  # () : MIG off on these GPUs


@dataclass(frozen=True)
class MigLayout:
    name: str
    gpus: tuple[GpuLayout, ...]


def _devices(key: Any) -> str | tuple[int, ...]:
    text = str(key).strip()
    if text == "all":
        return "all"
    indexes = [part.strip() for part in text.split(",")]
    if not all(part.isdigit() and len(part) <= 3 for part in indexes):
        raise ValueError(f"{ALLOWED} (GPUs {text!r}: all, or GPU indexes such as 0,1)")
    return tuple(sorted({int(part) for part in indexes}))


def _profiles(value: Any) -> tuple[tuple[str, int], ...]:
    if value in ("disabled", {}, None):
        return ()
    if not isinstance(value, Mapping):
        raise ValueError(f"{ALLOWED} (each GPU's value: profile counts or disabled)")
    profiles = []
    for profile, count in value.items():
        if not isinstance(profile, str) or not PROFILE.fullmatch(profile):
            raise ValueError(f"{ALLOWED} (MIG profile {str(profile)[:40]!r}: such as 1g.10gb, 3g.40gb, 1c.2g.20gb)")
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_COUNT:
            raise ValueError(f"{ALLOWED} (the count of {profile}: 1 to {MAX_COUNT})")
        profiles.append((profile, count))
    return tuple(sorted(profiles))


def mig_layout(value: Any) -> MigLayout | None:
    """The ``mig_layout`` setting from a mapping or its JSON text; None for none."""
    if value is None or value == "" or isinstance(value, MigLayout):
        return value or None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise ValueError(ALLOWED) from None
    if not isinstance(value, Mapping) or set(value) != {"name", "gpus"} or not isinstance(value["gpus"], Mapping):
        raise ValueError(ALLOWED)
    name = value["name"]
    if not isinstance(name, str) or not LAYOUT_NAME.fullmatch(name):
        raise ValueError(f"{ALLOWED} (the name: letters, digits, . _ -, at most 63)")
    if not value["gpus"]:
        raise ValueError(f"{ALLOWED} (at least one GPU entry)")
    gpus = tuple(GpuLayout(_devices(key), _profiles(profiles)) for key, profiles in value["gpus"].items())
    named_gpus = [index for gpu in gpus if gpu.devices != "all" for index in gpu.devices]
    if ("all" in [gpu.devices for gpu in gpus] and len(gpus) > 1) or len(named_gpus) != len(set(named_gpus)):
        raise ValueError(f"{ALLOWED} (each GPU in one entry: all alone, or distinct indexes)")
    return MigLayout(name, gpus)
