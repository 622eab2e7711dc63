"""The runtimes section: which stages run, which runtimes are wired to nvidia and how."""

from __future__ import annotations

from pydantic import Field, ValidationInfo, model_validator

from ..errors import SettingsError
from ..values import STAGES, AbsolutePath, Cdi, ContainerRuntime, PackageVersion, RuntimeMode, Stage
from .base import Section, given_values


class RuntimeSettings(Section):
    """Stages and runtimes"""

    stages: tuple[Stage, ...] = Field(
        STAGES, min_length=1, description="which stages of deploy/gpu_node.py run (preflight always does)"
    )
    container_runtimes: tuple[ContainerRuntime, ...] = Field(
        ("containerd",), min_length=1, description="which runtimes to wire to nvidia"
    )
    nvidia_runtime_default: bool = Field(
        True, description="make nvidia the default runtime; false: only the handler, for a RuntimeClass"
    )
    systemd_cgroup: bool = Field(
        True, description="SystemdCgroup for runc and nvidia (must match the kubelet's cgroupDriver)"
    )
    containerd_config_path: AbsolutePath = Field("/etc/containerd/config.toml", description="containerd's config file")
    containerd_install: bool = Field(True, description="install the distro's containerd when the node has none")
    containerd_version: PackageVersion | None = Field(None, description="exact containerd package version to install")
    docker_daemon_config_path: AbsolutePath = Field("/etc/docker/daemon.json", description="Docker's daemon.json")
    docker_install: bool = Field(
        False, description="install the distro's Docker package when docker is wired but missing"
    )
    cdi: Cdi = Field(
        "auto",
        description="the Container Device Interface: on in each wired runtime that has it (containerd 1.7's "
        "`enable_cdi`, Docker's `features.cdi`), the spec generated once the driver answers, the "
        "toolkit's refresh units enabled; auto: "
        "where the runtimes have it; true: refused where one has not (containerd 1.6, Docker before "
        "25); false: turned off where gpu-node turned it on (the refresh too). Replaces `containerd_enable_cdi` and "
        "`docker_enable_cdi`",
    )
    nvidia_runtime_mode: RuntimeMode | None = Field(
        None,
        description="the nvidia runtime's own mode in /etc/nvidia-container-runtime/config.toml (its "
        "comments kept); unset: the file is left as it is. cdi: the runtime injects the CDI "
        "devices NVIDIA_VISIBLE_DEVICES or `cdi.k8s.io/` annotations name, and containerd's "
        "nvidia runtime passes those annotations on (`container_annotations`); needs CDI on "
        "(refused with cdi=false, or cdi=auto on a runtime without CDI); see docs/cdi.md",
    )
    service_restart_timeout: int = Field(
        30, ge=5, le=600, description="seconds a restarted runtime has to become active before rollback"
    )
    drain_before_restart: bool = Field(
        False,
        description="cordon and drain the node (kubectl on the control plane) before a runtime restart or "
        "reboot; uncordon after verify passes",
    )
    drain_timeout: int = Field(300, ge=10, le=3600, description="seconds `kubectl drain` has to evict the node's pods")
    runtime_config_backups: int = Field(
        5,
        ge=1,
        le=100,
        description="how many backups of a runtime config (`FILE.gpu-node-backup-TIMESTAMP`, mode 0600) stay "
        "beside it: after a swap the oldest beyond this number are removed (so are the kept "
        "versions a failed restart rejected)",
    )
    undo_remove_packages: bool = Field(
        False,
        description="deploy/undo.py also removes the packages gpu-node installed (named or pulled in; none the node "
        "had before), when nothing else needs them; false: they stay, their holds released",
    )

    @model_validator(mode="after")
    def _runtime_mode_fits_cdi(self, info: ValidationInfo) -> RuntimeSettings:
        if given_values(info) is not None and self.nvidia_runtime_mode == "cdi" and self.cdi == "false":
            raise SettingsError(
                "invalid setting nvidia_runtime_mode='cdi': allowed only with cdi=auto or true (cdi=false turns CDI "
                "off, and the runtime's cdi mode injects devices from the CDI spec the cdi stage keeps)"
            )
        return self
