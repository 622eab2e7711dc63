"""
Docker (Debian's docker.io, with containerd) wired to the NVIDIA runtime on a real bookworm node.

The toolkit is the one tests/toolkit_repo.py serves: the STAND-IN packages (test id
`standin-toolkit`) or NVIDIA's debs from the opt-in lab (`real-toolkit`); `docker run` with the
default runtime goes through its nvidia-container-runtime, and the runtime's own log (its `create`
for the container's id) proves it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from harness import CACHE, REPO, assert_no_change, run, wait_for
from test_containerd_e2e import IMAGE, assert_wired, busybox_image_tar, copy_in

DAEMON_JSON = "/etc/docker/daemon.json"
# A node container needs no bridge and no iptables (docs/contributing.md, "The node containers"); the rest is a site's file.
SEEDED = {
    "bridge": "none",
    "iptables": False,
    "log-driver": "json-file",
    "log-opts": {"max-size": "10m", "max-file": "3"},
    "registry-mirrors": ["https://mirror.example.internal"],
    "insecure-registries": ["registry.lab:5000"],
    "features": {"buildkit": True},
    "runtimes": {"runsc": {"path": "/usr/local/bin/runsc", "runtimeArgs": ["--platform=systrap"]}},
}


def docker_info(node) -> dict:
    return json.loads(node.sh("docker info --format '{{json .}}'").stdout)


def test_containerd_and_docker_wired_on_one_node_keep_site_keys_run_through_the_nvidia_runtime_and_rerun_unchanged(
    start_node, toolkit_repo
):
    """The toolkit is tests/toolkit_repo.py's: the STAND-IN packages (test id standin-toolkit), NVIDIA's own debs
    only with GPU_NODE_LAB (real-toolkit); containerd, Docker, runc and systemd are Debian's, real. No GPU."""
    node = start_node()
    node.write(DAEMON_JSON, json.dumps(SEEDED, indent=4) + "\n")
    data = {
        "stages": "toolkit,runtimes",
        "container_runtimes": "containerd,docker",
        "docker_install": "true",
        **toolkit_repo.data(),
    }

    first = node.deploy(data=data)
    assert first.returncode == 0, first.explain()
    changed = first.changed_operations()
    for operation in (
        "Docker | Install Docker",
        f"Docker | Wire the nvidia runtime into {DAEMON_JSON}",
        "containerd | Wire the nvidia runtime into /etc/containerd/config.toml",
    ):
        assert operation in changed, changed

    written = json.loads(node.read(DAEMON_JSON))
    for key, value in SEEDED.items():
        if key == "runtimes":
            assert written["runtimes"]["runsc"] == value["runsc"]
        else:
            assert written[key] == value, key
    assert list(written)[: len(SEEDED)] == list(SEEDED)
    assert node.read(DAEMON_JSON).startswith('{\n  "bridge": "none",\n')
    info = docker_info(node)
    assert info["DefaultRuntime"] == "nvidia"
    assert info["Runtimes"]["nvidia"]["path"] == "/usr/bin/nvidia-container-runtime"
    assert "runsc" in info["Runtimes"]
    assert info["CgroupDriver"] == "systemd"
    assert node.is_active("docker")
    assert_wired(node, "io.containerd.grpc.v1.cri", [])

    copy_in(node, busybox_image_tar(), "/tmp/busybox-image.tar")
    node.sh("docker load -i /tmp/busybox-image.tar")
    toolkit_repo.enable_runtime_log(node)
    out = node.sh(
        f"docker run --rm --network none --cidfile /tmp/nvidia-check.cid {IMAGE} echo through-docker", timeout=120
    )
    assert out.stdout.strip() == "through-docker", out
    container_id = node.read("/tmp/nvidia-check.cid").strip()
    assert toolkit_repo.runtime_created(node, container_id), toolkit_repo.runtime_log(node)

    before = {unit: node.service(unit) for unit in ("docker", "containerd")}
    files = {path: node.stat(path) for path in (DAEMON_JSON, "/etc/containerd/config.toml")}
    second = node.deploy(data=data)
    assert_no_change(second)
    assert {unit: node.service(unit) for unit in ("docker", "containerd")} == before
    assert {path: node.stat(path) for path in files} == files

    # A daemon.json that is not JSON: the host fails naming file and position; nothing moves.
    node.write(DAEMON_JSON, '{\n  "bridge": "none",\n  "iptables": false,\n}\n')
    untouched = {"file": node.stat(DAEMON_JSON), "docker": node.service("docker")}
    broken = node.deploy(data=data, json_output=False)
    assert broken.returncode != 0
    error = [line for line in broken.run_output.splitlines() if "is not valid JSON" in line]
    assert error and DAEMON_JSON in error[0] and re.search(r"line 4 column 1", error[0]), broken.explain()
    assert {"file": node.stat(DAEMON_JSON), "docker": node.service("docker")} == untouched
    assert node.is_active("docker")


def test_docker_wired_but_not_installed_stops_with_what_to_do(node):
    result = node.deploy(data={"stages": "runtimes", "container_runtimes": "docker"}, json_output=False)
    assert result.returncode != 0
    message = [line for line in result.run_output.splitlines() if "Docker is not installed" in line]
    assert message and "docker_install=true" in message[0] and "docker.io" in message[0], result.explain()
    assert not node.exists(DAEMON_JSON)


# --- dockerd flags from a systemd drop-in next to daemon.json (as some cluster installers write) ---

UNITS = Path(__file__).resolve().parents[1] / "fixtures" / "docker" / "units"
OPTIONS_DROP_IN = "/etc/systemd/system/docker.service.d/docker-options.conf"
CONFLICT = "the following directives are specified both as a flag and in the configuration file"


def install_docker_io_with_drop_in(node, drop_in: str | None, daemon_json: dict) -> None:
    """An installer's order: the drop-in and daemon.json first, then Debian's docker.io (which starts dockerd)."""
    if drop_in:
        node.write(OPTIONS_DROP_IN, (UNITS / "installer" / drop_in).read_text())
    node.write(DAEMON_JSON, json.dumps(daemon_json, indent=2) + "\n")
    node.sh(
        "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "
        "docker.io >/dev/null",
        timeout=900,
    )
    wait_for(lambda: node.is_active("docker"), timeout=60, what="docker active after install")


def gpu_node_messages(result) -> list[str]:
    return [line for line in result.run_output.splitlines() if "gpu-node:" in line]


def test_a_drop_ins_systemd_cgroup_flag_is_left_to_the_flag_dockerd_starts_with_nvidia_and_rerun_unchanged(
    node, toolkit_repo
):
    # The drop-in passes --iptables=false, so daemon.json must not (a node container
    # needs no bridge and no iptables: "bridge" stays in the file, iptables comes from the flag).
    install_docker_io_with_drop_in(node, "options-systemd.conf", {"bridge": "none"})
    assert "--exec-opt native.cgroupdriver=systemd" in node.sh("systemctl cat docker.service").stdout
    data = {"stages": "toolkit,runtimes", "container_runtimes": "docker", **toolkit_repo.data()}

    first = node.deploy(data=data)
    assert first.returncode == 0, first.explain()
    assert f"Docker | Wire the nvidia runtime into {DAEMON_JSON}" in first.changed_operations()
    written = json.loads(node.read(DAEMON_JSON))
    # exec-opts is the flag's: writing it too would stop dockerd from starting (proven below).
    assert written == {
        "bridge": "none",
        "runtimes": {"nvidia": {"path": "/usr/bin/nvidia-container-runtime", "runtimeArgs": []}},
        "default-runtime": "nvidia",
    }
    assert node.is_active("docker")
    info = docker_info(node)
    assert (info["CgroupDriver"], info["DefaultRuntime"]) == ("systemd", "nvidia")
    assert info["Runtimes"]["nvidia"]["path"] == "/usr/bin/nvidia-container-runtime"

    # A container started with dockerd's defaults goes through nvidia-container-runtime.
    toolkit_repo.enable_runtime_log(node)
    copy_in(node, busybox_image_tar(), "/tmp/busybox-image.tar")
    node.sh("docker load -i /tmp/busybox-image.tar")
    container = node.sh(f"docker create --network none {IMAGE} true").stdout.strip()
    node.sh(f"docker start -a {container}", timeout=120)
    assert toolkit_repo.runtime_created(node, container), toolkit_repo.runtime_log(node)

    before = {"docker": node.service("docker"), "file": node.stat(DAEMON_JSON)}
    second = node.deploy(data=data)
    assert_no_change(second)
    # pyinfra's default mode (no -y): change detection, then Enter; every operation ends "No Change".
    args, env = node.deploy_command(data=data, json_output=False)
    args.remove("-y")
    default_mode = run(args, check=False, cwd=REPO, env=env, input="\n", timeout=900)
    shown = default_mode.stdout + default_mode.stderr
    assert default_mode.returncode == 0, shown[-3000:]
    results = shown.split("--> Results:")[-1].split("--> Disconnecting")[0].splitlines()
    # Each row ends Hosts, Success (changed), Error, No Change.
    rows = [line.split()[-4:] for line in results if line.strip() and "Operation" not in line]
    assert rows and all(success == error == "-" and hosts == unchanged for hosts, success, error, unchanged in rows), (
        shown[-3000:]
    )
    assert {"docker": node.service("docker"), "file": node.stat(DAEMON_JSON)} == before

    # The proof that leaving exec-opts out is needed: the plain merge (exec-opts in daemon.json too)
    # makes the real dockerd refuse to start.
    good = node.read(DAEMON_JSON)
    node.write(DAEMON_JSON, json.dumps({**written, "exec-opts": ["native.cgroupdriver=systemd"]}, indent=2) + "\n")
    assert node.sh("systemctl restart docker", check=False).returncode != 0
    journal = node.sh("journalctl -u docker --no-pager -n 50").stdout
    assert CONFLICT in journal and "exec-opts" in journal, journal[-3000:]
    # ... and gpu-node names that file's conflict instead of going on.
    conflicting = node.deploy(data=data, json_output=False)
    assert conflicting.returncode != 0
    message = [line for line in gpu_node_messages(conflicting) if "sets it too" in line]
    assert message and f"{DAEMON_JSON} sets 'exec-opts'" in message[0] and OPTIONS_DROP_IN in message[0], (
        conflicting.explain()
    )
    node.write(DAEMON_JSON, good)
    node.sh("systemctl reset-failed docker; systemctl restart docker")
    assert node.is_active("docker")


def test_a_drop_ins_cgroupfs_flag_is_refused_before_any_change_naming_flag_and_drop_in(node, toolkit_repo):
    install_docker_io_with_drop_in(node, "options-cgroupfs.conf", {"bridge": "none"})
    assert docker_info(node)["CgroupDriver"] == "cgroupfs"
    untouched = {"file": node.stat(DAEMON_JSON), "docker": node.service("docker")}
    data = {"stages": "toolkit,runtimes", "container_runtimes": "docker", **toolkit_repo.data()}

    refused = node.deploy(data=data, json_output=False)
    assert refused.returncode != 0
    messages = gpu_node_messages(refused)
    assert len(messages) == 1, refused.explain()
    assert (
        "--exec-opt native.cgroupdriver=cgroupfs" in messages[0]
        and OPTIONS_DROP_IN in messages[0]
        and "systemd_cgroup=false" in messages[0]
    ), messages
    assert {"file": node.stat(DAEMON_JSON), "docker": node.service("docker")} == untouched
    assert node.is_active("docker")
    assert "Traceback" not in refused.output


def test_shim_name_default_runtime_on_debians_docker_20_10_is_refused_saying_it_needs_docker_23(node, toolkit_repo):
    """Debian bookworm's docker.io is 20.10: it has no shim-name default runtimes (Docker 23 added them)."""
    install_docker_io_with_drop_in(node, None, {"bridge": "none", "iptables": False})
    shim = {"bridge": "none", "iptables": False, "default-runtime": "io.containerd.runsc.v1"}
    node.write(DAEMON_JSON, json.dumps(shim, indent=2) + "\n")
    # The real dockerd 20.10 refuses it ...
    assert node.sh("systemctl restart docker", check=False).returncode != 0
    journal = node.sh("journalctl -u docker --no-pager -n 50").stdout
    assert "specified default runtime 'io.containerd.runsc.v1' does not exist" in journal, journal[-3000:]
    # ... and gpu-node says so before any change, when nvidia is not to become the default.
    untouched = node.stat(DAEMON_JSON)
    data = {
        "stages": "toolkit,runtimes",
        "container_runtimes": "docker",
        "nvidia_runtime_default": "false",
        **toolkit_repo.data(),
    }
    refused = node.deploy(data=data, json_output=False)
    assert refused.returncode != 0
    messages = gpu_node_messages(refused)
    assert len(messages) == 1 and "containerd shim name" in messages[0] and "Docker 23" in messages[0], (
        refused.explain()
    )
    assert node.stat(DAEMON_JSON) == untouched
    assert "Traceback" not in refused.output


def test_add_runtime_flags_merge_with_daemon_json_and_the_files_nvidia_wins(node, toolkit_repo):
    """dockerd merges --add-runtime with daemon.json's runtimes (moby exempts "runtimes" from its
    flag/file conflict check) and keeps the file's entry for a name both give: the wiring in
    daemon.json is what runs even next to a drop-in's own --add-runtime nvidia=..."""
    drop_in = "/etc/systemd/system/docker.service.d/runtimes.conf"
    node.write(
        drop_in,
        '[Service]\nEnvironment="DOCKER_OPTS=--add-runtime nvidia=/opt/old/nvidia-runtime '
        '--add-runtime crun=/usr/bin/crun"\n',
    )
    install_docker_io_with_drop_in(node, None, {"bridge": "none", "iptables": False})
    assert docker_info(node)["Runtimes"]["nvidia"]["path"] == "/opt/old/nvidia-runtime"
    data = {"stages": "toolkit,runtimes", "container_runtimes": "docker", **toolkit_repo.data()}

    first = node.deploy(data=data, json_output=False)
    assert first.returncode == 0, first.explain()
    assert "is overridden by /etc/docker/daemon.json runtimes.nvidia" in first.output
    info = docker_info(node)
    assert info["Runtimes"]["nvidia"]["path"] == "/usr/bin/nvidia-container-runtime"
    assert info["Runtimes"]["crun"]["path"] == "/usr/bin/crun"
    assert (info["DefaultRuntime"], info["CgroupDriver"]) == ("nvidia", "systemd")
    before = {"docker": node.service("docker"), "file": node.stat(DAEMON_JSON)}
    assert_no_change(node.deploy(data=data))
    assert {"docker": node.service("docker"), "file": node.stat(DAEMON_JSON)} == before


def trixie_dockerd() -> Path:
    """Debian trixie's dockerd 26 (docker.io), fetched once with a throwaway apt config (the machine's
    sources untouched) and unpacked under .cache/trixie-apt; it needs glibc 2.34, bookworm has 2.36."""
    directory = CACHE / "trixie-apt"
    binary = directory / "root" / "usr" / "sbin" / "dockerd"
    if binary.exists():
        return binary
    for sub in ("lists/partial", "cache/archives/partial", "debs"):
        (directory / sub).mkdir(parents=True, exist_ok=True)
    (directory / "sources.list").write_text("deb http://deb.debian.org/debian trixie main\n")
    options = [
        "-o",
        f"Dir::Etc::SourceList={directory / 'sources.list'}",
        "-o",
        "Dir::Etc::SourceParts=/nonexistent",
        "-o",
        f"Dir::State::Lists={directory / 'lists'}",
        "-o",
        f"Dir::Cache={directory / 'cache'}",
        "-o",
        "Acquire::Languages=none",
    ]
    run(["apt-get", *options, "update", "-q"])
    run(["apt-get", *options, "download", "docker.io"], cwd=directory / "debs")
    deb = sorted((directory / "debs").glob("docker.io_26.*.deb"))[-1]
    run(["dpkg-deb", "-x", str(deb), str(directory / "root")])
    return binary


def test_docker_26_from_trixie_on_a_bookworm_node_keeps_a_shim_name_default_runtime(node, toolkit_repo):
    """Docker 23 and later take a containerd shim name as default-runtime (Docker's docs; moby's
    isPermissibleC8dRuntimeName). Debian's Docker 26 is trixie's: its real dockerd replaces bookworm's
    20.10 one on the node (bookworm's containerd, runc, unit and CLI stay)."""
    install_docker_io_with_drop_in(node, None, {"bridge": "none", "iptables": False})
    run(["docker", "cp", str(trixie_dockerd()), f"{node.id}:/usr/sbin/dockerd"])
    shim = {"bridge": "none", "iptables": False, "default-runtime": "io.containerd.runsc.v1"}
    node.write(DAEMON_JSON, json.dumps(shim, indent=2) + "\n")
    node.sh("systemctl restart docker")
    info = docker_info(node)
    assert (info["ServerVersion"].split(".")[0], info["DefaultRuntime"]) == ("26", "io.containerd.runsc.v1")
    node.sh("systemctl reset-failed docker")  # Debian's unit allows 3 starts a minute; the test made 2
    data = {
        "stages": "toolkit,runtimes",
        "container_runtimes": "docker",
        "nvidia_runtime_default": "false",
        **toolkit_repo.data(),
    }

    first = node.deploy(data=data)
    assert first.returncode == 0, first.explain()
    assert f"Docker | Wire the nvidia runtime into {DAEMON_JSON}" in first.changed_operations()
    info = docker_info(node)
    assert (info["DefaultRuntime"], info["CgroupDriver"]) == ("io.containerd.runsc.v1", "systemd")
    assert info["Runtimes"]["nvidia"]["path"] == "/usr/bin/nvidia-container-runtime"
    before = {"docker": node.service("docker"), "file": node.stat(DAEMON_JSON)}
    assert_no_change(node.deploy(data=data))
    assert {"docker": node.service("docker"), "file": node.stat(DAEMON_JSON)} == before

    # A name that is neither configured nor a shim: this dockerd's --validate passes it, its start would
    # not; gpu-node refuses before any change.
    node.write(DAEMON_JSON, node.read(DAEMON_JSON).replace("io.containerd.runsc.v1", "myshim"))
    assert "configuration OK" in node.sh(f"dockerd --validate --config-file {DAEMON_JSON} 2>&1").stdout
    untouched = node.stat(DAEMON_JSON)
    refused = node.deploy(data=data, json_output=False)
    assert refused.returncode != 0
    messages = gpu_node_messages(refused)
    assert len(messages) == 1 and "default-runtime 'myshim' is not a configured runtime" in messages[0], (
        refused.explain()
    )
    assert node.stat(DAEMON_JSON) == untouched
    assert node.service("docker") == before["docker"]
