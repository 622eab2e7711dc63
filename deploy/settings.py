"""
The settings users set: each one's type, default and description, declared once below, and one
typed, validated view of ``host.data``.

Values reach ``host.data`` the pyinfra way, and a deploy call's keyword arguments go over them
(``call_settings``; docs/settings.md says in which order). Values from
``--data`` arrive as text or pyinfra's parse of it (``true`` -> True, ``535`` -> 535, JSON); every
setting accepts both, and comma-separated text for lists. pydantic checks types, choices and
bounds; an invalid value raises ``SettingsError`` while pyinfra prepares the run, so no host is
changed, with one line naming the key, the value and what is allowed. docs/settings.md is
generated from the declarations here: ``.venv/bin/python scripts/settings_doc.py``.
"""

from __future__ import annotations

import difflib
import re
import types
from dataclasses import dataclass
from functools import lru_cache
from typing import Annotated, Any, Callable, Collection, Literal, Mapping, Union, get_args, get_origin
from urllib.parse import urlparse

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, StringConstraints
from pydantic import ValidationError, model_validator
from pydantic.fields import FieldInfo
from pyinfra import logger
from pyinfra.api.exceptions import PyinfraError
from pyinfra_cli.exceptions import CliError

from .foundations import batches
from .foundations.run_state import per_run

# The inventory groups users put hosts in (inventory.py) unless gpu_nodes_group / control_plane_group
# name others: GPU nodes, and where kubectl runs.
GPU_NODES_GROUP = "gpu_nodes"
CONTROL_PLANE_GROUP = "control_plane"
# The NVIDIA device plugin refuses older drivers.
MIN_DRIVER_VERSION = "384.81"
NVIDIA_CONTAINER_RUNTIME = "/usr/bin/nvidia-container-runtime"
# The base of NVIDIA's tree; the family adds "deb/$(ARCH)" or "rpm/$basearch" (a mirror keeps that layout).
NVIDIA_TOOLKIT_REPO_URL = "https://nvidia.github.io/libnvidia-container/stable"
NVIDIA_TOOLKIT_GPGKEY_URL = "https://nvidia.github.io/libnvidia-container/gpgkey"
# The base of NVIDIA's driver tree for SUSE; the family adds "opensuse/leap/<version>" and the like.
NVIDIA_DRIVER_REPO_URL = "https://download.nvidia.com"
# The base of NVIDIA's CUDA tree; the family adds "{dist}/{arch}".
NVIDIA_CUDA_REPO_URL = "https://developer.download.nvidia.com/compute/cuda/repos"
# The primary-key fingerprints of NVIDIA's repository keys, trusted only once the key served matches.
# The toolkit's (key id f796ecb0, which https://nvidia.github.io/libnvidia-container/ names): read with
# gpg from the key NVIDIA publishes at https://nvidia.github.io/libnvidia-container/gpgkey (NVIDIA's
# install guide, https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/install-guide.html,
# prints no fingerprint).
NVIDIA_TOOLKIT_KEY_FINGERPRINT = "C95B321B61E88C1809C4F759DDCAE044F796ECB0"
# The CUDA repository's: 3bf863cc (deb) and D42D0685 (rpm), as NVIDIA lists them at
# https://docs.nvidia.com/datacenter/tesla/driver-installation-guide/gpg-keys-used-to-sign-the-packages.html,
# whole as NVIDIA prints them in https://github.com/NVIDIA/cuda-repo-management/blob/main/SIGNATURES.md
NVIDIA_CUDA_KEY_FINGERPRINTS = ("EB693B3035CD5710E231E123A4B469963BF863CC",
                                "610C7B14E068A878070DA4E99CD0A493D42D0685")


@dataclass(frozen=True)
class RuntimeWiring:
    """What wiring a runtime (containerd or Docker) to the NVIDIA runtime sets."""

    binary: str = NVIDIA_CONTAINER_RUNTIME
    make_default: bool = True
    systemd_cgroup: bool = True
    # CDI in the runtime's own config: True turned on, False turned off, None left as the runtime has
    # it (cdi=auto until the runtime's version says whether it has CDI: deploy/runtimes/cdi.py)
    enable_cdi: bool | None = None
    # containerd passes a container's annotations matching these to the nvidia runtime (its CDI
    # mode reads cdi.k8s.io/ annotations); merged with the file's own
    container_annotations: tuple[str, ...] = ()


@dataclass(frozen=True)
class KeyPin:
    """What a repository's signing key must be before anything trusts it: one of ``fingerprints``
    (primary keys, as ``gpg --with-colons`` prints them), which ``setting`` sets (a refusal names it);
    ``url``: where the key is, when a setting says (None: beside the repository)."""

    fingerprints: tuple[str, ...]
    setting: str
    url: str | None = None


class SettingsError(PyinfraError, CliError):
    """
    An invalid setting: raised before any host is changed. Also pyinfra CLI's own error type, so the
    CLI shows it as ``--> pyinfra error: MESSAGE``: its wrapper for other errors names the file and
    line they were raised at, which would point into this file rather than at the value.
    """


@dataclass(frozen=True)
class Allowed:
    """What a value type allows, in words: the error message and docs/settings.md show it."""

    text: str


# C0 controls, DEL and the C1 range: a newline in a value would start a new line in a config
# file or a shell script, NUL truncates arguments.
CONTROL = r"\x00-\x1f\x7f-\x9f"
CONTROL_CHARACTERS = re.compile(f"[{CONTROL}]")
# Characters a URL setting may not hold (besides control characters): whitespace and everything
# a shell, an apt source line or a .repo file gives a meaning to ('#' starts a comment there).
URL_FORBIDDEN = re.compile(r"[\s'\"\\`$;|&<>#]")
URL_ALLOWED = "no whitespace, quotes, backslashes, backticks or $ ; | & < > # (percent-encode them)"
NODE_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def text(pattern: str, allowed: str) -> Any:
    """A string matching ``pattern`` as a whole; ``allowed`` says what that is."""
    return Annotated[str, StringConstraints(pattern=f"^(?:{pattern})$"), Allowed(allowed)]


REPOSITORY_URL = "an https:// URL (http:// needs allow_insecure_repositories=true)"
URL_OR_FILE = "an https:// URL or an absolute path to a file on the controller"
# Credentials in a URL land in files others read (apt sources, .repo files), in process lists and
# in logs: a mirror's credentials belong in the package manager's own auth files.
NO_USER_INFO = "without user:password@ (put a mirror's credentials in the package manager's own auth file)"


def checked_url(value: str, allowed: str, schemes: tuple[str, ...]) -> str:
    """``value`` as a URL with one of ``schemes``: a host for http(s), a path for file, no user-info."""
    if URL_FORBIDDEN.search(value) or CONTROL_CHARACTERS.search(value):
        raise ValueError(f"{allowed}, with {URL_ALLOWED}")
    try:
        parsed = urlparse(value)
        parsed.port  # noqa: B018 - raises on a port that is not a number
    except ValueError as error:
        raise ValueError(f"{allowed} ({error})") from None
    if parsed.scheme not in schemes:
        raise ValueError(allowed)
    if "@" in parsed.netloc:
        raise ValueError(f"{allowed}, {NO_USER_INFO}")
    if parsed.scheme == "file":
        if parsed.netloc not in ("", "localhost") or not parsed.path.startswith("/"):
            raise ValueError(f"{allowed} (file:///absolute/path)")
    elif not parsed.hostname:
        raise ValueError(f"{allowed} (with a host: https://host/path)")
    return value


def repository_url(value: str) -> str:
    return checked_url(value, REPOSITORY_URL, ("https", "http", "file"))


FINGERPRINTS = "OpenPGP key fingerprints (40 hex digits each, spaces allowed), comma-separated"


def fingerprint_list(value: Any) -> tuple[str, ...]:
    """Fingerprints from a list or comma-separated text, as gpg --with-colons prints them: spaces
    folded out, upper case."""
    if value is None:
        return ()
    items = value if isinstance(value, (list, tuple)) else str(value).split(",")
    folded = tuple(dict.fromkeys(str(item).replace(" ", "").upper() for item in items if str(item).strip()))
    if any(not re.fullmatch("[0-9A-F]{40}", each) for each in folded):
        raise ValueError(FINGERPRINTS)
    return folded


def https_url_or_path(value: str) -> str:
    if value.startswith("/"):
        if CONTROL_CHARACTERS.search(value):
            raise ValueError(f"{URL_OR_FILE} (a path without control characters)")
        return value
    return checked_url(value, URL_OR_FILE, ("https",))


NODE_MAPPING = "a mapping such as host1=node-a,host2=node-b"


def node_mapping(value: Any) -> tuple[tuple[str, str], ...]:
    """
    Inventory host name -> Kubernetes node name, from a dict or ``a=b,c=d`` on the command
    line; kept as sorted pairs (hashable). Node names reach kubectl: they must be node names.
    """
    if value is None or value == "":
        return ()
    if isinstance(value, (list, tuple)) and all(isinstance(pair, (list, tuple)) and len(pair) == 2 for pair in value):
        value = dict(value)  # the pairs this returns
    if isinstance(value, Mapping):
        items = [(str(key).strip(), str(node).strip()) for key, node in value.items()]
    else:
        if any("=" not in item for item in str(value).split(",")):
            raise ValueError(NODE_MAPPING)
        items = [(key.strip(), node.strip()) for key, _, node in
                 (item.partition("=") for item in str(value).split(","))]
    if any(not key or CONTROL_CHARACTERS.search(key) for key, _ in items):
        raise ValueError(f"{NODE_MAPPING} (host names without control characters)")
    if any(len(node) > 253 or not NODE_NAME.fullmatch(node) for _, node in items):
        raise ValueError("host=node pairs whose node is a Kubernetes node name (lower case letters, digits, '-', '.')")
    return tuple(sorted(dict(items).items()))


AbsolutePath = text(f"/[^{CONTROL}]*", "an absolute path without control characters")
ControllerPath = text(f"[^{CONTROL}]+", "a file path on the controller, without control characters")
DriverBranch = text("[0-9]{3}", "a driver branch number such as 535 or 550")
PackageVersion = text("[0-9][0-9A-Za-z.+~:_-]*", "a package version such as 535.183.01 or 1.17.8-1")
ImageReference = text("[a-z0-9][a-z0-9._/:@-]*", "a container image reference such as registry/name:tag")


def _minor_from_number(value: Any) -> Any:
    """pyinfra reads ``--data x=1.30`` as JSON, the number 1.3: a Kubernetes minor has two digits (1.10 on)."""
    if isinstance(value, float):
        major, _, minor = repr(value).partition(".")
        return f"{major}.{minor.ljust(2, '0')}"
    return value


KubernetesMinor = Annotated[
    text(r"v?1\.[1-9][0-9](\.[0-9]+)?", "a Kubernetes version such as 1.30 (1.10 or later)"),
    BeforeValidator(_minor_from_number),
    AfterValidator(lambda version: ".".join(version.lstrip("v").split(".")[:2])),
]
ReleaseTag = Annotated[
    text(r"v?[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.]+)?", "a release such as v0.17.0"),
    AfterValidator(lambda tag: tag if tag.startswith("v") else f"v{tag}"),
]
BatchSizes = Annotated[str, AfterValidator(batches.checked_spec), Allowed(batches.ALLOWED)]
Sha256 = Annotated[
    text("[0-9a-f]{64}", "a SHA-256 digest (64 hex digits)"),
    BeforeValidator(lambda value: value.lower().removeprefix("sha256:") if isinstance(value, str) else value),
]
RepositoryUrl = Annotated[str, AfterValidator(repository_url), Allowed(REPOSITORY_URL)]
UrlOrFile = Annotated[str, AfterValidator(https_url_or_path), Allowed(URL_OR_FILE)]
Fingerprints = Annotated[tuple[str, ...], BeforeValidator(fingerprint_list), Allowed(FINGERPRINTS)]
NodeNames = Annotated[
    tuple[tuple[str, str], ...],
    BeforeValidator(node_mapping),
    Allowed(f"{NODE_MAPPING}, each node a Kubernetes node name"),
]

# A tri-state setting: pyinfra reads --data cdi=true as True.
Cdi = Annotated[
    Literal["auto", "true", "false"],
    BeforeValidator(lambda value: str(value).lower() if isinstance(value, bool) else value),
    Allowed("auto, true or false"),
]
# The nvidia runtime's modes (`[nvidia-container-runtime] mode` in its config.toml).
RuntimeMode = Literal["auto", "cdi", "legacy", "csv"]
# What containerd must pass on for the runtime's cdi mode to see the CDI annotations (as NVIDIA's
# GPU Operator writes it on the nvidia runtime when CDI is on).
CDI_ANNOTATIONS = "cdi.k8s.io/*"
# Settings an older release had, and the one that took each over (a value given to one is read as it).
FOLDED_SETTINGS = {"containerd_enable_cdi": "cdi", "docker_enable_cdi": "cdi"}

Stage = Literal["kernel", "driver", "toolkit", "runtimes", "verify"]
STAGES: tuple[str, ...] = get_args(Stage)


class _Section(BaseModel):
    # Numbers from --data (pyinfra turns "535" into 535) are read as text where text is wanted.
    model_config = ConfigDict(frozen=True, coerce_numbers_to_str=True, extra="ignore")


# Each section is a heading of docs/settings.md (its docstring); Settings joins them.


class RuntimeSettings(_Section):
    """Stages and runtimes"""

    stages: tuple[Stage, ...] = Field(
        STAGES, min_length=1, description="which stages of deploy/gpu_node.py run (preflight always does)"
    )
    container_runtimes: tuple[Literal["containerd", "docker"], ...] = Field(
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
    containerd_version: PackageVersion | None = Field(
        None, description="exact containerd package version to install"
    )
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
        5, ge=1, le=100,
        description="how many backups of a runtime config (`FILE.gpu-node-backup-TIMESTAMP`, mode 0600) stay "
                    "beside it: after a swap the oldest beyond this number are removed (so are the kept "
                    "versions a failed restart rejected)",
    )
    undo_remove_packages: bool = Field(
        False,
        description="deploy/undo.py also removes the packages gpu-node installed (named or pulled in; none the node "
                    "had before), when nothing else needs them; false: they stay, their holds released",
    )


class PackageSettings(_Section):
    """Driver and toolkit"""

    nvidia_driver_install: bool = Field(True, description="install the NVIDIA driver")
    nvidia_driver_branch: DriverBranch | None = Field(
        None, description="driver branch, e.g. 535 or 550 (default: distro's)"
    )
    nvidia_driver_version: PackageVersion | None = Field(None, description="exact driver package version")
    cuda_toolkit_install: bool = Field(False, description="install the CUDA toolkit")
    nvidia_toolkit_install: bool = Field(True, description="install the NVIDIA container toolkit")
    nvidia_toolkit_version: PackageVersion | None = Field(
        None, description="exact version of all four toolkit packages"
    )
    nvidia_toolkit_repo_url: RepositoryUrl = Field(
        NVIDIA_TOOLKIT_REPO_URL, description="toolkit package repository (a mirror for air-gapped sites)"
    )
    nvidia_toolkit_gpgkey_url: RepositoryUrl = Field(
        NVIDIA_TOOLKIT_GPGKEY_URL, description="the key that signs that repository"
    )
    nvidia_toolkit_gpgkey_fingerprint: Fingerprints = Field(
        (NVIDIA_TOOLKIT_KEY_FINGERPRINT,), min_length=1,
        description="the fingerprint the toolkit repository's key must have before it is trusted (NVIDIA's "
                    "by default; a mirror that signs with its own key: its fingerprint)",
    )
    allow_insecure_repositories: bool = Field(
        False, description="accept http:// repository and key URLs (local mirrors)"
    )
    download_timeout: int = Field(
        30, ge=1, le=600,
        description="seconds a repository, key server or release download (kubectl-inspect-gpushare) has to "
                    "answer before the run fails",
    )
    apt_lock_timeout: int = Field(
        120, ge=0, le=3600, description="seconds to wait for another package manager process (apt/dpkg, dnf, zypper, pacman) to "
                              "release its lock before the run fails naming it"
    )


class DataCenterSettings(_Section):
    """Data-center GPUs (docs/datacenter.md)"""

    nvidia_kernel_modules: Literal["auto", "open", "proprietary"] = Field(
        "auto",
        description="the driver's kernel module type (open or proprietary); auto: from the node's GPUs and the driver branch",
    )
    nvidia_persistenced: bool = Field(
        True, description="install and enable nvidia-persistenced (started where a GPU is present)"
    )
    first_boot_unit: bool = Field(
        True,
        description="with the driver stage, install and enable gpu-node-boot.service: at every boot, before "
                    "gpu-node-ready.target, the GPUs' kernel module checked and loaded, the CDI spec regenerated, "
                    "persistenced and Fabric Manager started, the node verified (docs/without-controller.md)",
    )
    fabric_manager_install: bool = Field(
        True,
        description="install NVIDIA Fabric Manager at the driver's version on NVSwitch nodes (with ib_umad and "
                    "NVLSM on NVLink5 nodes); nodes without NVSwitch get none of it",
    )
    nvidia_driver_repo_url: RepositoryUrl = Field(
        NVIDIA_DRIVER_REPO_URL,
        description="NVIDIA's driver repository for SUSE (`.../opensuse/leap/<version>`, `.../suse/sle<N>sp<M>`; "
                    "a mirror keeps that layout)",
    )
    nvidia_cuda_repo_url: RepositoryUrl = Field(
        NVIDIA_CUDA_REPO_URL,
        description="NVIDIA's CUDA repository: Fabric Manager, and the RHEL family's driver and CUDA toolkit "
                    "(a mirror keeps its {dist}/{arch} layout)",
    )
    nvidia_cuda_gpgkey_url: RepositoryUrl | None = Field(
        None,
        description="the CUDA repository's key; unset: beside each repository, as NVIDIA publishes it "
                    "(`3bf863cc.pub` on apt, `D42D0685.pub` on dnf and zypper)",
    )
    nvidia_cuda_gpgkey_fingerprint: Fingerprints = Field(
        NVIDIA_CUDA_KEY_FINGERPRINTS, min_length=1,
        description="the fingerprints the CUDA repository's key may have before it is trusted (NVIDIA's 3bf863cc "
                    "and D42D0685 by default; a mirror that signs with its own key: its fingerprint)",
    )
    nvidia_driver_gpgkey_url: RepositoryUrl | None = Field(
        None, description="the SUSE driver repository's key; unset: `repodata/repomd.xml.key` beside it"
    )
    nvidia_driver_gpgkey_fingerprint: Fingerprints = Field(
        (),
        description="the fingerprint the SUSE driver repository's key must have before it is trusted: required "
                    "where the driver stage adds that repository, because NVIDIA publishes no fingerprint for it "
                    "(check the key yourself, e.g. `gpg --show-keys` of the key file)",
    )


class HostSafetySettings(_Section):
    """Host safety"""

    kernel_modules_load: bool = Field(
        True, description="load modules and apply sysctls now (tests in containers set false)"
    )
    reboot_allowed: bool = Field(False, description="reboot when the new driver needs it")
    require_gpu: bool = Field(
        False, description="fail (instead of reporting 'no GPU') when no NVIDIA GPU is found"
    )
    min_free_disk_mb: int = Field(
        2048, ge=0, description="free space preflight wants on / and /var before installing"
    )


class VerifySettings(_Section):
    """Verification"""

    verify_report_path: ControllerPath = Field(
        "gpu-node-report.json", description="where the controller writes the JSON node report"
    )
    fleet_report_path: ControllerPath = Field(
        "gpu-node-fleet.json",
        description="where the controller writes the JSON fleet report (one row per node; the first host's value); "
        "its HTML page goes beside it, .html for its suffix",
    )
    verify_image: ImageReference = Field(
        "docker.io/nvidia/cuda:12.4.1-base-ubuntu22.04", description="image the verification runs nvidia-smi in"
    )


class KubernetesSettings(_Section):
    """
    Kubernetes (deploy/k8s_gpu.py, control plane)

    `gpu_sharing_replicas` only with `gpu_sharing=time-slicing` or `mps`; the `time_slicing_*`
    settings only with `time-slicing` (MPS and time-slicing are exclusive); `mig_strategy` stays
    `none` with `mps`.
    """

    kubeconfig: AbsolutePath | None = Field(
        None,
        description="the kubeconfig kubectl and helm use on the control-plane host; unset: kubectl's own there, "
                    "as kubectl reads it (the KUBECONFIG variable of the commands pyinfra runs there, a list of "
                    "files merged, else ~/.kube/config), else kubeadm's /etc/kubernetes/admin.conf",
    )
    kube_node_names: NodeNames = Field(
        (), description="inventory host name -> Kubernetes node name, where they differ"
    )
    device_plugin_version: ReleaseTag = Field(
        "v0.17.0", description="NVIDIA device plugin release (image tag and chart version)"
    )
    device_plugin_install_method: Literal["static", "helm"] = Field(
        "static", description="static manifests, or the helm chart"
    )
    gpu_sharing: Literal["none", "time-slicing", "mps", "gpushare"] = Field(
        "none", description="how pods share a GPU"
    )
    gpu_sharing_replicas: int = Field(4, ge=2, le=1024, description="time-slicing / MPS replicas per GPU")
    time_slicing_rename_by_default: bool = Field(
        False, description="advertise nvidia.com/gpu.shared instead of nvidia.com/gpu"
    )
    time_slicing_fail_requests_greater_than_one: bool = Field(
        False, description="reject pods asking for more than one shared GPU"
    )
    mig_strategy: Literal["none", "single", "mixed"] = Field("none", description="MIG strategy")
    nvidia_driver_root: AbsolutePath = Field(
        "/",
        description="where the NVIDIA driver lives on GPU nodes, for the device plugin (`nvidiaDriverRoot`; "
        "another root is mounted read-only at `/driver-root`, as NVIDIA's chart does), e.g. "
        "`/run/nvidia/driver` with a driver container",
    )
    smoke_test: bool = Field(True, description="run the vector-add pod after deploying")
    smoke_test_image: ImageReference = Field(
        "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0", description="the smoke test pod's image"
    )
    smoke_test_timeout: int = Field(300, ge=10, le=3600, description="seconds to wait for the smoke pod")


class GpushareSettings(_Section):
    """
    gpushare (gpu_sharing=gpushare)

    gpushare needs `nvidia_runtime_default=true`: its device plugin drops a pod's
    runtimeClassName, so its pods need nvidia as the default runtime.
    """

    gpushare_memory_unit: Literal["GiB", "MiB"] = Field("GiB", description="gpushare memory unit")
    gpushare_extender_image: ImageReference = Field(
        "registry.cn-hangzhou.aliyuncs.com/acs/k8s-gpushare-schd-extender:1.11-d170d8a",
        description="gpushare scheduler extender image",
    )
    gpushare_device_plugin_image: ImageReference = Field(
        "registry.cn-hangzhou.aliyuncs.com/acs/k8s-gpushare-plugin:v2-1.11-aff8a23",
        description="gpushare device plugin image",
    )
    gpushare_scheduler_config_path: AbsolutePath = Field(
        "/etc/kubernetes/gpushare/scheduler-config.yaml",
        description="the KubeSchedulerConfiguration file kube-scheduler loads (--config)",
    )
    gpushare_scheduler_ready_timeout: int = Field(
        180, ge=10, le=1800, description="seconds the edited kube-scheduler has to come back before rollback"
    )
    gpushare_inspect_install: bool = Field(
        True, description="install the kubectl-inspect-gpushare plugin on the control plane"
    )
    gpushare_inspect_source: UrlOrFile = Field(
        "https://github.com/AliyunContainerService/gpushare-device-plugin/releases/download/v0.3.0/"
        "kubectl-inspect-gpushare",
        description="where kubectl-inspect-gpushare comes from: a URL, or a file on the controller",
    )
    gpushare_inspect_sha256: Sha256 | None = Field(
        None, description="the SHA-256 kubectl-inspect-gpushare must have (required)"
    )
    gpushare_inspect_path: AbsolutePath = Field(
        "/usr/local/bin/kubectl-inspect-gpushare", description="where the plugin is installed"
    )


class GitOpsSettings(_Section):
    """
    GitOps files (deploy/render_cluster.py, on the controller)

    What deploy/k8s_gpu.py would apply, written as files (docs/cluster.md, GitOps); the other
    Kubernetes settings say what goes in them.
    """

    manifests_dir: ControllerPath = Field(
        "gpu-node-manifests", description="the folder deploy/render_cluster.py writes on the controller"
    )
    manifests_inventory: ControllerPath | None = Field(
        None,
        description="an inventory file whose control_plane and gpu_nodes hosts' own settings (host data, "
                    "group_data) the files follow, as `pyinfra INVENTORY deploy/k8s_gpu.py` would read them, "
                    "connecting to none; unset: this run's settings alone",
    )
    manifests_kubernetes_version: KubernetesMinor | None = Field(
        None,
        description="the Kubernetes minor the files are for (e.g. 1.30), which deploy/k8s_gpu.py reads from the "
                    "cluster: gpushare's scheduler config and extender depend on it (required with gpushare)",
    )


class DraSettings(_Section):
    """
    Dynamic Resource Allocation (gpu_allocator=dra; docs/cluster.md)

    Per node group: a group's `gpu_allocator` says whether its nodes' GPUs go to pods through
    NVIDIA's device plugin or through the DRA driver for NVIDIA GPUs (Kubernetes 1.34 or newer). A
    DRA node needs CDI on in containerd, a driver of branch 565 or newer (570.158.01 with
    ComputeDomains) and no gpushare or MIG strategy of the device plugin's.
    """

    gpu_allocator: Literal["device-plugin", "dra"] = Field(
        "device-plugin",
        description="how this node's GPUs reach pods: NVIDIA's device plugin (`nvidia.com/gpu`), or the DRA driver "
                    "for NVIDIA GPUs (ResourceClaims of the DeviceClass `gpu-node.nvidia.com`); set it per node group",
    )
    dra_driver_version: ReleaseTag = Field(
        "v0.5.0", description="the DRA driver for NVIDIA GPUs' release (image tag; its chart's version without the v)"
    )
    dra_driver_install_method: Literal["static", "helm"] = Field(
        "static",
        description="the DRA driver as gpu-node's own manifests (its GPU kubelet plugin), or its Helm chart "
                    "(needed for ComputeDomains: their controller and custom resources come with the chart)",
    )
    dra_compute_domains: bool = Field(
        False,
        description="ComputeDomains (multi-node NVLink, e.g. GB200 NVL72): the chart's ComputeDomain part, a driver "
                    "of 570.158.01 or newer, and IMEX handed over as `dra_imex` says",
    )
    dra_imex: Literal["driver-managed", "host-managed"] = Field(
        "driver-managed",
        description="with dra_compute_domains, who runs IMEX on nodes that have `nvidia-imex.service`: "
                    "driver-managed masks and stops the host's unit so the driver's ComputeDomain daemons own IMEX; "
                    "host-managed leaves it running for the driver's alpha host-managed mode",
    )
    allocator_move_batches: BatchSizes = Field(
        "1",
        description="how many GPU nodes deploy/k8s_gpu.py moves between the device plugin and DRA at a time (the "
                    "control plane's setting), as gpu-node-rollout's --batches: successive sizes, counts or "
                    "percentages of the nodes that move, the last repeating (1,5,25%); the first batch is the "
                    "canary, and a failed step stops the move there",
    )


GroupName = text(r"[A-Za-z_][A-Za-z0-9_-]*", "an inventory group name: a letter or _, then letters, digits, _ or -")


class InventorySettings(_Section):
    """
    Inventory groups

    Which hosts of the inventory the deploys act on. A host named on the command line
    (`pyinfra gpu1.example.internal deploy/gpu_node.py`), in no group of the inventory's, is a GPU
    node; a host in other groups only is refused in one line; deploy/k8s_gpu.py and
    `configure_cluster()` stop in one line when no host of the run is in the control-plane group.
    Set them where every host reads them: `group_data/all.py`, `--data` or the deploy call.
    """

    gpu_nodes_group: GroupName = Field(
        GPU_NODES_GROUP, description="the inventory group of the GPU nodes: the hosts the node deploys act on, and "
                                     "whose labels deploy/k8s_gpu.py sets"
    )
    control_plane_group: GroupName = Field(
        CONTROL_PLANE_GROUP, description="the inventory group of the hosts kubectl runs on (deploy/k8s_gpu.py, "
                                         "drain_before_restart); a host only there is no GPU node"
    )


def unwrap(annotation: Any) -> tuple[Any, list[Any], bool]:
    """(the type inside ``X | None`` and ``Annotated[X, ...]``, the Annotated metadata, whether None is allowed)."""
    optional = False
    if get_origin(annotation) in (Union, types.UnionType):
        inner = [arg for arg in get_args(annotation) if arg is not type(None)]
        optional, annotation = len(inner) < len(get_args(annotation)), inner[0]
    metadata: list[Any] = []
    while get_origin(annotation) is Annotated:
        annotation, *extra = get_args(annotation)
        metadata += extra
    return annotation, metadata, optional


def choices(annotation: Any) -> tuple[str, ...]:
    """The names a ``Literal`` or a tuple of one allows (empty for other types)."""
    if get_origin(annotation) is tuple:
        annotation = get_args(annotation)[0]
    return get_args(annotation) if get_origin(annotation) is Literal else ()


def allowed_values(item: FieldInfo) -> str:
    """What a setting allows, in words: from its type, bounds and choices."""
    annotation, metadata, _ = unwrap(item.annotation)
    metadata = [*item.metadata, *metadata]
    described = [entry.text for entry in metadata if isinstance(entry, Allowed)]
    if described:
        return described[0]
    if annotation is bool:
        return "true or false (also 1/0, yes/no)"
    if annotation is int:
        bounds = [f">= {entry.ge}" for entry in metadata if hasattr(entry, "ge")]
        bounds += [f"<= {entry.le}" for entry in metadata if hasattr(entry, "le")]
        return " ".join(["an integer", *bounds])
    if get_origin(annotation) is tuple and choices(annotation):
        return "a comma-separated list of " + ", ".join(choices(annotation))
    if choices(annotation):
        return "one of " + ", ".join(choices(annotation))
    raise TypeError(f"no words for what {annotation} allows: give its type an Allowed(...)")


def from_command_line(item: FieldInfo, value: Any) -> Any:
    """
    A ``--data`` value as the setting's type reads it: text stripped, '' or 'none' unset where
    None is allowed, choices case-insensitive, a comma-separated list split (duplicates folded),
    and a bool given to a number left as the text it was (pydantic would read true as 1).
    """
    annotation, _, optional = unwrap(item.annotation)
    names = {name.lower(): name for name in choices(annotation)}
    if isinstance(value, str):
        value = value.strip()
        if optional and value.lower() in ("", "none"):
            return None
    if annotation is int and isinstance(value, bool):
        return str(value).lower()
    if get_origin(annotation) is tuple and names:
        items = value.split(",") if isinstance(value, str) else value
        if isinstance(items, (list, tuple)):
            stripped = (str(entry).strip() for entry in items)
            return tuple(dict.fromkeys(names.get(entry.lower(), entry) for entry in stripped if entry))
    if isinstance(value, str) and names:
        return names.get(value.lower(), value)
    return value


class Settings(RuntimeSettings, PackageSettings, DataCenterSettings, HostSafetySettings, VerifySettings, KubernetesSettings,
               GpushareSettings, GitOpsSettings, DraSettings, InventorySettings):
    """Every setting, typed; build it with ``parse_settings`` (which also checks how settings combine)."""

    @model_validator(mode="before")
    @classmethod
    def _read_command_line_values(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        fields = cls.model_fields
        return {key: from_command_line(fields[key], value) for key, value in data.items() if key in fields}

    def runs(self, stage: str) -> bool:
        return stage in self.stages

    def wires(self, runtime: str) -> bool:
        return runtime in self.container_runtimes

    @property
    def runtime_wiring(self) -> RuntimeWiring:
        """What the runtimes stage wires into containerd and Docker, and verify expects there; cdi=auto
        is decided per runtime from its version (deploy/runtimes/cdi.py)."""
        return RuntimeWiring(make_default=self.nvidia_runtime_default, systemd_cgroup=self.systemd_cgroup,
                             enable_cdi={"true": True, "false": False}.get(self.cdi),
                             container_annotations=(CDI_ANNOTATIONS,) if self.nvidia_runtime_mode == "cdi" else ())

    def kube_node_name(self, host_name: str) -> str:
        return dict(self.kube_node_names).get(host_name, host_name)

    def key_pin(self, repository: str) -> KeyPin:
        """What the key of ``repository`` ("nvidia_toolkit", "nvidia_cuda", "nvidia_driver") must be."""
        return KeyPin(fingerprints=getattr(self, f"{repository}_gpgkey_fingerprint"),
                      setting=f"{repository}_gpgkey_fingerprint", url=getattr(self, f"{repository}_gpgkey_url"))


SECTIONS: tuple[type[_Section], ...] = Settings.__bases__
# In the order the sections declare them (pydantic's own order starts with the last base).
SETTING_FIELDS: dict[str, FieldInfo] = {
    name: Settings.model_fields[name] for section in SECTIONS for name in section.model_fields
}
DEFAULTS: dict[str, Any] = {name: item.default for name, item in SETTING_FIELDS.items()}
ALLOWED: dict[str, str] = {name: allowed_values(item) for name, item in SETTING_FIELDS.items()}


# scheme://user:password@ in a value an error line shows: the line goes to logs and terminals
URL_USER_INFO = re.compile(r"(?<=://)[^/@\s]*@")


def _shown(value: Any) -> str:
    return URL_USER_INFO.sub("***@", repr(value) if isinstance(value, str) else str(value))


def _check_url_scheme(settings: Settings) -> None:
    if settings.allow_insecure_repositories:
        return
    for key in ("nvidia_toolkit_repo_url", "nvidia_toolkit_gpgkey_url", "nvidia_driver_repo_url", "nvidia_cuda_repo_url"):
        value = getattr(settings, key)
        if urlparse(value).scheme != "https":
            raise SettingsError(
                f"invalid setting {key}={_shown(value)}: allowed: an https:// URL "
                "(set allow_insecure_repositories=true for an http:// or file:// mirror)"
            )


KEY_URL_SETTINGS = ("nvidia_toolkit_gpgkey_url", "nvidia_cuda_gpgkey_url", "nvidia_driver_gpgkey_url")
KEY_URL_ALLOWED = ("an https:// URL, or with allow_insecure_repositories=true a file:// path on the node (a key is "
                   "never fetched over http://)")


def key_url_allowed(url: str, allow_file: bool = True) -> bool:
    """Whether a signing key may be fetched from ``url``: over https, or read from a file on the
    node, never over plain http (its fingerprint is checked wherever it comes from; this keeps a
    tampering network from even offering one)."""
    scheme = urlparse(url).scheme
    return scheme == "https" or (scheme == "file" and allow_file)


def _check_key_urls(settings: Settings) -> None:
    for key in KEY_URL_SETTINGS:
        value = getattr(settings, key)
        if value is not None and not key_url_allowed(value, allow_file=settings.allow_insecure_repositories):
            raise SettingsError(f"invalid setting {key}={_shown(value)}: allowed: {KEY_URL_ALLOWED}")


def _check_gpu_sharing(settings: Settings, data: Mapping[str, Any]) -> None:
    """Kubernetes cross-key rules: the option named is the one that does not fit."""
    sharing = settings.gpu_sharing
    if "gpu_sharing_replicas" in data and sharing not in ("time-slicing", "mps"):
        raise SettingsError(
            f"invalid setting gpu_sharing_replicas={_shown(data['gpu_sharing_replicas'])}: "
            f"allowed only with gpu_sharing=time-slicing or mps (gpu_sharing is {sharing!r})"
        )
    for key in ("time_slicing_rename_by_default", "time_slicing_fail_requests_greater_than_one"):
        if getattr(settings, key) and sharing != "time-slicing":
            raise SettingsError(
                f"invalid setting {key}={_shown(data.get(key, True))}: allowed only with "
                f"gpu_sharing=time-slicing (gpu_sharing is {sharing!r}; MPS and time-slicing are exclusive)"
            )
    if sharing == "gpushare" and not settings.nvidia_runtime_default:
        # The gpushare device plugin (v0.3.0) updates each pod it serves with a client too old to
        # know runtimeClassName: the API server rejects that update and the pod runs without a GPU.
        # Its pods therefore cannot use the RuntimeClass: nvidia must be the default runtime.
        raise SettingsError(
            "invalid setting nvidia_runtime_default=false: allowed only true with gpu_sharing=gpushare "
            "(the gpushare device plugin drops a pod's runtimeClassName, so its pods need nvidia as the "
            "default runtime)"
        )
    if sharing == "mps" and settings.mig_strategy != "none":
        raise SettingsError(
            f"invalid setting mig_strategy={_shown(settings.mig_strategy)}: allowed: none with "
            "gpu_sharing=mps (the NVIDIA device plugin does not share MIG devices through MPS)"
        )


def _check_runtime_mode(settings: Settings) -> None:
    if settings.nvidia_runtime_mode == "cdi" and settings.cdi == "false":
        raise SettingsError(
            "invalid setting nvidia_runtime_mode='cdi': allowed only with cdi=auto or true (cdi=false turns CDI "
            "off, and the runtime's cdi mode injects devices from the CDI spec the cdi stage keeps)")


def _check_dra(settings: Settings) -> None:
    """What a DRA node group cannot combine with: the option named is the one that does not fit."""
    if settings.gpu_allocator != "dra":
        return
    if settings.gpu_sharing == "gpushare":
        raise SettingsError("invalid setting gpu_sharing='gpushare': allowed only with gpu_allocator=device-plugin "
                            "(gpushare brings its own device plugin; a DRA node shares GPUs through its claims)")
    if settings.mig_strategy != "none":
        raise SettingsError(f"invalid setting mig_strategy={_shown(settings.mig_strategy)}: allowed: none with "
                            "gpu_allocator=dra (the device plugin's MIG strategy; the DRA driver has its own MIG devices)")
    if settings.cdi == "false":
        raise SettingsError("invalid setting cdi='false': allowed: auto or true with gpu_allocator=dra (the DRA driver "
                            "hands GPUs to containers through CDI in containerd)")
    if not settings.wires("containerd"):
        raise SettingsError(f"invalid setting container_runtimes={_shown(','.join(settings.container_runtimes))}: "
                            "allowed: a list with containerd with gpu_allocator=dra (the kubelet's runtime, whose "
                            "CDI the DRA driver needs)")
    if settings.dra_compute_domains and settings.dra_driver_install_method != "helm":
        raise SettingsError("invalid setting dra_driver_install_method='static': allowed: helm with "
                            "dra_compute_domains=true (the ComputeDomain controller and its custom resources come "
                            "with the driver's chart)")


def fold_old_settings(data: Mapping[str, Any]) -> Mapping[str, Any]:
    """``data`` with the settings of FOLDED_SETTINGS read as the one that took each over; values that
    disagree stop the run, naming both."""
    if not FOLDED_SETTINGS.keys() & data.keys():
        return data
    folded = {key: value for key, value in data.items() if key not in FOLDED_SETTINGS}
    given = {}
    for old, new in FOLDED_SETTINGS.items():
        if old not in data:
            continue
        value = str(data[old]).strip().lower()
        value = {"1": "true", "yes": "true", "on": "true", "0": "false", "no": "false", "off": "false"}.get(value, value)
        if value not in get_args(unwrap(SETTING_FIELDS[new].annotation)[0]):
            raise SettingsError(f"invalid setting {old}={_shown(data[old])}: allowed: true or false "
                                f"(it is now {new}: {ALLOWED[new]})")
        if new in data or new in given:
            earlier, was = (new, data[new]) if new in data else given[new]
            if str(was).lower() != str(value):
                raise SettingsError(f"invalid setting {old}={_shown(data[old])}: it is now {new}, and "
                                    f"{earlier}={_shown(was)} says otherwise: set {new} alone")
        given.setdefault(new, (old, value))
        folded.setdefault(new, value)
    return folded


def _typed(data: Mapping[str, Any]) -> Settings:
    """``data`` (old settings folded) checked value by value: SettingsError in one line for the first bad one."""
    data = fold_old_settings(data)
    try:
        return Settings.model_validate(data)
    except ValidationError as invalid:
        # pydantic lists every error over several lines: the first in the documented order, in one line.
        order = list(SETTING_FIELDS)
        error = min(invalid.errors(), key=lambda error: order.index(error["loc"][0]))
        key = str(error["loc"][0])
        allowed = str(error["ctx"]["error"]) if error["type"] == "value_error" else ALLOWED[key]
        raise SettingsError(f"invalid setting {key}={_shown(data[key])}: allowed: {allowed}") from None


def parse_settings(data: Mapping[str, Any]) -> Settings:
    """Build the typed view of ``data`` (defaults filled in); raise SettingsError on any bad value."""
    data = fold_old_settings(data)
    settings = _typed(data)
    _check_key_urls(settings)
    _check_url_scheme(settings)
    _check_gpu_sharing(settings, data)
    _check_runtime_mode(settings)
    _check_dra(settings)
    return settings


# Leading words of setting names too common to claim: a user key such as time_zone or
# service_name is likely someone else's, so only a close match (TYPO_CUTOFF) is pointed out.
GENERIC_LEADING_WORDS = frozenset({"allow", "download", "min", "require", "service", "time"})
TYPO_CUTOFF = 0.85
LOOSE_CUTOFF = 0.6


def setting_prefixes() -> frozenset[str]:
    """``nvidia_``, ``containerd_``, ``gpushare_`` ...: the leading words of our setting names."""
    return frozenset(
        name.split("_", 1)[0] + "_"
        for name in SETTING_FIELDS
        if "_" in name and name.split("_", 1)[0] not in GENERIC_LEADING_WORDS
    )


@lru_cache(maxsize=1)
def pyinfra_data_keys() -> frozenset[str]:
    """Data keys pyinfra's connectors read (ssh_user, docker_identifier ...): never ours to warn about."""
    from pyinfra.api.connectors import get_all_connectors

    return frozenset(key for connector in get_all_connectors().values() for key in connector.data_meta)


def closest_setting(key: str, loose: bool = False) -> str | None:
    """
    The setting ``key`` most likely meant: among those with its prefix when it has one of ours.
    ``loose`` (a key given on the command line, surely meant as a setting): also a setting that
    holds it as whole words (driver_branch: nvidia_driver_branch; reboot: reboot_allowed), or a
    more distant match.
    """
    prefix = next((p for p in sorted(setting_prefixes(), key=len, reverse=True) if key.startswith(p)), None)
    if prefix is not None:
        candidates = [name for name in SETTING_FIELDS if name.startswith(prefix)]
        return max(candidates, key=lambda name: difflib.SequenceMatcher(None, key, name).ratio())
    close = difflib.get_close_matches(key, SETTING_FIELDS, n=1, cutoff=TYPO_CUTOFF)
    if close or not loose:
        return close[0] if close else None
    words = [name for name in SETTING_FIELDS if f"_{key}_" in f"_{name}_"]
    if words:
        return min(words, key=len)
    close = difflib.get_close_matches(key, SETTING_FIELDS, n=1, cutoff=LOOSE_CUTOFF)
    return close[0] if close else None


def likely_typos(data: Mapping[str, Any], command_line: Collection[str] = (),
                 source: Callable[[str], str] | None = None) -> list[str]:
    """
    Keys in data that are not settings but look like one (a warning, not an error): any key
    with one of our prefixes (nvidia_driver_brnach), and any key close to a setting name; and every
    key of ``command_line`` (--data) that is not a setting, with the nearest one or none. pyinfra's
    own keys (ssh_*, docker_identifier, _sudo ...) are left alone. ``source``: where a key was set
    (``setting_source``), named in the note.
    """
    notes = []
    for key in data:
        key = str(key)
        where = f" ({source(key)})" if source else ""
        if key in FOLDED_SETTINGS:
            notes.append(f"setting {key!r}{where} is now {FOLDED_SETTINGS[key]!r}: read as {FOLDED_SETTINGS[key]}="
                         f"{_shown(fold_old_settings({key: data[key]})[FOLDED_SETTINGS[key]])}")
            continue
        if key in SETTING_FIELDS or key.startswith("_") or key in pyinfra_data_keys():
            continue
        close = closest_setting(key, loose=key in command_line)
        if close:
            notes.append(f"unknown setting {key!r}{where}: did you mean {close!r}?")
        elif key in command_line:
            notes.append(f"unknown setting {key!r}{where}: no setting is named like it (docs/settings.md lists them)")
    return notes


class ParsedSettings(dict):
    """This run's validated settings: (inventory host name, the call's settings) -> Settings (deploy/foundations/run_state.py)."""


class SettingsByValues(dict):
    """This run's validated settings by the setting values they came from (deploy/foundations/run_state.py)."""


class CallSettings(dict):
    """The settings the run's deploy function was called with (``call_settings``), for every host."""


def unknown_names(given: Mapping[str, Any], where: str) -> None:
    """SettingsError in one line for the first name in ``given`` that is not a setting."""
    for key in given:
        if key not in SETTING_FIELDS and key not in FOLDED_SETTINGS:
            close = closest_setting(key, loose=True)
            hint = f": did you mean {close!r}?" if close else ": no setting is named like it (docs/settings.md lists them)"
            raise SettingsError(f"unknown setting {key!r} given to {where}{hint}")


class OverriddenData(set):
    """The --data keys this run's deploy calls override, once warned about (deploy/foundations/run_state.py)."""


def overridden_data(state, given: Mapping[str, Any], where: str) -> None:
    """The ``--data`` values a deploy call's keyword arguments ``given`` override: each still checked
    (SettingsError in one line), and named in one warning per run, as they are not used."""
    command_line = state.inventory.get_override_data()
    overridden = {key: command_line[key] for key in given if key in command_line}
    if not overridden:
        return
    try:
        _typed(overridden)
    except SettingsError as error:
        raise SettingsError(f"{error} (from --data, which {where}'s keyword argument overrides)") from None
    warned = per_run(state, OverriddenData)
    if (where, *overridden) in warned:
        return
    warned.add((where, *overridden))
    data = ", ".join(f"{key}={_shown(value)}" for key, value in overridden.items())
    arguments = ", ".join(f"{key}={_shown(given[key])}" for key in overridden)
    logger.warning(f"--data {data} is not used: {where}({arguments}) overrides it (a deploy call's keyword arguments "
                   "win over --data, docs/settings.md)")


def call_settings(state, given: Mapping[str, Any], where: str) -> None:
    """Settings given as keyword arguments to a deploy function (``where``): they win over every host's
    data, ``--data`` included (``overridden_data``), for the rest of the run; a name that is not a
    setting stops the run before any change."""
    unknown_names(given, where)
    overridden_data(state, given, where)
    calls = per_run(state, CallSettings)
    calls.clear()
    calls.update(given)


def setting_source(host, key: str) -> str:
    """Where ``host``'s value of ``key`` comes from, weakest last (docs/settings.md's order)."""
    if key in per_run(host.state, CallSettings):
        return "the deploy call's keyword arguments"
    inventory = host.inventory
    if key in inventory.get_override_data():
        return "--data"
    if key in inventory.get_host_data(host.name):
        return "the inventory's host data"
    for group in reversed(host.groups):
        if key in inventory.get_group_data(group):
            return f"group_data/{group}.py"
    if key in inventory.get_data():
        return "group_data/all.py"
    return "the default"


def host_settings(host) -> Settings:
    """The validated settings of one pyinfra host; the one place tasks read host.data from, with the
    settings a deploy function was called with on top (``call_settings``). Parsed once per run, and
    once per distinct set of values: a fleet's hosts mostly share them, and the model is frozen
    (validating is a few ms per host)."""
    given = per_run(host.state, CallSettings)
    cache = per_run(host.state, ParsedSettings)
    cached = (host.name, repr(sorted(given.items())))
    if cached not in cache:
        # Only the settings' own keys (the connector's, ssh_port or ssh_hostname, differ per host), and
        # only those a site set: a deploy function's data_defaults are the defaults the model has, and
        # some checks tell a value given from one left alone (gpu_sharing_replicas).
        defaults = getattr(host, "current_deploy_data", None) or {}
        values = {key: value for key, value in host.data.dict().items()
                  if (key in SETTING_FIELDS or key in FOLDED_SETTINGS)
                  and (key not in defaults or setting_source(host, key) != "the default")}
        values.update(given)
        by_values = per_run(host.state, SettingsByValues)
        key = repr(sorted(values.items()))
        if key not in by_values:
            try:
                by_values[key] = parse_settings(values)
            except SettingsError as error:
                named = re.match(r"invalid setting (\w+)=", str(error))
                where = f", from {setting_source(host, named.group(1))}" if named else ""
                raise SettingsError(f"{error} (host {host.name}{where})") from None
        cache[cached] = by_values[key]
    return cache[cached]
