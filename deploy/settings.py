"""
The settings users set, their defaults, and one typed, validated view of ``host.data``.

Layers, lowest first: the defaults below, ``group_data/all.py`` of this checkout, then the
host's own data (inventory, group data pyinfra loaded, ``--data key=value``). Values from
``--data`` arrive as strings or pyinfra's parse of them; every parser here accepts both.
An invalid value raises ``SettingsError`` while pyinfra prepares the run, so no host is
changed; its message is one line naming the key, the value and what is allowed.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field, fields, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Mapping
from urllib.parse import urlparse

from pyinfra.api.exceptions import PyinfraError

REPO_ROOT = Path(__file__).resolve().parents[1]
GROUP_DATA_ALL = REPO_ROOT / "group_data" / "all.py"

# The NVIDIA device plugin refuses older drivers.
MIN_DRIVER_VERSION = "384.81"
NVIDIA_CONTAINER_RUNTIME = "/usr/bin/nvidia-container-runtime"
# The base of NVIDIA's tree; the family adds "deb/$(ARCH)" or "rpm/$basearch" (a mirror keeps that layout).
NVIDIA_TOOLKIT_REPO_URL = "https://nvidia.github.io/libnvidia-container/stable"
NVIDIA_TOOLKIT_GPGKEY_URL = "https://nvidia.github.io/libnvidia-container/gpgkey"


@dataclass(frozen=True)
class RuntimeWiring:
    """What wiring a runtime (containerd or Docker) to the NVIDIA runtime sets."""

    binary: str = NVIDIA_CONTAINER_RUNTIME
    make_default: bool = True
    systemd_cgroup: bool = True
    enable_cdi: bool = False


class SettingsError(PyinfraError):
    """An invalid setting: raised before any host is changed."""


def _shown(value: Any) -> str:
    return repr(value) if isinstance(value, str) else str(value)


class _Invalid(ValueError):
    """Raised by a parser with what is allowed; the caller adds key and value."""


# Parsers: (raw value) -> typed value, raising _Invalid("what is allowed").

def boolean(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in ("true", "1", "yes", "on"):
        return True
    if isinstance(value, str) and value.strip().lower() in ("false", "0", "no", "off"):
        return False
    raise _Invalid("true or false (also 1/0, yes/no)")


def integer(minimum: int | None = None, maximum: int | None = None) -> Callable[[Any], int]:
    bounds = " ".join(
        part
        for part in (
            f">= {minimum}" if minimum is not None else "",
            f"<= {maximum}" if maximum is not None else "",
        )
        if part
    )
    allowed = f"an integer {bounds}".strip()

    def parse(value: Any) -> int:
        if isinstance(value, bool):
            raise _Invalid(allowed)
        try:
            number = int(str(value).strip())
        except ValueError:
            raise _Invalid(allowed) from None
        if (minimum is not None and number < minimum) or (maximum is not None and number > maximum):
            raise _Invalid(allowed)
        return number

    return parse


def choice(*allowed: str) -> Callable[[Any], str]:
    by_lower = {name.lower(): name for name in allowed}

    def parse(value: Any) -> str:
        text = str(value).strip().lower() if not isinstance(value, bool) else ""
        if text not in by_lower:
            raise _Invalid("one of " + ", ".join(allowed))
        return by_lower[text]

    return parse


def choice_list(*allowed: str) -> Callable[[Any], tuple[str, ...]]:
    what = "a comma-separated list of " + ", ".join(allowed)

    def parse(value: Any) -> tuple[str, ...]:
        items = value if isinstance(value, (list, tuple)) else str(value).split(",")
        names = [str(item).strip().lower() for item in items if str(item).strip()]
        if not names or any(name not in allowed for name in names):
            raise _Invalid(what)
        return tuple(dict.fromkeys(names))

    return parse


# C0 controls, DEL and the C1 range: a newline in a value would start a new line in a config
# file or a shell script, NUL truncates arguments.
CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f-\x9f]")
# Characters a URL setting may not hold (besides control characters): whitespace and
# everything a shell or an apt/yum source line gives a meaning to. Percent-encode them.
URL_FORBIDDEN = re.compile(r"[\s'\"\\`$;|&<>]")
URL_ALLOWED = "no whitespace, quotes, backslashes, backticks or $ ; | & < > (percent-encode them)"


def has_control_characters(text: str) -> bool:
    return bool(CONTROL_CHARACTERS.search(text))


def string_list(value: Any) -> tuple[str, ...]:
    if value is None or value == "":
        return ()
    items = value if isinstance(value, (list, tuple)) else str(value).split(",")
    names = tuple(str(item).strip() for item in items if str(item).strip())
    if any(has_control_characters(name) for name in names):
        raise _Invalid("a comma-separated list without control characters")
    return names


def node_name(value: Any) -> str:
    """A Kubernetes node name: a DNS subdomain (RFC 1123), at most 253 characters."""
    text = str(value).strip()
    if len(text) > 253 or not re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*", text):
        raise _Invalid("host=node pairs whose node is a Kubernetes node name (lower case letters, digits, '-', '.')")
    return text


def mapping(value: Any) -> tuple[tuple[str, str], ...]:
    """
    Inventory host name -> Kubernetes node name, from a dict or ``a=b,c=d`` on the command
    line; kept as sorted pairs (hashable). Node names reach kubectl: they must be node names.
    """
    if value is None or value == "":
        return ()
    if isinstance(value, Mapping):
        items = [(str(key).strip(), val) for key, val in value.items()]
    else:
        items = []
        for item in str(value).split(","):
            if "=" not in item:
                raise _Invalid("a mapping such as host1=node-a,host2=node-b")
            key, _, val = item.partition("=")
            items.append((key.strip(), val))
    if any(not key or has_control_characters(key) for key, _ in items):
        raise _Invalid("a mapping such as host1=node-a,host2=node-b (host names without control characters)")
    return tuple(sorted({key: node_name(val) for key, val in items}.items()))


def absolute_path(value: Any) -> str:
    text = str(value).strip()
    if isinstance(value, bool) or not text.startswith("/") or has_control_characters(text):
        raise _Invalid("an absolute path without control characters")
    return text


def controller_path(value: Any) -> str:
    """A file on the controller (relative to the working directory, or absolute)."""
    text = str(value).strip()
    if isinstance(value, bool) or not text or has_control_characters(text):
        raise _Invalid("a file path on the controller, without control characters")
    return text


def optional(parse: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def parse_optional(value: Any) -> Any:
        if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none")):
            return None
        return parse(value)

    return parse_optional


def driver_branch(value: Any) -> str:
    text = str(value).strip()
    if isinstance(value, bool) or not re.fullmatch(r"[0-9]{3}", text):
        raise _Invalid("a driver branch number such as 535 or 550")
    return text


def package_version(value: Any) -> str:
    text = str(value).strip()
    if isinstance(value, bool) or not re.fullmatch(r"[0-9][0-9A-Za-z.+~:_-]*", text):
        raise _Invalid("a package version such as 535.183.01 or 1.17.8-1")
    return text


def _url_text(value: Any, allowed: str) -> str:
    text = str(value).strip()
    if isinstance(value, bool) or URL_FORBIDDEN.search(text) or has_control_characters(text):
        raise _Invalid(f"{allowed}, with {URL_ALLOWED}")
    return text


def url(value: Any) -> str:
    allowed = "an https:// URL (http:// needs allow_insecure_repositories=true)"
    text = _url_text(value, allowed)
    parsed = urlparse(text)
    if parsed.scheme not in ("https", "http", "file") or not (parsed.netloc or parsed.path):
        raise _Invalid(allowed)
    return text


def image_reference(value: Any) -> str:
    text = str(value).strip()
    if not re.fullmatch(r"[a-z0-9][a-z0-9._/:@-]*", text):
        raise _Invalid("a container image reference such as registry/name:tag")
    return text


def k8s_name(value: Any) -> str:
    text = str(value).strip()
    if not re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", text) or len(text) > 63:
        raise _Invalid("a Kubernetes name (lower case letters, digits and '-')")
    return text


def release_tag(value: Any) -> str:
    text = str(value).strip()
    if isinstance(value, bool) or not re.fullmatch(r"v?[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.]+)?", text):
        raise _Invalid("a release such as v0.17.0")
    return text if text.startswith("v") else f"v{text}"


def sha256_digest(value: Any) -> str:
    text = str(value).strip().lower()
    if text.startswith("sha256:"):
        text = text[len("sha256:"):]
    if isinstance(value, bool) or not re.fullmatch(r"[0-9a-f]{64}", text):
        raise _Invalid("a SHA-256 digest (64 hex digits)")
    return text


def https_url_or_path(value: Any) -> str:
    allowed = "an https:// URL or an absolute path to a file on the controller"
    text = str(value).strip()
    if text.startswith("/"):
        if has_control_characters(text):
            raise _Invalid(f"{allowed} (a path without control characters)")
        return text
    text = _url_text(value, allowed)
    parsed = urlparse(text)
    if parsed.scheme != "https" or not parsed.netloc:
        raise _Invalid(allowed)
    return text


def setting(default: Any, parse: Callable[[Any], Any], help: str) -> Any:
    return field(default=default, metadata={"parse": parse, "help": help})


STAGES = ("kernel", "driver", "toolkit", "runtimes", "verify")


@dataclass(frozen=True)
class Settings:
    stages: tuple[str, ...] = setting(
        STAGES, choice_list(*STAGES), "which stages of deploy/gpu_node.py run (preflight always does)"
    )
    # Runtimes
    container_runtimes: tuple[str, ...] = setting(
        ("containerd",), choice_list("containerd", "docker"), "which runtimes to wire to nvidia"
    )
    nvidia_runtime_default: bool = setting(
        True, boolean, "make nvidia the default runtime; false: only the handler, for a RuntimeClass"
    )
    systemd_cgroup: bool = setting(
        True, boolean, "SystemdCgroup for runc and nvidia (must match the kubelet's cgroupDriver)"
    )
    containerd_config_path: str = setting(
        "/etc/containerd/config.toml", absolute_path, "containerd's config file"
    )
    containerd_install: bool = setting(
        True, boolean, "install the distro's containerd when the node has none"
    )
    containerd_version: str | None = setting(
        None, optional(package_version), "exact containerd package version to install"
    )
    containerd_enable_cdi: bool = setting(False, boolean, "enable_cdi for containerd 1.7")
    docker_daemon_config_path: str = setting(
        "/etc/docker/daemon.json", absolute_path, "Docker's daemon.json"
    )
    docker_install: bool = setting(
        False, boolean, "install the distro's Docker package when docker is wired but missing"
    )
    docker_enable_cdi: bool = setting(False, boolean, "features.cdi in daemon.json")
    service_restart_timeout: int = setting(
        30, integer(5, 600), "seconds a restarted runtime has to become active before rollback"
    )
    drain_before_restart: bool = setting(
        False, boolean, "cordon and drain the node (kubectl on the control plane) before a runtime "
        "restart or reboot; uncordon after verify passes"
    )
    drain_timeout: int = setting(
        300, integer(10, 3600), "seconds 'kubectl drain' has to evict the node's pods"
    )
    # Driver
    nvidia_driver_install: bool = setting(True, boolean, "install the NVIDIA driver")
    nvidia_driver_branch: str | None = setting(
        None, optional(driver_branch), "driver branch, e.g. 535 or 550 (default: distro's)"
    )
    nvidia_driver_version: str | None = setting(
        None, optional(package_version), "exact driver package version"
    )
    cuda_toolkit_install: bool = setting(False, boolean, "install the CUDA toolkit")
    # Toolkit
    nvidia_toolkit_install: bool = setting(True, boolean, "install the NVIDIA container toolkit")
    nvidia_toolkit_version: str | None = setting(
        None, optional(package_version), "exact version of all four toolkit packages"
    )
    nvidia_toolkit_repo_url: str = setting(
        NVIDIA_TOOLKIT_REPO_URL, url, "toolkit package repository (a mirror for air-gapped sites)"
    )
    nvidia_toolkit_gpgkey_url: str = setting(
        NVIDIA_TOOLKIT_GPGKEY_URL, url, "the key that signs that repository"
    )
    allow_insecure_repositories: bool = setting(
        False, boolean, "accept http:// repository and key URLs (local mirrors)"
    )
    download_timeout: int = setting(
        30, integer(1, 600), "seconds a repository or key server has to answer before the run fails"
    )
    apt_lock_timeout: int = setting(
        120, integer(0, 3600), "seconds to wait for another apt or dpkg to release its lock"
    )
    # Kernel and host
    kernel_modules_load: bool = setting(
        True, boolean, "load modules and apply sysctls now (tests in containers set false)"
    )
    reboot_allowed: bool = setting(False, boolean, "reboot when the new driver needs it")
    require_gpu: bool = setting(
        False, boolean, "fail (instead of reporting 'no GPU') when no NVIDIA GPU is found"
    )
    min_free_disk_mb: int = setting(
        2048, integer(0), "free space preflight wants on / and /var before installing"
    )
    # Verification
    verify_report_path: str = setting(
        "gpu-node-report.json", controller_path, "where the controller writes the JSON node report"
    )
    fleet_report_path: str = setting(
        "gpu-node-fleet.json", controller_path,
        "where the controller writes the JSON fleet report (one row per node; the first host's value)",
    )
    verify_image: str = setting(
        "docker.io/nvidia/cuda:12.4.1-base-ubuntu22.04",
        image_reference,
        "image the verification runs nvidia-smi in",
    )
    # Kubernetes (control plane)
    kubeconfig: str = setting(
        "/etc/kubernetes/admin.conf", absolute_path, "kubeconfig kubectl uses on the control plane"
    )
    kube_node_names: tuple[tuple[str, str], ...] = setting(
        (), mapping, "inventory host name -> Kubernetes node name, where they differ"
    )
    device_plugin_version: str = setting(
        "v0.17.0", release_tag, "NVIDIA device plugin release (image tag and chart version)"
    )
    device_plugin_install_method: str = setting(
        "static", choice("static", "helm"), "static manifests, or the helm chart"
    )
    gpu_sharing: str = setting(
        "none", choice("none", "time-slicing", "mps", "gpushare"), "how pods share a GPU"
    )
    gpu_sharing_replicas: int = setting(
        4, integer(2, 1024), "time-slicing / MPS replicas per GPU"
    )
    time_slicing_rename_by_default: bool = setting(
        False, boolean, "advertise nvidia.com/gpu.shared instead of nvidia.com/gpu"
    )
    time_slicing_fail_requests_greater_than_one: bool = setting(
        False, boolean, "reject pods asking for more than one shared GPU"
    )
    mig_strategy: str = setting("none", choice("none", "single", "mixed"), "MIG strategy")
    nvidia_driver_root: str = setting(
        "/", absolute_path,
        "where the NVIDIA driver lives on GPU nodes, for the device plugin (e.g. /run/nvidia/driver "
        "with a driver container)",
    )
    smoke_test: bool = setting(True, boolean, "run the vector-add pod after deploying")
    smoke_test_image: str = setting(
        "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0",
        image_reference,
        "the smoke test pod's image",
    )
    smoke_test_timeout: int = setting(300, integer(10, 3600), "seconds to wait for the smoke pod")
    gpushare_memory_unit: str = setting("GiB", choice("GiB", "MiB"), "gpushare memory unit")
    gpushare_extender_image: str = setting(
        "registry.cn-hangzhou.aliyuncs.com/acs/k8s-gpushare-schd-extender:1.11-d170d8a",
        image_reference,
        "gpushare scheduler extender image",
    )
    gpushare_device_plugin_image: str = setting(
        "registry.cn-hangzhou.aliyuncs.com/acs/k8s-gpushare-plugin:v2-1.11-aff8a23",
        image_reference,
        "gpushare device plugin image",
    )
    gpushare_scheduler_config_path: str = setting(
        "/etc/kubernetes/gpushare/scheduler-config.yaml",
        absolute_path,
        "the KubeSchedulerConfiguration file kube-scheduler loads (--config)",
    )
    gpushare_scheduler_ready_timeout: int = setting(
        180, integer(10, 1800), "seconds the edited kube-scheduler has to come back before rollback"
    )
    gpushare_inspect_install: bool = setting(
        True, boolean, "install the kubectl-inspect-gpushare plugin on the control plane"
    )
    gpushare_inspect_source: str = setting(
        "https://github.com/AliyunContainerService/gpushare-device-plugin/releases/download/v0.3.0/"
        "kubectl-inspect-gpushare",
        https_url_or_path,
        "where kubectl-inspect-gpushare comes from: a URL, or a file on the controller",
    )
    gpushare_inspect_sha256: str | None = setting(
        None, optional(sha256_digest), "the SHA-256 kubectl-inspect-gpushare must have (required)"
    )
    gpushare_inspect_path: str = setting(
        "/usr/local/bin/kubectl-inspect-gpushare", absolute_path, "where the plugin is installed"
    )

    def runs(self, stage: str) -> bool:
        return stage in self.stages

    def wires(self, runtime: str) -> bool:
        return runtime in self.container_runtimes

    def runtime_wiring(self, enable_cdi: bool) -> RuntimeWiring:
        return RuntimeWiring(
            make_default=self.nvidia_runtime_default, systemd_cgroup=self.systemd_cgroup, enable_cdi=enable_cdi
        )

    def kube_node_name(self, host_name: str) -> str:
        return dict(self.kube_node_names).get(host_name, host_name)


SETTING_FIELDS = {item.name: item for item in fields(Settings)}
DEFAULTS: dict[str, Any] = {name: item.default for name, item in SETTING_FIELDS.items()}


def _check_url_scheme(settings: Settings) -> None:
    if settings.allow_insecure_repositories:
        return
    for key in ("nvidia_toolkit_repo_url", "nvidia_toolkit_gpgkey_url"):
        value = getattr(settings, key)
        if urlparse(value).scheme != "https":
            raise SettingsError(
                f"invalid setting {key}={_shown(value)}: allowed: an https:// URL "
                "(set allow_insecure_repositories=true for an http:// or file:// mirror)"
            )


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


def parse_settings(data: Mapping[str, Any]) -> Settings:
    """Build the typed view of ``data`` (defaults filled in); raise SettingsError on any bad value."""
    values = {}
    for name, item in SETTING_FIELDS.items():
        if name not in data:
            continue
        raw = data[name]
        try:
            values[name] = item.metadata["parse"](raw)
        except _Invalid as allowed:
            raise SettingsError(f"invalid setting {name}={_shown(raw)}: allowed: {allowed}") from None
    settings = replace(Settings(), **values)
    _check_url_scheme(settings)
    _check_gpu_sharing(settings, data)
    return settings


# Leading words of setting names too common to claim: a user key such as time_zone or
# service_name is likely someone else's, so only a close match (TYPO_CUTOFF) is pointed out.
GENERIC_LEADING_WORDS = frozenset({"allow", "download", "min", "require", "service", "time"})
TYPO_CUTOFF = 0.85


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


def closest_setting(key: str) -> str | None:
    """The setting ``key`` most likely meant: among those with its prefix when it has one of ours."""
    prefix = next((p for p in sorted(setting_prefixes(), key=len, reverse=True) if key.startswith(p)), None)
    if prefix is not None:
        candidates = [name for name in SETTING_FIELDS if name.startswith(prefix)]
        return max(candidates, key=lambda name: difflib.SequenceMatcher(None, key, name).ratio())
    close = difflib.get_close_matches(key, SETTING_FIELDS, n=1, cutoff=TYPO_CUTOFF)
    return close[0] if close else None


def likely_typos(data: Mapping[str, Any]) -> list[str]:
    """
    Keys in data that are not settings but look like one (a warning, not an error): any key
    with one of our prefixes (nvidia_driver_brnach), and any key close to a setting name.
    pyinfra's own keys (ssh_*, docker_identifier, _sudo ...) are left alone.
    """
    notes = []
    for key in data:
        key = str(key)
        if key in SETTING_FIELDS or key.startswith("_") or key in pyinfra_data_keys():
            continue
        close = closest_setting(key)
        if close:
            notes.append(f"unknown setting {key!r}: did you mean {close!r}?")
    return notes


@lru_cache(maxsize=1)
def repo_group_data() -> dict[str, Any]:
    """This checkout's group_data/all.py, so it applies whatever the working directory."""
    if not GROUP_DATA_ALL.exists():
        return {}
    namespace: dict[str, Any] = {"__file__": str(GROUP_DATA_ALL)}
    exec(compile(GROUP_DATA_ALL.read_text(), str(GROUP_DATA_ALL), "exec"), namespace)
    return {
        key: value
        for key, value in namespace.items()
        if not key.startswith("_") and not callable(value) and not hasattr(value, "__file__")
    }


def host_settings(host) -> Settings:
    """The validated settings of one pyinfra host; the one place tasks read host.data from.
    Parsed once per run (deploy/run_state.py); a host outside a run is parsed each time."""
    from deploy.run_state import run_state

    state = getattr(host, "state", None)  # None: a host stand-in outside a pyinfra run
    cache = run_state(state).settings if state is not None else {}
    name = getattr(host, "name", None)
    if name not in cache:
        data = dict(repo_group_data())
        data.update(host.data.dict())
        cache[name] = parse_settings(data)
    return cache[name]
