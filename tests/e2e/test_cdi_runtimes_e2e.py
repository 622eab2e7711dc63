"""
CDI end to end on the two runtimes that need it turned on: Debian trixie's real containerd 1.7.24
(``enable_cdi`` and ``cdi_spec_dirs`` in config.toml) and trixie's real Docker 26.1 (``features.cdi``
in daemon.json), each installed from Debian's archive into a bookworm node container with real
systemd (tests/e2e/test_cdi_e2e.py has containerd 2.1.9, where CDI is on by default).

How the trixie packages go onto bookworm, forcing nothing: containerd 1.7.24 depends on runc and
libc6 (>= 2.34) only, so ``apt-get install ./containerd_1.7.24….deb`` takes it as sid's 2.1.9 is taken
in test_cdi_e2e. docker.io 26.1 comes with trixie's docker-cli (26 split the CLI into its own package);
every dependency they name (containerd >= 1.4, runc, tini, iptables, sysvinit-utils >= 3.05-4,
libc6 >= 2.34) is met by bookworm's archive, so ``apt-get install`` of the two .debs resolves the rest
from bookworm: no ``--force-depends``, no package from trixie but those two.

Stand-ins, named in every test: the toolkit (tests/toolkit_repo.py's STAND-IN packages, test id
``standin-toolkit``: its ``nvidia-ctk cdi generate`` writes the spec naming the device nodes it
finds) and the GPUs (``/dev/nvidia0``, ``/dev/nvidia1``, ``/dev/nvidiactl`` made with NVIDIA's
major number and a STAND-IN ``nvidia-smi`` listing two, test_cdi_e2e's ``standin_gpus``).

What asks for the device: containerd 1.7's ``ctr run`` has no CDI flag (its ``--device`` takes a
device path only; 2.x reads a CDI name there), and 1.7 injects CDI devices in its CRI plugin only.
So the container is started through the CRI, as the kubelet would, with ``CDI_devices`` set (the
field NVIDIA's device plugin fills with ``deviceListStrategy: cdi-cri``): tests/cri_client.py, our
minimal CRI client, runs inside the node on Debian's python3-grpcio. Docker 26 takes the CDI name
in ``docker run --device nvidia.com/gpu=1``.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import tomlkit
from cluster_hosts import allow_sandboxes_without_cap_sys_resource
from containerd_releases import trixie_containerd_deb, trixie_docker_debs
from cri.images import IMAGE as CRI_IMAGE
from cri.images import import_into_node
from harness import BOOT_SETTINGS_OP, assert_no_change, busybox_image_tar, run
from test_cdi_e2e import SPEC, spec_devices, standin_gpus

CONFIG = "/etc/containerd/config.toml"
DAEMON_JSON = "/etc/docker/daemon.json"
CRI = "io.containerd.grpc.v1.cri"
CDI_OP = "CDI | Configure CDI (the spec and its refresh)"
IMAGE = "gpu-node-test/busybox:static"
CRI_CLIENT = Path(__file__).resolve().parents[1] / "cri_client.py"
# The container's /dev/nvidia* on one line, then what the spec mounts at /usr/bin/nvidia-smi, if anything.
LIST_DEVICES = ["sh", "-c", "echo /dev/nvidia*; cat /usr/bin/nvidia-smi 2>/dev/null; true"]
# What a container given nvidia.com/gpu=1 must see: its device and the spec's common device node,
# and the spec's mount of the node's (STAND-IN) nvidia-smi.
ONE_GPU = (["/dev/nvidia1", "/dev/nvidiactl"], True)


def seen_in(output: str) -> tuple[list[str], bool]:
    """(the /dev/nvidia* a container listed, whether the node's stand-in nvidia-smi was mounted in it)."""
    first, _, rest = output.partition("\n")
    return first.split(), "STAND-IN nvidia-smi" in rest


SPEC_NAMES = ["0", "GPU-00000000-0000-4000-8000-000000000000", "1", "GPU-11111111-1111-4111-8111-111111111111", "all"]


def copy_in(node, source: Path, dest: str) -> None:
    run(["docker", "cp", str(source), f"{node.id}:{dest}"])


def install_debs(node, debs: list[Path]) -> None:
    """apt-get install of the given .debs, the rest from the node's own (bookworm) archive."""
    paths = []
    for deb in debs:
        copy_in(node, deb, f"/tmp/{deb.name}")
        paths.append(f"/tmp/{deb.name}")
    node.sh(
        f"chmod 644 {shlex.join(paths)} && apt-get update -qq && DEBIAN_FRONTEND=noninteractive "
        f"apt-get install -y -qq {shlex.join(paths)} >/dev/null",
        timeout=600,
    )


def report_steps(report: Path) -> tuple[dict, dict]:
    (record,) = json.loads(report.read_text())["nodes"]
    return record, {step["name"]: step for step in record["steps"]}


def cri_dump(node) -> dict:
    """The CRI plugin's section of containerd's own resolved config."""
    return tomlkit.parse(node.sh("containerd config dump").stdout).unwrap()["plugins"][CRI]


def cri_run_devices(node, cdi_device: str) -> tuple[list[str], bool]:
    """The /dev/nvidia* a container started through the CRI with ``CDI_devices = [cdi_device]`` sees."""
    command = shlex.join(
        [
            "python3",
            "/tmp/cri_client.py",
            "run",
            "/run/containerd/containerd.sock",
            f"docker.io/{CRI_IMAGE}",
            cdi_device,
            *LIST_DEVICES,
        ]
    )
    result = node.sh(command, check=False, timeout=180)
    assert result.returncode == 0, f"CRI run failed ({result.returncode}): {result.stderr.strip()}"
    return seen_in(result.stdout)


def test_cdi_on_trixie_containerd_1_7_enabled_injected_through_the_cri_verified_and_rerun_unchanged_standin_toolkit(
    start_node, toolkit_repo, tmp_path
):
    """STAND-IN GPU device nodes and toolkit; real containerd 1.7.24 (trixie's .deb on bookworm) turns
    CDI on as the deploy writes it and injects the device a CRI container asks for."""
    node = start_node()
    install_debs(node, [trixie_containerd_deb()])
    assert node.sh("containerd --version").stdout.split()[2].startswith("1.7."), "not containerd 1.7"
    assert cri_dump(node)["enable_cdi"] is False  # 1.7 has CDI off until asked
    # Node containers run without CAP_SYS_RESOURCE: a CRI sandbox needs containerd to cap its
    # oom_score_adj (a key of the site's file the deploy keeps).
    allow_sandboxes_without_cap_sys_resource(node)
    node.sh("DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-grpcio >/dev/null", timeout=300)
    copy_in(node, CRI_CLIENT, "/tmp/cri_client.py")
    standin_gpus(node)
    report = tmp_path / "report.json"
    data = {
        "stages": "toolkit,runtimes,verify",
        "container_runtimes": "containerd",
        "verify_report_path": str(report),
        **toolkit_repo.data(),
    }

    first = node.deploy(data=data)  # cdi=auto
    assert first.returncode == 0, first.explain()
    changed = first.changed_operations()
    assert f"containerd | Wire the nvidia runtime into {CONFIG}" in changed and CDI_OP in changed, changed
    written = tomlkit.parse(node.read(CONFIG)).unwrap()["plugins"][CRI]
    assert written["enable_cdi"] is True and "/var/run/cdi" in written["cdi_spec_dirs"], written
    assert written["restrict_oom_score_adj"] is True  # the site's key kept
    dumped = cri_dump(node)  # what the running containerd resolves
    assert dumped["enable_cdi"] is True, dumped
    assert {"/etc/cdi", "/var/run/cdi"} <= set(dumped["cdi_spec_dirs"]), dumped["cdi_spec_dirs"]
    assert spec_devices(node) == SPEC_NAMES, node.read(SPEC)
    record, steps = report_steps(report)
    assert (record["cdi"], steps["cdi"]["status"]) == ("on, spec current", "pass"), steps["cdi"]
    assert steps["containerd_config"]["status"] == "pass", steps["containerd_config"]
    assert steps["containerd_config"]["reason"].startswith("containerd 1.7."), steps["containerd_config"]

    # A pod's container asks for GPU 1 by its CDI name: containerd 1.7 gives it exactly that device.
    configured_pause = cri_dump(node)["sandbox_image"]
    import_into_node(node, [configured_pause])
    assert cri_run_devices(node, "nvidia.com/gpu=1") == ONE_GPU
    leftover = node.sh("ctr -n k8s.io containers list -q").stdout.split()
    assert leftover == [], f"CRI containers left behind: {leftover}"

    # cdi=true asks the same of 1.7 as auto: only the first-boot unit's record of the setting is
    # rewritten, nothing restarted, and a re-run changes nothing.
    service = node.service("containerd")
    asked_true = node.deploy(data={**data, "cdi": "true"})
    assert asked_true.returncode == 0 and asked_true.changed_operations() == [BOOT_SETTINGS_OP], asked_true.explain()
    assert_no_change(node.deploy(data={**data, "cdi": "true"}))
    assert node.service("containerd") == service

    # cdi=false turns enable_cdi back off: the same request gets no device (CDI did the injection).
    off = node.deploy(data={**data, "cdi": "false"})
    assert off.returncode == 0, off.explain()
    assert cri_dump(node)["enable_cdi"] is False
    assert cri_run_devices(node, "nvidia.com/gpu=1") == (["/dev/nvidia*"], False)


def test_cdi_on_trixie_docker_26_enabled_injected_by_docker_run_verified_and_rerun_unchanged_standin_toolkit(
    start_node, toolkit_repo, tmp_path
):
    """STAND-IN GPU device nodes and toolkit; real Docker 26.1 (trixie's docker.io and docker-cli on
    bookworm) turns CDI on as the deploy writes it and injects the device `docker run --device` names."""
    node = start_node()
    # A node container needs no bridge and no iptables (docs/contributing.md, "The node containers").
    node.write(DAEMON_JSON, json.dumps({"bridge": "none", "iptables": False}, indent=2) + "\n")
    install_debs(node, trixie_docker_debs())
    assert node.sh("docker version --format '{{.Server.Version}}'").stdout.startswith("26."), "not Docker 26"
    assert node.sh("docker info --format '{{json .CDISpecDirs}}'").stdout.strip() == "[]"  # off until asked
    standin_gpus(node)
    report = tmp_path / "report.json"
    data = {
        "stages": "toolkit,runtimes,verify",
        "container_runtimes": "docker",
        "verify_report_path": str(report),
        **toolkit_repo.data(),
    }

    first = node.deploy(data={**data, "cdi": "true"})
    assert first.returncode == 0, first.explain()
    changed = first.changed_operations()
    assert f"Docker | Wire the nvidia runtime into {DAEMON_JSON}" in changed and CDI_OP in changed, changed
    written = json.loads(node.read(DAEMON_JSON))
    assert written["features"] == {"cdi": True} and written["bridge"] == "none", written
    spec_dirs = json.loads(node.sh("docker info --format '{{json .CDISpecDirs}}'").stdout)
    assert spec_dirs == ["/etc/cdi", "/var/run/cdi"], spec_dirs
    assert spec_devices(node) == SPEC_NAMES, node.read(SPEC)
    record, steps = report_steps(report)
    assert (record["cdi"], steps["cdi"]["status"]) == ("on, spec current", "pass"), steps["cdi"]
    assert steps["docker_config"]["status"] == "pass", steps["docker_config"]

    copy_in(node, busybox_image_tar(IMAGE, ("sh", "true", "echo", "cat")), "/tmp/busybox-image.tar")
    node.sh("docker load -i /tmp/busybox-image.tar")
    seen = seen_in(
        node.sh(
            f"docker run --rm --network none --device nvidia.com/gpu=1 {IMAGE} {shlex.join(LIST_DEVICES)}", timeout=120
        ).stdout
    )
    assert seen == ONE_GPU, seen
    asked_unknown = node.sh(f"docker run --rm --network none --device nvidia.com/gpu=7 {IMAGE} true", check=False)
    assert asked_unknown.returncode != 0 and "unresolvable CDI devices nvidia.com/gpu=7" in asked_unknown.stderr

    # cdi=auto decides the same for Docker 26: only the first-boot unit's record of the setting is
    # rewritten, dockerd not restarted, and a re-run changes nothing.
    service = node.service("docker")
    asked_auto = node.deploy(data=data)
    assert asked_auto.returncode == 0 and asked_auto.changed_operations() == [BOOT_SETTINGS_OP], asked_auto.explain()
    assert_no_change(node.deploy(data=data))
    assert node.service("docker") == service
