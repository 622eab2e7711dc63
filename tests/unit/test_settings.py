"""
The settings contract: every data key with its documented default (written out here, not read
from the code), how values from ``--data`` are read, and the one-line message for each kind of
bad value. group_data is pyinfra's: the last tests run pyinfra's CLI to show where it comes from.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from deploy.settings import DEFAULTS, SETTING_FIELDS, Settings, SettingsError, likely_typos, parse_settings
from deploy.settings import hints as settings_hints

REPO = Path(__file__).resolve().parents[2]

# The documented defaults (docs/settings.md, the README's settings section): a contract with
# every site's group_data, so a change here is a change users must hear about.
DOCUMENTED_DEFAULTS = {
    "stages": ("kernel", "driver", "toolkit", "runtimes", "verify"),
    "container_runtimes": ("containerd",),
    "nvidia_runtime_default": True,
    "systemd_cgroup": True,
    "containerd_config_path": "/etc/containerd/config.toml",
    "containerd_install": True,
    "containerd_version": None,
    "docker_daemon_config_path": "/etc/docker/daemon.json",
    "docker_install": False,
    "cdi": "auto",
    "nvidia_runtime_mode": None,
    "service_restart_timeout": 30,
    "drain_before_restart": False,
    "drain_timeout": 300,
    "runtime_config_backups": 5,
    "undo_remove_packages": False,
    "nvidia_driver_install": True,
    "nvidia_driver_branch": None,
    "nvidia_driver_version": None,
    "cuda_toolkit_install": False,
    "nvidia_toolkit_install": True,
    "nvidia_toolkit_version": None,
    "nvidia_toolkit_repo_url": "https://nvidia.github.io/libnvidia-container/stable",
    "nvidia_toolkit_gpgkey_url": "https://nvidia.github.io/libnvidia-container/gpgkey",
    # NVIDIA's toolkit key (its key id f796ecb0), as gpg prints the key NVIDIA serves at that URL
    "nvidia_toolkit_gpgkey_fingerprint": ("C95B321B61E88C1809C4F759DDCAE044F796ECB0",),
    "allow_insecure_repositories": False,
    "download_timeout": 30,
    "apt_lock_timeout": 120,
    "nvidia_kernel_modules": "auto",
    "nvidia_persistenced": True,
    "fabric_manager_install": True,
    "module_signing": "auto",
    "module_signing_key": None,
    "module_signing_cert": None,
    "module_signing_mok_password": None,
    "allow_unsigned_modules": False,
    "first_boot_unit": True,
    "health_check": True,
    "health_check_interval": "1min",
    "health_silent_after": "10min",
    "nvidia_driver_repo_url": "https://download.nvidia.com",
    "nvidia_cuda_repo_url": "https://developer.download.nvidia.com/compute/cuda/repos",
    "nvidia_cuda_gpgkey_url": None,
    # NVIDIA's CUDA repository keys 3bf863cc (deb) and D42D0685 (rpm), as NVIDIA's
    # cuda-repo-management SIGNATURES.md prints their primary-key fingerprints
    "nvidia_cuda_gpgkey_fingerprint": (
        "EB693B3035CD5710E231E123A4B469963BF863CC",
        "610C7B14E068A878070DA4E99CD0A493D42D0685",
    ),
    "nvidia_driver_gpgkey_url": None,
    "nvidia_driver_gpgkey_fingerprint": (),  # NVIDIA publishes none for its SUSE driver repository
    "kernel_modules_load": True,
    "reboot_allowed": False,
    "require_gpu": False,
    "min_free_disk_mb": 2048,
    "verify_report_path": "gpu-node-report.json",
    "fleet_report_path": "gpu-node-fleet.json",
    "verify_image": "docker.io/nvidia/cuda:12.4.1-base-ubuntu22.04",
    "kubeconfig": None,
    "kube_node_names": (),
    "device_plugin_version": "v0.17.0",
    "device_plugin_install_method": "static",
    "gpu_sharing": "none",
    "gpu_sharing_replicas": 4,
    "time_slicing_rename_by_default": False,
    "time_slicing_fail_requests_greater_than_one": False,
    "mig_strategy": "none",
    "nvidia_driver_root": "/",
    "smoke_test": True,
    "smoke_test_image": "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0",
    "smoke_test_timeout": 300,
    "gpushare_memory_unit": "GiB",
    "gpushare_extender_image": "registry.cn-hangzhou.aliyuncs.com/acs/k8s-gpushare-schd-extender:1.11-d170d8a",
    "gpushare_device_plugin_image": "registry.cn-hangzhou.aliyuncs.com/acs/k8s-gpushare-plugin:v2-1.11-aff8a23",
    "gpushare_scheduler_config_path": "/etc/kubernetes/gpushare/scheduler-config.yaml",
    "gpushare_scheduler_ready_timeout": 180,
    "gpushare_inspect_install": True,
    "gpushare_inspect_source": (
        "https://github.com/AliyunContainerService/gpushare-device-plugin/releases/download/v0.3.0/"
        "kubectl-inspect-gpushare"
    ),
    "gpushare_inspect_sha256": None,
    "gpushare_inspect_path": "/usr/local/bin/kubectl-inspect-gpushare",
    "manifests_dir": "gpu-node-manifests",
    "manifests_inventory": None,
    "manifests_kubernetes_version": None,
    "gpu_allocator": "device-plugin",
    "dra_driver_version": "v0.5.0",
    "dra_driver_install_method": "static",
    "dra_compute_domains": False,
    "dra_imex": "driver-managed",
    "allocator_move_batches": "1",
    "gpu_nodes_group": "gpu_nodes",
    "control_plane_group": "control_plane",
    "imex_domain": None,
    "imex_address": None,
    "imex_channels": "module-option",
    "gpudirect_rdma": "false",
    "mig_layout": None,
    "mig_manager_package": "nvidia-mig-manager",
    "gpu_health_monitor": "off",
    "npd_image": "registry.k8s.io/node-problem-detector/node-problem-detector:v0.8.21",
    "gpu_health_monitor_interval": "1min",
    "fleet_quarantine": False,
    "quarantine_max_nodes": 1,
    "quarantine_max_percent": 50,
    "quarantine_release_after": "1h",
    "quarantine_reset": "off",
}


def test_the_data_keys_are_exactly_the_documented_ones():
    assert sorted(SETTING_FIELDS) == sorted(DOCUMENTED_DEFAULTS)


@pytest.mark.parametrize("key", sorted(DOCUMENTED_DEFAULTS))
def test_an_empty_host_gets_the_documented_default(key):
    assert getattr(parse_settings({}), key) == DOCUMENTED_DEFAULTS[key]
    assert DEFAULTS[key] == DOCUMENTED_DEFAULTS[key]


# --- how values from the command line are read ------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("true", True),
        ("false", False),
        ("1", True),
        ("0", False),
        ("yes", True),
        ("No", False),
        ("on", True),
        (" off ", False),
        (True, True),
        (False, False),
        (1, True),
        (0, False),
    ],
)
def test_booleans_from_the_command_line_are_coerced(raw, expected):
    assert parse_settings({"systemd_cgroup": raw}).systemd_cgroup is expected


def test_comma_lists_and_lists_both_work_case_folded_and_duplicates_folded():
    assert parse_settings({"container_runtimes": "containerd,docker"}).container_runtimes == ("containerd", "docker")
    assert parse_settings({"container_runtimes": ["docker", "docker"]}).container_runtimes == ("docker",)
    assert parse_settings({"container_runtimes": " Docker , containerd "}).container_runtimes == (
        "docker",
        "containerd",
    )
    assert parse_settings({"stages": "kernel,,verify,"}).stages == ("kernel", "verify")


def test_numbers_arrive_as_ints_or_strings():
    # pyinfra's --data turns "535" into the int 535 and "45" into 45
    assert parse_settings({"nvidia_driver_branch": 535}).nvidia_driver_branch == "535"
    assert parse_settings({"nvidia_driver_branch": " 550 "}).nvidia_driver_branch == "550"
    assert parse_settings({"service_restart_timeout": "45"}).service_restart_timeout == 45
    assert parse_settings({"service_restart_timeout": 600}).service_restart_timeout == 600
    assert parse_settings({"apt_lock_timeout": "0"}).apt_lock_timeout == 0


def test_choices_are_case_insensitive_and_come_out_as_declared():
    assert parse_settings({"gpushare_memory_unit": "mib"}).gpushare_memory_unit == "MiB"
    assert parse_settings({"gpu_sharing": "Time-Slicing"}).gpu_sharing == "time-slicing"
    assert parse_settings({"device_plugin_install_method": " HELM "}).device_plugin_install_method == "helm"


def test_unset_optional_values_stay_none():
    parsed = parse_settings(
        {
            "nvidia_driver_version": "",
            "nvidia_toolkit_version": "none",
            "gpushare_inspect_sha256": None,
            "containerd_version": "None",
        }
    )
    assert parsed.nvidia_driver_version is None and parsed.nvidia_toolkit_version is None
    assert parsed.gpushare_inspect_sha256 is None and parsed.containerd_version is None


def test_normalised_forms():
    assert parse_settings({"device_plugin_version": "0.17.1"}).device_plugin_version == "v0.17.1"
    assert parse_settings({"gpushare_inspect_sha256": "SHA256:" + "AB" * 32}).gpushare_inspect_sha256 == "ab" * 32
    assert parse_settings({"kube_node_names": "b=node-b, a=node-a"}).kube_node_names == (
        ("a", "node-a"),
        ("b", "node-b"),
    )
    assert parse_settings({"kube_node_names": {"a": "node-a"}}).kube_node_names == (("a", "node-a"),)
    assert parse_settings({"containerd_config_path": " /srv/ctr.toml "}).containerd_config_path == "/srv/ctr.toml"
    pinned = "mirror.example:5000/npd:v0.8.21@sha256:" + "0a" * 32
    assert parse_settings({"npd_image": pinned}).npd_image == pinned


# --- one line for each kind of bad value ------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            {"systemd_cgroup": "maybe"},
            "invalid setting systemd_cgroup='maybe': allowed: true or false (also 1/0, yes/no)",
        ),
        ({"systemd_cgroup": 2}, "invalid setting systemd_cgroup=2: allowed: true or false (also 1/0, yes/no)"),
        (
            {"service_restart_timeout": "2"},
            "invalid setting service_restart_timeout='2': allowed: an integer >= 5 <= 600",
        ),
        (
            {"service_restart_timeout": 601},
            "invalid setting service_restart_timeout=601: allowed: an integer >= 5 <= 600",
        ),
        (
            {"service_restart_timeout": "soon"},
            "invalid setting service_restart_timeout='soon': allowed: an integer >= 5 <= 600",
        ),
        ({"runtime_config_backups": 0}, "invalid setting runtime_config_backups=0: allowed: an integer >= 1 <= 100"),
        # pyinfra reads --data x=true as True: a number must not take it for 1
        ({"download_timeout": True}, "invalid setting download_timeout=True: allowed: an integer >= 1 <= 600"),
        ({"min_free_disk_mb": -1}, "invalid setting min_free_disk_mb=-1: allowed: an integer >= 0"),
        ({"download_timeout": 1.5}, "invalid setting download_timeout=1.5: allowed: an integer >= 1 <= 600"),
        (
            {"container_runtimes": "podman"},
            "invalid setting container_runtimes='podman': allowed: a comma-separated list of containerd, docker",
        ),
        (
            {"container_runtimes": ""},
            "invalid setting container_runtimes='': allowed: a comma-separated list of containerd, docker",
        ),
        (
            {"stages": "kernel,everything"},
            "invalid setting stages='kernel,everything': allowed: a comma-separated list of "
            "kernel, driver, toolkit, runtimes, verify",
        ),
        (
            {"gpu_sharing": "all"},
            "invalid setting gpu_sharing='all': allowed: one of none, time-slicing, mps, gpushare",
        ),
        (
            {"nvidia_driver_branch": "abc"},
            "invalid setting nvidia_driver_branch='abc': allowed: a driver branch number such as 535 or 550",
        ),
        (
            {"nvidia_driver_branch": 5350},
            "invalid setting nvidia_driver_branch=5350: allowed: a driver branch number such as 535 or 550",
        ),
        (
            {"nvidia_toolkit_version": "latest!"},
            "invalid setting nvidia_toolkit_version='latest!': allowed: a package version such as 535.183.01 or 1.17.8-1",
        ),
        (
            {"containerd_config_path": "etc/containerd/config.toml"},
            "invalid setting containerd_config_path='etc/containerd/config.toml': allowed: an absolute path without "
            "control characters",
        ),
        (
            {"containerd_config_path": True},
            "invalid setting containerd_config_path=True: allowed: an absolute path without control characters",
        ),
        (
            {"verify_report_path": ""},
            "invalid setting verify_report_path='': allowed: a file path on the controller, without control characters",
        ),
        (
            {"verify_image": "Ubuntu Latest"},
            "invalid setting verify_image='Ubuntu Latest': allowed: a container image reference such as registry/name:tag",
        ),
        (
            {"device_plugin_version": "latest"},
            "invalid setting device_plugin_version='latest': allowed: a release such as v0.17.0",
        ),
        (
            {"health_check_interval": "every minute"},
            "invalid setting health_check_interval='every minute': allowed: a systemd time span such as 1min, 90s or "
            "1h 30min (units s, min, h, d, w)",
        ),
        (
            {"health_check_interval": "1min; rm -rf /"},
            "invalid setting health_check_interval='1min; rm -rf /': allowed: a systemd time span such as 1min, 90s or "
            "1h 30min (units s, min, h, d, w)",
        ),
        ({"health_check_interval": "5s"}, "invalid setting health_check_interval='5s': allowed: 10s or longer"),
        (
            {"health_check_interval": "10min"},
            "invalid setting health_silent_after='10min': allowed: longer than health_check_interval (10min), or every "
            "node would be silent between two checks",
        ),
        (
            {"gpushare_inspect_sha256": "abc"},
            "invalid setting gpushare_inspect_sha256='abc': allowed: a SHA-256 digest (64 hex digits)",
        ),
        (
            {"nvidia_toolkit_repo_url": "ftp://mirror/stable"},
            "invalid setting nvidia_toolkit_repo_url='ftp://mirror/stable': allowed: an https:// URL "
            "(http:// needs allow_insecure_repositories=true)",
        ),
        (
            {"nvidia_toolkit_repo_url": "https://mirror/a b"},
            "invalid setting nvidia_toolkit_repo_url='https://mirror/a b': allowed: an https:// URL (http:// needs "
            "allow_insecure_repositories=true), with no whitespace, quotes, backslashes, backticks or $ ; | & < > # "
            "(percent-encode them)",
        ),
        (
            {"nvidia_toolkit_gpgkey_url": "http://mirror/key"},
            "invalid setting nvidia_toolkit_gpgkey_url='http://mirror/key': allowed: an https:// URL, or with "
            "allow_insecure_repositories=true a file:// path on the node (a key is never fetched over http://)",
        ),
        (
            {"nvidia_cuda_gpgkey_url": "http://mirror/key", "allow_insecure_repositories": "true"},
            "invalid setting nvidia_cuda_gpgkey_url='http://mirror/key': allowed: an https:// URL, or with "
            "allow_insecure_repositories=true a file:// path on the node (a key is never fetched over http://)",
        ),
        (
            {"nvidia_driver_gpgkey_url": "file:///etc/nvidia.asc"},
            "invalid setting nvidia_driver_gpgkey_url='file:///etc/nvidia.asc': allowed: an https:// URL, or with "
            "allow_insecure_repositories=true a file:// path on the node (a key is never fetched over http://)",
        ),
        (
            {"nvidia_toolkit_gpgkey_fingerprint": "C95B321B61E88C1809C4F759DDCAE044F796ECB"},
            "invalid setting nvidia_toolkit_gpgkey_fingerprint='C95B321B61E88C1809C4F759DDCAE044F796ECB': allowed: "
            "OpenPGP key fingerprints (40 hex digits each, spaces allowed), comma-separated",
        ),
        (
            {"nvidia_cuda_gpgkey_fingerprint": ""},
            "invalid setting nvidia_cuda_gpgkey_fingerprint='': allowed: "
            "OpenPGP key fingerprints (40 hex digits each, spaces allowed), comma-separated",
        ),
        (
            {"gpushare_inspect_source": "relative/file"},
            "invalid setting gpushare_inspect_source='relative/file': allowed: an https:// URL or an absolute path "
            "to a file on the controller",
        ),
        (
            {"kube_node_names": "gpu1"},
            "invalid setting kube_node_names='gpu1': allowed: a mapping such as host1=node-a,host2=node-b",
        ),
        (
            {"kube_node_names": "gpu1=Node A"},
            "invalid setting kube_node_names='gpu1=Node A': allowed: host=node pairs whose node is a Kubernetes "
            "node name (lower case letters, digits, '-', '.')",
        ),
        (
            {"npd_image": "registry.k8s.io/node-problem-detector/node-problem-detector"},
            "invalid setting npd_image='registry.k8s.io/node-problem-detector/node-problem-detector': allowed: an "
            "image pinned by its tag, optionally with its digest, such as registry/name:v1.2@sha256:<64 hex digits>",
        ),
        (
            {"npd_image": "localhost:5000/npd@sha256:" + "a" * 64},
            "invalid setting npd_image='localhost:5000/npd@sha256:" + "a" * 64 + "': allowed: an image pinned by its "
            "tag, optionally with its digest, such as registry/name:v1.2@sha256:<64 hex digits>",
        ),
        (
            {"quarantine_max_percent": 101},
            "invalid setting quarantine_max_percent=101: allowed: an integer >= 0 <= 100",
        ),
        (
            {"gpu_health_monitor_interval": "10s"},
            "invalid setting gpu_health_monitor_interval='10s': allowed: 30s to 1h",
        ),
        (
            {"gpu_health_monitor_interval": "a minute"},
            "invalid setting gpu_health_monitor_interval='a minute': allowed: a systemd time span such as 1min, 90s or "
            "1h 30min (units s, min, h, d, w)",
        ),
        ({"quarantine_release_after": "31d"}, "invalid setting quarantine_release_after='31d': allowed: 0 to 30d"),
        (
            {"gpu_sharing_replicas": "8"},
            "invalid setting gpu_sharing_replicas='8': allowed only with gpu_sharing=time-slicing or mps "
            "(gpu_sharing is 'none')",
        ),
        (
            {"gpu_sharing": "mps", "mig_strategy": "mixed"},
            "invalid setting mig_strategy='mixed': allowed: none with gpu_sharing=mps (the NVIDIA device plugin "
            "does not share MIG devices through MPS)",
        ),
    ],
)
def test_a_bad_value_stops_the_run_in_one_line_naming_key_value_and_what_is_allowed(data, message):
    with pytest.raises(SettingsError) as raised:
        parse_settings(data)
    assert str(raised.value) == message


def test_no_two_sections_name_a_method_alike_so_each_sections_checks_run():
    """Settings inherits every section: a section's validator named as another's would hide it (its checks never run)."""
    named: dict[str, str] = {}
    for section in Settings.__bases__:
        for name in (
            name
            for name, value in vars(section).items()
            if not name.startswith("__")
            and (callable(value) or isinstance(value, (classmethod, staticmethod)) or hasattr(value, "decorator_info"))
        ):
            assert name not in named, f"{section.__name__} and {named[name]} both define {name}"
            named[name] = section.__name__


def test_of_several_bad_values_one_is_named_in_one_line():
    with pytest.raises(SettingsError) as raised:
        parse_settings({"systemd_cgroup": "maybe", "drain_timeout": "1", "gpu_sharing": "x"})
    assert "\n" not in str(raised.value)
    assert str(raised.value).startswith("invalid setting systemd_cgroup='maybe': allowed: ")


def test_fingerprints_are_read_as_gpg_prints_them_spaces_folded_out_and_upper_case():
    spaced = "c95b 321b 61e8 8c18 09c4  f759 ddca e044 f796 ecb0"
    assert parse_settings({"nvidia_toolkit_gpgkey_fingerprint": spaced}).nvidia_toolkit_gpgkey_fingerprint == (
        "C95B321B61E88C1809C4F759DDCAE044F796ECB0",
    )
    two = parse_settings({"nvidia_driver_gpgkey_fingerprint": f"{'a' * 40}, {'B' * 40},{'a' * 40}"})
    assert two.nvidia_driver_gpgkey_fingerprint == ("A" * 40, "B" * 40)


def test_a_key_is_never_fetched_over_http_even_where_repositories_may_be():
    data = {"nvidia_toolkit_repo_url": "http://mirror.internal/stable", "allow_insecure_repositories": "true"}
    assert parse_settings({**data, "nvidia_toolkit_gpgkey_url": "file:///etc/mirror.asc"}).nvidia_toolkit_gpgkey_url
    with pytest.raises(SettingsError, match="nvidia_toolkit_gpgkey_url='http://mirror.internal/gpgkey'.*never"):
        parse_settings({**data, "nvidia_toolkit_gpgkey_url": "http://mirror.internal/gpgkey"})


def test_plain_http_repository_needs_an_explicit_opt_in():
    mirror = {"nvidia_toolkit_repo_url": "http://mirror.internal/stable"}
    with pytest.raises(SettingsError, match="nvidia_toolkit_repo_url=.*allow_insecure_repositories"):
        parse_settings(mirror)
    assert parse_settings({**mirror, "allow_insecure_repositories": "true"}).nvidia_toolkit_repo_url == (
        "http://mirror.internal/stable"
    )


def test_settings_are_immutable():
    with pytest.raises(ValidationError, match="frozen"):
        Settings().systemd_cgroup = False  # type: ignore[misc]


# --- unknown keys ------------------------------------------------------------------------------


def test_typos_of_setting_names_are_pointed_out():
    assert likely_typos({"nvidia_runtime_defualt": True, "ssh_user": "root"}) == [
        "unknown setting 'nvidia_runtime_defualt': did you mean 'nvidia_runtime_default'?"
    ]


def test_an_unknown_key_with_one_of_our_prefixes_always_names_the_closest_setting():
    notes = likely_typos(
        {
            "nvidia_driver_brnach": "535",  # a typo
            "nvidia_drvier": "550",  # far from any one name, but clearly meant for us
            "gpushare_inspect_sha": "abc",
            "kube_nodes": "a=b",
            "containerd_conf": "/etc/c.toml",
        }
    )
    assert notes == [
        "unknown setting 'nvidia_driver_brnach': did you mean 'nvidia_driver_branch'?",
        "unknown setting 'nvidia_drvier': did you mean 'nvidia_driver_root'?",
        "unknown setting 'gpushare_inspect_sha': did you mean 'gpushare_inspect_sha256'?",
        "unknown setting 'kube_nodes': did you mean 'kube_node_names'?",
        "unknown setting 'containerd_conf': did you mean 'containerd_config_path'?",
    ]


def test_pyinfra_keys_and_unrelated_user_keys_get_no_warning():
    quiet = {
        "ssh_user": "root",
        "ssh_key": "~/.ssh/id",
        "_sudo": True,
        "_env": {},
        "docker_identifier": "abc",
        "docker_platform": "linux/amd64",  # pyinfra's docker connector
        "fake_responses": {},
        "app_port": 8080,
        "time_zone": "UTC",
        "service_name": "web",
    }
    assert likely_typos(quiet) == []


def test_setting_prefixes_come_from_the_setting_names():
    prefixes = settings_hints.setting_prefixes()
    for prefix in ("nvidia_", "containerd_", "docker_", "gpu_", "gpushare_", "drain_", "kube_", "verify_"):
        assert prefix in prefixes
    assert all(any(name.startswith(prefix) for name in SETTING_FIELDS) for prefix in prefixes)


# --- where values come from: pyinfra's group_data, host data, --data ------------------------------


def test_the_examples_in_the_shipped_group_data_are_valid_settings():
    """group_data/all.py shows settings as comments: each one, uncommented, must be accepted."""
    import ast

    examples = {}
    for line in (REPO / "group_data" / "all.py").read_text().splitlines():
        if line.startswith("# ") and " = " in line:
            key, _, value = line[2:].partition(" = ")
            examples[key.strip()] = ast.literal_eval(value)
    assert len(examples) >= 5
    for key, value in examples.items():
        assert key in SETTING_FIELDS, key
        parse_settings({key: value})


SHOW_SETTINGS = """\
import json
from pyinfra import host
from deploy.settings import host_settings
settings = host_settings(host)
print("SETTINGS " + json.dumps({key: getattr(settings, key) for key in
      ("container_runtimes", "systemd_cgroup", "nvidia_driver_branch", "drain_timeout")}))
"""


def pyinfra_settings(args: list[str], cwd: Path) -> dict:
    """Run pyinfra's CLI (--dry, @local: no operation, nothing changes) and read the settings it gave the host."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("GPU_NODES", None)
    result = subprocess.run(
        [sys.executable, "-m", "pyinfra", "--dry", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )
    lines = [line for line in result.stdout.splitlines() if line.startswith("SETTINGS ")]
    assert result.returncode == 0 and lines, result.stdout + result.stderr
    return json.loads(lines[0].removeprefix("SETTINGS "))


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """A site's own folder: an inventory, its group_data, and a deploy file that shows the settings."""
    folder = tmp_path / "site"
    (folder / "group_data").mkdir(parents=True)
    (folder / "inventory.py").write_text('gpu_nodes = [("@local", {"systemd_cgroup": True})]\n')
    (folder / "group_data" / "all.py").write_text(
        "import os\ncontainer_runtimes = ['docker']\nsystemd_cgroup = False\ndrain_timeout = 600\n"
    )
    (folder / "group_data" / "gpu_nodes.py").write_text('nvidia_driver_branch = "550"\n')
    (folder / "show.py").write_text(SHOW_SETTINGS)
    (tmp_path / "elsewhere").mkdir()
    return folder


def test_group_data_beside_the_inventory_applies_below_host_data_and_data_flags(site):
    """pyinfra loads group_data/ beside the inventory file, whatever the working directory."""
    shown = pyinfra_settings(
        [str(site / "inventory.py"), str(site / "show.py"), "--data", "drain_timeout=90"], cwd=site.parent / "elsewhere"
    )
    assert shown == {
        "container_runtimes": ["docker"],  # group_data/all.py
        "nvidia_driver_branch": "550",  # group_data/gpu_nodes.py (the inventory's group)
        "systemd_cgroup": True,  # host data in the inventory beats group data
        "drain_timeout": 90,  # --data beats everything
    }


def test_hosts_named_on_the_command_line_take_group_data_from_group_data_flag(site):
    """No inventory file: group_data comes from the working directory or --group-data, nowhere else."""
    target = ["@local", str(site / "show.py")]
    assert pyinfra_settings(target, cwd=site.parent / "elsewhere")["container_runtimes"] == ["containerd"]
    with_flag = pyinfra_settings([*target, "--group-data", str(site / "group_data")], cwd=site.parent / "elsewhere")
    assert with_flag["container_runtimes"] == ["docker"] and with_flag["drain_timeout"] == 600


def test_hosts_with_the_same_setting_values_share_one_validation_and_others_get_their_own():
    from types import SimpleNamespace

    from pyinfra.api import State

    from deploy.settings import host_settings

    state = State()

    def host(name, **data):
        return SimpleNamespace(name=name, state=state, data=SimpleNamespace(dict=lambda: data))

    # the connector's keys differ per host; the settings' do not
    first = host_settings(host("a", ssh_port=2201, cdi="true"))
    second = host_settings(host("b", ssh_port=2202, cdi="true"))
    other = host_settings(host("c", ssh_port=2203, cdi="false"))
    assert first is second
    assert other is not first and (first.cdi, other.cdi) == ("true", "false")


def pyinfra_lines(args: list[str], cwd: Path) -> tuple[int, list[str]]:
    """pyinfra's CLI (--dry, @local: nothing changes): its exit code and output lines."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("GPU_NODES", None)
    result = subprocess.run(
        [sys.executable, "-m", "pyinfra", "--dry", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )
    return result.returncode, [line.strip() for line in (result.stdout + result.stderr).splitlines()]


@pytest.mark.parametrize(
    "where, value, source",
    [
        ("data", "5x5", "--data"),
        ("host", "5x5", "the inventory's host data"),
        ("group", "5x5", "group_data/gpu_nodes.py"),
        ("all", "5x5", "group_data/all.py"),
    ],
)
def test_an_invalid_value_names_the_host_and_where_it_was_set_in_one_line(site, where, value, source):
    if where == "host":
        (site / "inventory.py").write_text(f'gpu_nodes = [("@local", {{"nvidia_driver_branch": "{value}"}})]\n')
    if where == "all":
        (site / "group_data" / "all.py").write_text(f'nvidia_driver_branch = "{value}"\n')
        (site / "group_data" / "gpu_nodes.py").write_text("")
    if where == "group":
        (site / "group_data" / "gpu_nodes.py").write_text(f'nvidia_driver_branch = "{value}"\n')
    flags = ["--data", f"nvidia_driver_branch={value}"] if where == "data" else []
    code, lines = pyinfra_lines([str(site / "inventory.py"), str(site / "show.py"), *flags], cwd=site)
    errors = [line for line in lines if "invalid setting" in line]
    assert code == 1 and errors == [
        f"--> pyinfra error: invalid setting nvidia_driver_branch='{value}': allowed: a driver branch number such as "
        f"535 or 550 (host @local, from {source})"
    ], lines


def test_every_data_flag_that_is_no_setting_is_named_with_the_nearest_setting_or_none():
    notes = likely_typos(
        {"driver_branch": "550", "runtimes": "docker", "reboot": "true", "colour": "blue", "time_zone": "UTC"},
        command_line={"driver_branch", "runtimes", "reboot", "colour"},
        source=lambda key: "--data",
    )
    assert notes == [
        "unknown setting 'driver_branch' (--data): did you mean 'nvidia_driver_branch'?",
        "unknown setting 'runtimes' (--data): did you mean 'container_runtimes'?",
        "unknown setting 'reboot' (--data): did you mean 'reboot_allowed'?",
        "unknown setting 'colour' (--data): no setting is named like it (docs/settings.md lists them)",
    ]  # time_zone is a site's own key from its inventory, not from --data: left alone


def test_the_shipped_inventory_with_no_hosts_stops_naming_what_to_set(tmp_path):
    code, lines = pyinfra_lines([str(REPO / "inventory.py"), str(REPO / "deploy" / "gpu_node.py")], cwd=tmp_path)
    assert code == 1
    assert (
        "inventory.py: no hosts: set GPU_NODES (and CONTROL_PLANE) to comma-separated pyinfra host names, "
        "or add them to the lists in inventory.py"
    ) in lines


def deploy_call_with_data(command_line: dict, caplog, hosts=("@fake/gpu1", "@fake/gpu2"), **keywords):
    """``provision_gpu_node(**keywords)`` over @fake GPU nodes with ``command_line`` as --data (the inventory's
    override data, as pyinfra's CLI builds it): (the run's error, the commands run, its warnings)."""
    import logging

    from plan import QUICK, gpu_node, run_pyinfra
    from pyinfra.api import Inventory
    from pyinfra.api.deploy import add_deploy

    import deploy
    from deploy.operations.files import digest_read
    from deploy.tasks.kernel import read_files

    inventory = Inventory((list(hosts), {}), override_data={**QUICK, **command_line}, gpu_nodes=(list(hosts), {}))
    nodes = {
        name: gpu_node("debian-12", facts=[(digest_read(path), "absent") for path in read_files()]) for name in hosts
    }
    caplog.set_level(logging.WARNING, logger="pyinfra")
    _, error = run_pyinfra(
        inventory, lambda state: add_deploy(state, deploy.provision_gpu_node, **keywords), nodes=nodes
    )
    commands = [command for host in inventory for command in host.connector.executed_commands]
    return error, commands, [record.getMessage() for record in caplog.records if record.levelname == "WARNING"]


def test_a_data_flag_a_keyword_argument_overrides_is_named_in_one_warning_and_still_checked(caplog, tmp_path):
    keywords = {
        "stages": "kernel",
        "kernel_modules_load": False,
        "container_runtimes": ["containerd"],
        "fleet_report_path": str(tmp_path / "fleet.json"),
    }
    error, commands, warnings = deploy_call_with_data({"container_runtimes": "docker"}, caplog, **keywords)
    assert error is None, error
    # one warning for the run (two hosts), naming the value and what overrides it
    assert [line for line in warnings if "--data" in line] == [
        "--data container_runtimes='docker' is not used: provision_gpu_node(container_runtimes=['containerd']) "
        "overrides it (a deploy call's keyword arguments win over --data, docs/settings.md)"
    ]
    assert commands  # the run went on, with the keyword's value

    caplog.clear()
    error, commands, _ = deploy_call_with_data({"container_runtimes": "podman"}, caplog, **keywords)
    assert isinstance(error, SettingsError) and commands == []
    assert str(error) == (
        "invalid setting container_runtimes='podman': allowed: a comma-separated list of containerd, "
        "docker (from --data, which provision_gpu_node's keyword argument overrides)"
    )


def test_a_data_flag_no_keyword_argument_overrides_gets_no_warning(caplog, tmp_path):
    error, _, warnings = deploy_call_with_data(
        {"container_runtimes": "docker"},
        caplog,
        stages="kernel",
        kernel_modules_load=False,
        fleet_report_path=str(tmp_path / "fleet.json"),
    )
    assert error is None and not [line for line in warnings if "--data" in line]
