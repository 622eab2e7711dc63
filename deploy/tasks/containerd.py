"""Stage 5a: containerd installed when missing, and wired to the NVIDIA runtime."""

from __future__ import annotations

from dataclasses import dataclass

from pyinfra import host, logger
from pyinfra.api import deploy
from pyinfra.operations import systemd

from deploy.distros import Family, add_repository, install_packages
from deploy.facts.combined import FactCall
from deploy.facts.containerd import (
    K0S_DROPIN_DIR,
    K3S_CONTAINERD_DIR,
    MICROK8S_TEMPLATE,
    RKE2_CONTAINERD_DIR,
)
from deploy.operations import containerd, failure
from deploy.operations import drain as drain_ops
from deploy.operations.drain import DrainTarget
from deploy.settings import Settings

K0S_DROPIN = f"{K0S_DROPIN_DIR}/gpu-node-nvidia.toml"
# The config k0s generates (importing its drop-ins) and microk8s renders from its template.
K0S_CONFIG = "/etc/k0s/containerd.toml"
K0S_SOCKET = "/run/k0s/containerd.sock"
MICROK8S_CONFIG = "/var/snap/microk8s/current/args/containerd.toml"
MICROK8S_SOCKET = "/var/snap/microk8s/common/run/containerd.sock"
# k0s merges the CRI section of a drop-in into the config it generates: start from an empty
# version 2 file, never from a full default config (that would override k0s's own settings).
K0S_DROPIN_BASE = (
    "# The NVIDIA runtime for k0s's containerd, managed by gpu-node.\n"
    "# k0s merges this CRI section into the containerd config it generates.\n"
    "version = 2\n"
)


PLAIN_SOCKET = "/run/containerd/containerd.sock"
RANCHER_SOCKET = "/run/k3s/containerd/containerd.sock"  # k3s and rke2 alike


@dataclass(frozen=True)
class ConfigTarget:
    """Where the NVIDIA runtime goes for one flavour, and how the change is applied."""

    path: str
    service: str | None
    binary: str = "containerd"
    base_path: str | None = None
    initial_text: str | None = None
    validate_with_binary: bool = True
    hint: str = ""
    # What verify asks: the config containerd runs with (the file above, or the one the flavour
    # generates from it) and the socket it serves.
    running_config: str = ""
    socket: str = PLAIN_SOCKET

    @property
    def config_in_effect(self) -> str:
        return self.running_config or self.base_path or self.path


def _rancher_target(directory: str, containerd_found: dict, binary: str, name: str) -> ConfigTarget:
    """k3s / rke2 regenerate config.toml at every start: write their documented template instead."""
    paths = set(containerd_found.get("paths", ()))
    generated = f"{directory}/config.toml"
    v3_template = f"{directory}/config-v3.toml.tmpl"
    v2_template = f"{directory}/config.toml.tmpl"
    if v3_template in paths:
        template = v3_template
    elif v2_template in paths:
        template = v2_template
    else:
        version = containerd_found.get("generated_versions", {}).get(generated, 2)
        template = v3_template if version >= 3 else v2_template
    return ConfigTarget(
        path=template,
        service=containerd_found["flavour"]["service"],
        binary=binary,
        base_path=generated,
        socket=RANCHER_SOCKET,
        hint=(
            f" {name} reads {template} as a Go template: if it uses template directives, add the "
            f"nvidia runtime to it by hand (see {name}'s 'Configuring containerd' documentation) or "
            "remove it so gpu-node can write it from the generated config.toml"
        ),
    )


def reads(settings: Settings) -> list[FactCall]:
    """
    The fact the runtimes stage decides on, for preflight to read ahead: a plain containerd's
    config, as the wiring reads it (the flavours' own files, known only after preflight, are read
    by the operation).
    """
    return [containerd.config_read(settings.containerd_config_path, None, "containerd")]


def config_target(containerd_config_path: str, containerd_found: dict) -> ConfigTarget:
    """The file to merge into, per flavour (``containerd_found``: preflight's ContainerdFlavour reading);
    ``containerd_config_path`` is the setting, for a plain containerd."""
    flavour = containerd_found["flavour"]["name"]
    if flavour == "k3s":
        return _rancher_target(K3S_CONTAINERD_DIR, containerd_found,
                               "/var/lib/rancher/k3s/data/current/bin/containerd", "k3s")
    if flavour == "rke2":
        return _rancher_target(RKE2_CONTAINERD_DIR, containerd_found, "/var/lib/rancher/rke2/bin/containerd", "rke2")
    if flavour == "k0s":
        return ConfigTarget(path=K0S_DROPIN, service=None, binary="/var/lib/k0s/bin/containerd",
                            initial_text=K0S_DROPIN_BASE, running_config=K0S_CONFIG, socket=K0S_SOCKET)
    if flavour == "microk8s":
        # The template holds ${SNAP}-style placeholders microk8s fills in: checked as TOML only.
        return ConfigTarget(path=MICROK8S_TEMPLATE, service=containerd_found["flavour"]["service"],
                            validate_with_binary=False, running_config=MICROK8S_CONFIG, socket=MICROK8S_SOCKET)
    return ConfigTarget(path=containerd_config_path, service="containerd")


def install_containerd(settings: Settings, family: Family) -> None:
    """The distribution's containerd (Docker's containerd.io on the RHEL family), enabled and started."""
    manager = family.package_manager
    version = settings.containerd_version
    if version and not manager.can_pin:
        logger.warning(f"{host.print_prefix}{manager.name} cannot pin containerd_version: installing the current one")
        version = None
    if family.containerd_repo:
        add_repository(manager, "Add Docker's repository for containerd.io", family.containerd_repo)
    install_packages(manager, "Install containerd", {family.containerd_package: version},
                     lock_timeout=settings.apt_lock_timeout)
    systemd.service(name="Enable and start containerd", service="containerd", running=True, enabled=True)


@deploy("containerd")
def containerd_runtime(settings: Settings, family: Family, containerd_found: dict, drain: DrainTarget | None = None,
                       pending_restarts: dict | None = None):
    flavour = containerd_found["flavour"]["name"]
    if flavour == "plain" and not containerd_found.get("binary"):
        if not settings.containerd_install:
            failure.fail(
                name="Check that containerd is installed",
                message="containerd is not installed and containerd_install=false: install containerd, "
                "or set containerd_install=true to install the distribution's package",
            )
            return
        install_containerd(settings, family)
    elif flavour != "plain":
        logger.info(f"{host.print_prefix}containerd belongs to {flavour}: wiring its own config")

    target = config_target(settings.containerd_config_path, containerd_found)
    wiring = settings.runtime_wiring(enable_cdi=settings.containerd_enable_cdi)
    restart_pending = bool(target.service) and (pending_restarts or {}).get(target.service) == target.path
    plan = containerd.plan_node_wiring(target.path, wiring, target.binary, target.base_path, target.initial_text,
                                       target.validate_with_binary, target.hint)
    if plan.in_place() and not restart_pending:
        # No operation for what is in place: a fleet's no-op pays pyinfra's per-operation cost per node.
        return
    wired = containerd.configure_nvidia_runtime(
        name=f"Wire the nvidia runtime into {target.path}",
        path=target.path,
        wiring=wiring,
        service=target.service,
        containerd_binary=target.binary,
        base_path=target.base_path,
        initial_text=target.initial_text,
        validate_with_binary=target.validate_with_binary,
        restart_timeout=settings.service_restart_timeout,
        hint=target.hint,
        restart_pending=restart_pending,
        before_restart=drain_ops.before_restart(drain),
    )
    drain_ops.watch(drain, wired)
