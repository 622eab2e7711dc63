"""
The device plugin configs k8s_gpu.py renders, given to the REAL NVIDIA device plugin v0.20.0 (its
binary from the lab's image, run on this machine; cgo, needs only glibc) with NVIDIA's REAL mock NVML
(nvml-mock's library from the lab's image, a100 profile from the corpus: 8 GPUs) as its driver root,
laid out by tests/lab/nvml_mock.py. What the real plugin refuses, the
tool refuses as a setting before anything is applied; what the tool accepts, the real plugin loads.

LAB CHANGES to the rendered config, named: ``containerDriverRoot`` is the mock driver root's folder on
this machine (in a cluster it is the manifest's mount of the host's driver root), and the plugin's
kubelet socket folder and MPS root are throwaway folders. There is no kubelet here: the plugin finds
the mock's GPUs, then cannot serve them (its socket folder does not exist) and says so.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from lab import LabMissing, assets, nvml_mock
from lab_assets import needs_lab

from deploy.settings import SettingsError, parse_settings
from deploy.tasks.k8s import SharingConfig

ACCEPTED = "Running with config:"
REFUSED = ("unable to validate flags", "unable to load config")
# The plugin has either registered its devices (with a kubelet), or tries again in 30 s.
# Fixed in the plugin: it serves its socket there (absent on this machine, so it serves none).
PLUGIN_SOCKET_DIR = "/var/lib/kubelet/device-plugins"
SETTLED = ("Retrying in 30s", "Waiting indefinitely", "Registered device plugin")

pytestmark = needs_lab


@pytest.fixture(scope="module")
def plugin_binary() -> Path:
    if Path(PLUGIN_SOCKET_DIR).exists():
        pytest.skip(f"{PLUGIN_SOCKET_DIR} exists on this machine: the plugin would serve its socket there")
    try:
        return assets.device_plugin_binary()
    except LabMissing as missing:
        pytest.skip(str(missing))


@pytest.fixture(scope="module")
def mock_root(tmp_path_factory) -> Path:
    """The mock's driver root (its real library, the a100 profile as config), on this machine."""
    try:
        return nvml_mock.lay_out(tmp_path_factory.mktemp("mock") / "driver", "a100")
    except LabMissing as missing:
        pytest.skip(str(missing))


def run_plugin(binary: Path, config: dict, mock_root: Path, work: Path, timeout: float = 30) -> str:
    """The plugin's log for ``config`` (the tool's document with the lab changes): until it exits, or
    settles, or ``timeout``; stopped by its PID."""
    config["flags"]["plugin"]["containerDriverRoot"] = str(mock_root)  # LAB CHANGE (see the module)
    (work / "kubelet").mkdir(parents=True, exist_ok=True)
    config_file = work / "config.yaml"
    config_file.write_text(yaml.safe_dump(config, sort_keys=False))
    env = {
        **os.environ,
        "CONFIG_FILE": str(config_file),
        "MPS_ROOT": str(work / "mps"),
        "KUBELET_SOCKET": str(work / "kubelet" / "kubelet.sock"),
    }
    log = work / "plugin.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [str(binary)],
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        try:
            while process.poll() is None and time.monotonic() < deadline:
                if any(marker in log.read_text(errors="replace") for marker in SETTLED):
                    break
                time.sleep(0.2)
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait(timeout=10)
    return log.read_text(errors="replace")


def tool_config(data: dict) -> dict:
    """The config document k8s_gpu.py renders for these settings (the settings are validated first)."""
    return SharingConfig.from_settings(
        parse_settings({"nvidia_driver_root": "/var/lib/nvml-mock/driver", **data})
    ).document()


def unchecked_config(**fields) -> dict:
    """The document the tool would render for settings it refuses (its own validation bypassed)."""
    base = dict(
        sharing="none",
        replicas=1,
        rename_by_default=False,
        fail_requests_greater_than_one=False,
        mig_strategy="none",
        driver_root="/var/lib/nvml-mock/driver",
    )
    return SharingConfig(**{**base, **fields}).document()


@pytest.mark.parametrize(
    "data",
    [
        {},
        {"gpu_sharing": "time-slicing", "gpu_sharing_replicas": "10"},
        {
            "gpu_sharing": "time-slicing",
            "gpu_sharing_replicas": "2",
            "time_slicing_rename_by_default": "true",
            "time_slicing_fail_requests_greater_than_one": "true",
        },
        {"mig_strategy": "single"},
        {"mig_strategy": "mixed"},
        {"gpu_sharing": "time-slicing", "gpu_sharing_replicas": "4", "mig_strategy": "mixed"},
    ],
    ids=["none", "time-slicing-10", "time-slicing-renamed-strict", "mig-single", "mig-mixed", "time-slicing-mig-mixed"],
)
def test_every_config_the_tool_accepts_is_loaded_by_the_real_plugin_with_the_mock_gpus(
    plugin_binary, mock_root, tmp_path, data
):
    """The real plugin loads the tool's config (its "Running with config" line, with the strategy the
    settings name), finds the mock's 8 GPUs through NVML and goes on to register them (no kubelet
    here: it reports that and retries)."""
    log = run_plugin(plugin_binary, tool_config(data), mock_root, tmp_path)
    assert ACCEPTED in log and not any(refusal in log for refusal in REFUSED), log[-3000:]
    assert f'"migStrategy": "{data.get("mig_strategy", "none")}"' in log
    assert "Failed to initialize NVML" not in log, log[-3000:]
    # It starts a plugin only for a resource with devices: the mock's GPUs, under the config's name.
    resource = "nvidia.com/gpu.shared" if data.get("time_slicing_rename_by_default") else "nvidia.com/gpu"
    assert f"Could not start device plugin for '{resource}'" in log, log[-3000:]


def test_mps_sharing_is_loaded_but_cannot_start_without_the_mps_daemon_mock_has_no_nvidia_cuda_mps_control(
    plugin_binary, mock_root, tmp_path
):
    """MPS: the real plugin loads the tool's MPS config, then waits for the MPS control daemon, which
    needs the driver's nvidia-cuda-mps-control (and nvidia-smi to set the compute mode): the mock NVML
    v0.3.0 ships neither, so MPS cannot be shown running here; the plugin says exactly why."""
    log = run_plugin(
        plugin_binary, tool_config({"gpu_sharing": "mps", "gpu_sharing_replicas": "10"}), mock_root, tmp_path
    )
    assert ACCEPTED in log and '"mps"' in log, log[-3000:]
    assert "error waiting for MPS daemon" in log and "nvidia-cuda-mps-control" in log, log[-3000:]


@pytest.mark.parametrize(
    "data, fields, refusal, setting_error",
    [
        (
            {"gpu_sharing": "mps", "gpu_sharing_replicas": "4", "mig_strategy": "mixed"},
            {"sharing": "mps", "replicas": 4, "mig_strategy": "mixed"},
            "using --mig-strategy=mixed is not supported with MPS",
            "invalid setting mig_strategy='mixed': allowed: none with gpu_sharing=mps",
        ),
        (
            {"gpu_sharing": "time-slicing", "gpu_sharing_replicas": "1"},
            {"sharing": "time-slicing", "replicas": 1},
            "number of replicas must be >= 2",
            "invalid setting gpu_sharing_replicas='1'",
        ),
        (
            {"gpu_sharing": "mps", "gpu_sharing_replicas": "1"},
            {"sharing": "mps", "replicas": 1},
            "number of replicas must be >= 2",
            "invalid setting gpu_sharing_replicas='1'",
        ),
    ],
    ids=["mps-mig-mixed", "time-slicing-1-replica", "mps-1-replica"],
)
def test_a_config_the_real_plugin_refuses_is_refused_by_the_tool_as_a_setting(
    plugin_binary, mock_root, tmp_path, data, fields, refusal, setting_error
):
    """The real plugin exits on the config the tool would render for these settings, naming the
    problem; the tool refuses the settings themselves, in one line, before any host is touched."""
    log = run_plugin(plugin_binary, unchecked_config(**fields), mock_root, tmp_path)
    assert ACCEPTED not in log and refusal in log, log[-3000:]
    with pytest.raises(SettingsError) as refused:
        parse_settings(data)
    assert str(refused.value).startswith(setting_error), str(refused.value)
