"""
The one table of containerd's installations: a plain containerd, and the Kubernetes distributions that
bring their own (k3s, rke2, microk8s, k0s). For each: what shows it is installed, the units that
run it, its containerd binary, the file the NVIDIA runtime is merged into, the config containerd
runs with and its socket. The ContainerdInstallations fact looks for the table's paths and units;
``classify_installation`` and ``config_target`` read the table. Pure data.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

PLAIN_SOCKET = "/run/containerd/containerd.sock"
RANCHER_SOCKET = "/run/k3s/containerd/containerd.sock"  # k3s and rke2 alike

K3S_CONTAINERD_DIR = "/var/lib/rancher/k3s/agent/etc/containerd"
RKE2_CONTAINERD_DIR = "/var/lib/rancher/rke2/agent/etc/containerd"
K0S_DROPIN = "/etc/k0s/containerd.d/gpu-node-nvidia.toml"
# k0s merges the CRI section of a drop-in into the config it generates: start from an empty
# version 2 file, never from a full default config (that would override k0s's own settings).
K0S_DROPIN_BASE = (
    "# The NVIDIA runtime for k0s's containerd, managed by gpu-node.\n"
    "# k0s merges this CRI section into the containerd config it generates.\n"
    "version = 2\n"
)
MICROK8S_TEMPLATE = "/var/snap/microk8s/current/args/containerd-template.toml"


@dataclass(frozen=True)
class ContainerdInstallation:
    """Who owns containerd on a node, and where the NVIDIA runtime goes for it."""

    name: str
    # Paths that show it is installed.
    marks: tuple[str, ...]
    # The units that run its containerd: the active one, else the installed one, else the first is restarted.
    units: tuple[str, ...]
    # Whether an installed unit of it shows it is installed, as its paths do.
    unit_marks: bool = True
    # It watches its config and reloads containerd itself: no unit to restart.
    reloads_itself: bool = False
    binary: str = "containerd"
    # The file the runtime is merged into; None: the containerd_config_path setting, or the
    # template of an installation that regenerates its config (``template_dir``).
    config: str | None = None
    # k3s / rke2: config.toml is regenerated here at every start, from config-v3.toml.tmpl or
    # config.toml.tmpl when one exists; the runtime goes into that template, started from config.toml.
    template_dir: str | None = None
    initial_text: str | None = None  # the text a missing ``config`` starts from
    validate_with_binary: bool = True  # False: a template containerd cannot read as it is
    running_config: str = ""  # the config containerd runs with, when not the file above
    socket: str = PLAIN_SOCKET

    @property
    def generated_config(self) -> str | None:
        return f"{self.template_dir}/config.toml" if self.template_dir else None

    @property
    def templates(self) -> tuple[str, str] | None:
        """(version 2, version 3) template."""
        if not self.template_dir:
            return None
        return f"{self.template_dir}/config.toml.tmpl", f"{self.template_dir}/config-v3.toml.tmpl"

    @property
    def looked_for(self) -> tuple[str, ...]:
        """The paths the ContainerdInstallations fact reports: its marks, its generated config and templates, its binary."""
        files = (self.generated_config, *(self.templates or ()), self.binary)
        return tuple(dict.fromkeys(self.marks + tuple(path for path in files if path and path.startswith("/"))))


def _rancher(name: str, directory: str, units: tuple[str, ...], binary: str) -> ContainerdInstallation:
    """k3s and rke2 keep containerd the same way, each under its own name."""
    return ContainerdInstallation(
        name=name,
        marks=(directory, f"/usr/local/bin/{name}"),
        units=units,
        binary=binary,
        template_dir=directory,
        socket=RANCHER_SOCKET,
    )


# In the order they are detected: the first whose marks a node shows owns its containerd.
INSTALLATIONS: dict[str, ContainerdInstallation] = {
    installation.name: installation
    for installation in (
        _rancher("k3s", K3S_CONTAINERD_DIR, ("k3s", "k3s-agent"), "/var/lib/rancher/k3s/data/current/bin/containerd"),
        _rancher("rke2", RKE2_CONTAINERD_DIR, ("rke2-server", "rke2-agent"), "/var/lib/rancher/rke2/bin/containerd"),
        ContainerdInstallation(
            name="microk8s",
            marks=(MICROK8S_TEMPLATE, "/snap/bin/microk8s"),
            units=("snap.microk8s.daemon-containerd",),
            unit_marks=False,
            # The template holds ${SNAP}-style placeholders microk8s fills in: checked as TOML only.
            config=MICROK8S_TEMPLATE,
            validate_with_binary=False,
            running_config="/var/snap/microk8s/current/args/containerd.toml",
            socket="/var/snap/microk8s/common/run/containerd.sock",
        ),
        ContainerdInstallation(
            name="k0s",
            marks=("/etc/k0s", "/usr/local/bin/k0s", "/var/lib/k0s/bin/containerd"),
            units=("k0sworker", "k0scontroller"),
            reloads_itself=True,  # k0s watches its drop-in directory
            binary="/var/lib/k0s/bin/containerd",
            config=K0S_DROPIN,
            initial_text=K0S_DROPIN_BASE,
            running_config="/etc/k0s/containerd.toml",  # k0s generates it, importing its drop-ins
            socket="/run/k0s/containerd.sock",
        ),
        ContainerdInstallation(name="plain", marks=(), units=("containerd",), unit_marks=False),
    )
}
PLAIN = INSTALLATIONS["plain"]

# What the ContainerdInstallations fact looks for.
INSTALLATION_PATHS = tuple(
    dict.fromkeys(path for installation in INSTALLATIONS.values() for path in installation.looked_for)
)
INSTALLATION_UNITS = tuple(
    dict.fromkeys(unit for installation in INSTALLATIONS.values() for unit in installation.units)
)
GENERATED_CONFIGS = tuple(
    installation.generated_config for installation in INSTALLATIONS.values() if installation.generated_config
)


def classify_installation(state: dict[str, Any]) -> dict[str, Any]:
    """
    The installation that owns containerd on the node (``state``: the ContainerdInstallations fact), and the
    unit that runs it.

    .. code:: python

        {"name": "k3s", "service": "k3s-agent"}
    """
    paths = set(state.get("paths", ()))
    units = state.get("units", {})

    def installed(installation: ContainerdInstallation) -> list[str]:
        return [unit for unit in installation.units if unit in units]

    owner = next(
        (
            installation
            for installation in INSTALLATIONS.values()
            if paths.intersection(installation.marks) or (installation.unit_marks and installed(installation))
        ),
        PLAIN,
    )
    if owner.reloads_itself:
        return {"name": owner.name, "service": None}
    active = [unit for unit in installed(owner) if units[unit] == "active"]
    return {"name": owner.name, "service": (active or installed(owner) or list(owner.units))[0]}


@dataclass(frozen=True)
class ConfigTarget:
    """Where the NVIDIA runtime goes for one installation, and how the change is applied."""

    path: str
    service: str | None
    binary: str = "containerd"
    base_path: str | None = None
    initial_text: str | None = None
    validate_with_binary: bool = True
    hint: str = ""
    # What verify asks: the config containerd runs with (the file above, or the one the installation
    # generates from it) and the socket it serves.
    running_config: str = ""
    socket: str = PLAIN_SOCKET

    @property
    def config_in_effect(self) -> str:
        return self.running_config or self.base_path or self.path


def _template(
    installation: ContainerdInstallation, templates: tuple[str, str], containerd_found: dict[str, Any]
) -> str:
    """The template k3s / rke2 reads (of ``installation``'s ``templates``): the one there, else the one of the
    generated config's version."""
    paths = set(containerd_found.get("paths", ()))
    v2_template, v3_template = templates
    if v3_template in paths:
        return v3_template
    if v2_template in paths:
        return v2_template
    version = containerd_found.get("generated_versions", {}).get(installation.generated_config, 2)
    return v3_template if version >= 3 else v2_template


def plain_target(containerd_config_path: str) -> ConfigTarget:
    """The target of a plain containerd (what preflight reads ahead for, before it knows the installation)."""
    return config_target(containerd_config_path, {"installation": {"name": PLAIN.name, "service": PLAIN.units[0]}})


def config_target(containerd_config_path: str, containerd_found: dict[str, Any]) -> ConfigTarget:
    """The file to merge into, per installation (``containerd_found``: preflight's ContainerdInstallations reading);
    ``containerd_config_path`` is the setting, for a plain containerd."""
    installation = INSTALLATIONS[containerd_found["installation"]["name"]]
    service = containerd_found["installation"]["service"]
    templates = installation.templates
    if templates is not None:
        # k3s / rke2 regenerate config.toml at every start: write their documented template instead.
        template = _template(installation, templates, containerd_found)
        return ConfigTarget(
            path=template,
            service=service,
            binary=installation.binary,
            base_path=installation.generated_config,
            socket=installation.socket,
            hint=(
                f" {installation.name} reads {template} as a Go template: if it uses template directives, add the "
                f"nvidia runtime to it by hand (see {installation.name}'s 'Configuring containerd' documentation) or "
                "remove it so gpu-node can write it from the generated config.toml"
            ),
        )
    return ConfigTarget(
        path=installation.config or containerd_config_path,
        service=service,
        binary=installation.binary,
        initial_text=installation.initial_text,
        validate_with_binary=installation.validate_with_binary,
        running_config=installation.running_config,
        socket=installation.socket,
    )
