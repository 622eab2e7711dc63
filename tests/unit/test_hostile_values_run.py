"""
Hostile values, run for real: every setting that takes text, given values that would run a
command, end a quote, start a comment or split a word if they escaped their quoting, is refused in
one line, or reaches the node only quoted or written by a serializer.

The proof runs what the deploy renders. Each plan (the whole gpu_node.py run on a Debian node with
a GPU, containerd and Docker; deploy/k8s_gpu.py with the device plugin, by manifest and by Helm;
gpushare) is made on pyinfra's @fake connector twice, once with a plain value and once with the
hostile one, and both are replayed in a scratch root (tests/shell_sandbox.py): every command runs
there for real under sh, every upload is written there, and the /dev/char script runs as udev would
run it. The payload never runs (its file never appears), no command is a syntax error, and the
hostile run leaves the same files as the plain one, the value read as the plain value: nothing was
split, cut short or turned into a comment. For gpushare the proof is a subset: its stand-in control
plane cannot answer a hostile path as it answers the plain one, so there the comparison with the
plain run is skipped (FOLLOWS_HOSTILE_PATHS). Manifests are read back with a YAML parser and the
driver root's systemd environment file by the node's real systemd in the CDI e2e test.
"""

from __future__ import annotations

import base64
import functools
import json
import posixpath
import shlex
from pathlib import Path
from typing import get_origin
from unittest import mock

import pyinfra
import pytest
import yaml
from plan import PCI_WITH_GPU, QUICK, Node, every, node_lines, run_deploy, run_pyinfra, uploaded_bytes
from pyinfra.api import Inventory
from pyinfra.connectors.fake import FakeConnector
from pyinfra_cli.util import load_deploy_file
from shell_sandbox import Sandbox, build_template
from test_driver_plans import DEBIAN_FILES, node
from test_gpushare_plan import GpushareHost
from test_k8s_plan import ENTRY as K8S_ENTRY
from test_k8s_plan import FakeCluster, gpu_identity_lines
from test_undo_plan import ORIGINAL_TOML, WIRED_TOML, gpu_node_writes, read, undo_steps, write

from deploy.facts.cdi import CdiState
from deploy.facts.containerd import ContainerdConfig
from deploy.facts.docker import DockerState
from deploy.facts.gpu_node_identity import GpuNodeIdentity
from deploy.operations.cdi import REFRESH_ENV
from deploy.operations.devices import LINKS_SCRIPT
from deploy.reports.node_report import write_json_file
from deploy.settings import DEFAULTS, SETTING_FIELDS, SettingsError, parse_settings
from deploy.settings.fields import unwrap

# Relative and without a slash: a value's own folders never end in a component "pwned", and
# folding a value back to the plain one never cuts inside it.
PAYLOAD = "touch pwned"
PWNED = "pwned"
# Around a value the setting takes: what would run PAYLOAD, end a quote, start a comment, split a
# word or glob if the value escaped its quoting (one style of escape each).
SUFFIXES = (
    f"$({PAYLOAD})`{PAYLOAD}`",
    f"; {PAYLOAD} && {PAYLOAD} | {PAYLOAD} &",
    f"' ; {PAYLOAD} ; '",
    f'" ; {PAYLOAD} ; "',
    f"\\'$({PAYLOAD})'",
    " x #note: y*",
    "\n" + PAYLOAD,
)
# The same inside a path: a folder of its own.
PATH_MIDDLE = f"it's $({PAYLOAD}); `{PAYLOAD}` & {PAYLOAD} | x #y: z"
STYLES = range(len(SUFFIXES) + 1)
# A value each setting without a text default takes (the hostile values are built around it)
PLAIN = {
    "containerd_version": "1.6.20-5",
    "nvidia_driver_branch": "535",
    "nvidia_driver_version": "535.183.01",
    "nvidia_toolkit_version": "1.17.8-1",
    "gpushare_inspect_sha256": "5" * 64,
    "kube_node_names": "@fake/gpu1=gpu1",
    "kubeconfig": "/etc/kubernetes/admin.conf",
    "manifests_inventory": "inventory.py",
    "manifests_kubernetes_version": "1.30",
    # not "/": a value read back as "/" would fold every path
    "nvidia_driver_root": "/run/nvidia/driver",
    "nvidia_cuda_gpgkey_url": "https://mirror.example.internal/cuda.pub",
    "nvidia_driver_gpgkey_url": "https://mirror.example.internal/suse.key",
    "nvidia_toolkit_gpgkey_fingerprint": "C95B321B61E88C1809C4F759DDCAE044F796ECB0",
    "nvidia_cuda_gpgkey_fingerprint": "EB693B3035CD5710E231E123A4B469963BF863CC",
    "nvidia_driver_gpgkey_fingerprint": "C95B321B61E88C1809C4F759DDCAE044F796ECB0",
    "imex_domain": "rack-a",
    "imex_address": "10.0.0.1",
    "module_signing_key": "/etc/site/mok.key",
    "module_signing_cert": "/etc/site/mok.der",
}


def takes_text(name: str) -> bool:
    """Text, or a list read from text on the command line (kube_node_names, key fingerprints)."""
    annotation, _, _ = unwrap(SETTING_FIELDS[name].annotation)
    return (
        annotation is str
        or get_origin(annotation) is tuple
        and (name == "kube_node_names" or name.endswith("_fingerprint"))
    )


TEXT_SETTINGS = sorted(name for name in SETTING_FIELDS if takes_text(name))


def plain_value(name: str) -> str:
    return PLAIN.get(name) or DEFAULTS[name]


def hostile_value(name: str, style: int) -> str:
    """The setting's plain value with the escape ``style`` (an index of SUFFIXES, or a folder of its own)."""
    plain = plain_value(name)
    if style < len(SUFFIXES):
        return plain + SUFFIXES[style]
    folder, _, file = plain.rpartition("/")
    return f"{folder}/{PATH_MIDDLE}/{file}" if plain.startswith("/") else f"{plain}/{PATH_MIDDLE}"


# Where each setting's value goes, and so which plans prove it: the node's run, the cluster's
# (device plugin by manifest and by Helm), gpushare's, or only the controller (a report file
# Python writes: no shell, no parser of another program).
PLANS = {
    "containerd_config_path": ("node",),
    "docker_daemon_config_path": ("node",),
    "containerd_version": ("node",),
    "nvidia_driver_version": ("node",),
    "nvidia_driver_branch": ("node",),
    "nvidia_toolkit_version": ("node",),
    "nvidia_toolkit_repo_url": ("node",),
    "nvidia_toolkit_gpgkey_url": ("node",),
    "nvidia_driver_repo_url": ("node",),
    "nvidia_cuda_repo_url": ("node",),
    "verify_image": ("node",),
    "nvidia_cuda_gpgkey_url": ("node",),
    "nvidia_driver_gpgkey_url": ("node",),
    "nvidia_toolkit_gpgkey_fingerprint": ("node",),
    "nvidia_cuda_gpgkey_fingerprint": ("node",),
    "nvidia_driver_gpgkey_fingerprint": ("node",),
    # paths DKMS sources in bash: anything but letters, digits and . _ + - / is refused before any run
    "module_signing_key": ("node",),
    "module_signing_cert": ("node",),
    "nvidia_driver_root": ("node", "cluster", "helm"),
    "kubeconfig": ("cluster", "helm", "gpushare"),
    "kube_node_names": ("cluster",),
    "device_plugin_version": ("cluster", "helm"),
    "smoke_test_image": ("cluster",),
    # a release tag: its pattern (v1.2.3) refuses every hostile value before any run
    "dra_driver_version": ("cluster",),
    # batch sizes (deploy/foundations/batches.py): anything but numbers, % and commas is refused before any run
    "allocator_move_batches": ("cluster",),
    # inventory group names: anything but letters, digits, _ and - is refused before any run
    "gpu_nodes_group": ("node", "cluster"),
    "control_plane_group": ("node", "cluster"),
    # a name (letters, digits, . _ -) or an IP address: every hostile value is refused before any run
    "imex_domain": ("node",),
    "imex_address": ("node",),
    "mig_manager_package": ("node",),
    # a pinned image (its tag, optionally its digest): its pattern refuses every hostile value before any run
    "npd_image": ("cluster",),
    "gpushare_extender_image": ("gpushare",),
    "gpushare_device_plugin_image": ("gpushare",),
    "gpushare_scheduler_config_path": ("gpushare",),
    "gpushare_inspect_source": ("gpushare",),
    "gpushare_inspect_sha256": ("gpushare",),
    "gpushare_inspect_path": ("gpushare",),
    "verify_report_path": ("controller",),
    "fleet_report_path": ("controller",),
    # systemd time spans (the health timer's interval; the fleet view's silence): their pattern refuses
    # every hostile value before any run
    "health_check_interval": ("node",),
    "health_silent_after": ("node",),
    # the same type for node-problem-detector's interval (NPD's config gets its seconds) and the quarantine's
    # release (compared in seconds)
    "gpu_health_monitor_interval": ("cluster",),
    "quarantine_release_after": ("cluster",),
    # deploy/render_cluster.py on @local: a real run of each style in test_render_cluster.py
    "manifests_dir": ("render",),
    "manifests_inventory": ("render",),
    "manifests_kubernetes_version": ("render",),
}
KINDS = ("node", "cluster", "helm", "gpushare")
# gpushare's control plane is stood in for by test_gpushare_plan's GpushareHost, which answers
# pyinfra's file facts (files.put's) from its own table and cannot answer a hostile path as it
# answers the plain one: there the proof is that no payload runs and no command is a syntax error
# (and the manifests, read back below), not the comparison with the plain run.
FOLLOWS_HOSTILE_PATHS = ("node", "cluster", "helm")


def test_every_setting_that_takes_text_is_proven_here():
    assert sorted(PLANS) == TEXT_SETTINGS


def accepted(name: str, value: str) -> bool:
    """Whether the settings take ``value``; a refusal must be one line naming the key and what is allowed."""
    try:
        parse_settings({name: value})
    except SettingsError as error:
        message = str(error)
        assert "\n" not in message and message.startswith(f"invalid setting {name}=") and "allowed:" in message
        return False
    return True


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("name", TEXT_SETTINGS)
def test_a_hostile_value_is_refused_in_one_line_or_replayed_below(name, style):
    if accepted(name, hostile_value(name, style)):
        # taken: the replay of its style runs it in every plan it reaches (below)
        assert PLANS[name], f"{name} takes hostile values and no plan here proves where they go"


def hostile_settings(kind: str, style: int) -> dict[str, str]:
    """Every setting the ``kind`` of plan uses that takes its ``style`` of hostile value."""
    values = {}
    for name in TEXT_SETTINGS:
        value = hostile_value(name, style)
        if kind in PLANS[name] and accepted(name, value):
            values[name] = value
    return values


# --- the plans ---------------------------------------------------------------------------------

NODE_DATA = {
    "stages": "kernel,driver,toolkit,runtimes,verify",
    "container_runtimes": "containerd,docker",
    "docker_install": "true",
    "cdi": "true",
    "apt_lock_timeout": "0",
    "download_timeout": "1",
}


# Docker as installed: the stage refuses to wire a dockerd it cannot find after its install
DOCKER = "dockerd /usr/sbin/dockerd\nversion Docker version 26.1.5+dfsg1\nconfig e30="
# The toolkit's CDI refresh units shipped, not enabled, and a GPU answering: the cdi stage writes
# the driver root's environment file and generates the spec
CDI = [
    "ctk /usr/bin/nvidia-ctk",
    "refresh_unit /usr/lib/systemd/system/nvidia-cdi-refresh.path",
    "refresh_enabled disabled",
    "refresh_active inactive",
    "smi_exit_code 0",
    "smi_gpus 1",
]


def node_plan(settings: dict[str, str]):
    debian = node(
        "debian-12",
        node_survey=node_lines("6.1.0-18-amd64", pci=PCI_WITH_GPU),
        facts=[*DEBIAN_FILES, (every(DockerState), DOCKER), (every(CdiState), CDI)],
    )
    return run_deploy(debian, data={**NODE_DATA, **settings})


def cluster_plan(settings: dict[str, str], kind: str):
    """deploy/k8s_gpu.py on control plane @fake/cp1 and GPU node @fake/gpu1 (their kubectl and identity
    stood in for: no cluster here); the plan's timeline and uploads."""
    if kind == "gpushare":
        control_plane = GpushareHost(version=("1", "28"), nodes={"gpu1": {}, "cp1": {}})
        data = {"gpu_sharing": "gpushare", "gpushare_inspect_sha256": "5" * 64, "smoke_test": "false"}
    else:
        control_plane = FakeCluster(nodes={"gpu1": {}, "cp1": {}})
        data = {"gpu_health_monitor": "npd"}  # node-problem-detector's bundle too (npd_image)
        if kind == "helm":  # helm's answers, as test_k8s_plan's helm tests state them: no release yet
            control_plane.helm_lines = [
                "list-rc 0",
                "list-out []",
                "values-rc 1",
                "values-err Error: release: not found",
            ]
            data = {**data, "device_plugin_install_method": "helm"}
    nodes = {
        "@fake/cp1": Node(stand_in=control_plane.answer),
        "@fake/gpu1": Node(facts=[(every(GpuNodeIdentity), gpu_identity_lines("gpu1", ["NVIDIA A100-SXM4-40GB"]))]),
    }
    inventory = Inventory(
        ([("@fake/cp1", QUICK), ("@fake/gpu1", QUICK)], {}),
        override_data={**data, **settings},
        control_plane=(["@fake/cp1"], {}),
        gpu_nodes=(["@fake/gpu1"], {}),
    )
    timeline, uploads = [], {}

    def kept_on_the_control_plane(connector, filename_or_io, remote_filename, *args, **kwargs):
        if isinstance(control_plane, GpushareHost):  # its kubelet swaps the staged manifest it holds
            control_plane.files[remote_filename] = uploaded_bytes(filename_or_io)
        return True

    with (
        mock.patch.object(pyinfra, "is_cli", True),
        mock.patch.object(FakeConnector, "put_file", kept_on_the_control_plane),
    ):
        run_pyinfra(
            inventory, lambda state: load_deploy_file(state, K8S_ENTRY), nodes=nodes, timeline=timeline, uploads=uploads
        )
    return [(command, uploads.get(index)) for index, (host, command) in enumerate(timeline) if host == "@fake/cp1"]


def steps(settings: dict[str, str], kind: str) -> list[tuple[str, bytes | None]]:
    """(command, None) or (``upload PATH``, bytes), in the order the plan ran them."""
    return list(_planned_steps(kind, tuple(sorted(settings.items()))))


@functools.cache
def _planned_steps(kind: str, settings: tuple[tuple[str, str], ...]) -> tuple[tuple[str, bytes | None], ...]:
    # Planned once per module: the run and the undo test replay the same node plan of each style.
    if kind == "node":
        plan = node_plan(dict(settings))
        return tuple((command, plan.uploads.get(index)) for index, (_, command) in enumerate(plan.timeline))
    return tuple(cluster_plan(dict(settings), kind))


# --- running them --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    return build_template(tmp_path_factory.mktemp("sandbox") / "template")


def replay(plan: list[tuple[str, bytes | None]], box: Sandbox) -> None:
    for ran in box.replay(plan):
        assert not ran.syntax_error, (ran.syntax_error, ran.step)
    if box.exists(LINKS_SCRIPT):  # udev's run of the /dev/char script, on one device node
        box.run(LINKS_SCRIPT)


def seed_devices(box: Sandbox, driver_root: str) -> None:
    """A GPU's device node under the driver root, for the /dev/char script to link."""
    import os

    folder = box.root / driver_root.lstrip("/") / "dev"
    folder.mkdir(parents=True, exist_ok=True)
    os.mknod(folder / "nvidia0", 0o20666, os.makedev(195, 0))


@pytest.fixture(scope="module")
def plain_run(template, tmp_path_factory):
    """The plan of a kind with the plain values of the settings named, replayed: once per module."""
    boxes: dict[tuple[str, frozenset], Sandbox] = {}

    def replayed(kind: str, names) -> Sandbox:
        key = (kind, frozenset(names))
        if key not in boxes:
            plain = {name: plain_value(name) for name in names}
            box = Sandbox.clone(template, tmp_path_factory.mktemp("plain") / kind)
            seed_devices(box, plain.get("nvidia_driver_root", "/"))
            replay(steps(plain, kind), box)
            boxes[key] = box
        return boxes[key]

    return replayed


# Each kind of plan with each style some of its settings take (the styles all refuse are refused above)
RUNS = [(kind, style) for kind in KINDS for style in STYLES if hostile_settings(kind, style)]


@pytest.mark.parametrize("kind, style", RUNS)
def test_hostile_values_run_as_the_plain_values_would(kind, style, template, plain_run, tmp_path):
    settings = hostile_settings(kind, style)
    box = Sandbox.clone(template, tmp_path / "hostile")
    seed_devices(box, settings.get("nvidia_driver_root", "/"))
    replay(steps(settings, kind), box)
    plain = plain_run(kind, settings)
    assert not [path for path, _ in box.tree() if path.rsplit("/", 1)[-1] == PWNED], f"the payload of {settings} ran"
    if kind not in FOLLOWS_HOSTILE_PATHS:
        return
    assert [run.status for run in box.runs] == [run.status for run in plain.runs]
    if kind == "node":  # the driver root's files went where the plain ones go
        assert {REFRESH_ENV, "/dev/char/195:0"} <= {path for path, _ in plain.tree()}
    # what the hostile run wrote, each value read as its plain value, is what the plain run wrote
    written = without_the_way_to(box.tree(), [value for value in settings.values() if value.startswith("/")])
    for name, value in sorted(settings.items(), key=lambda item: -len(item[1])):
        folds = [(value, plain_value(name))]
        if value.startswith("/"):  # a file beside the value's own (a staging folder) is named after its folder
            folds.append((posixpath.dirname(value), posixpath.dirname(plain_value(name))))
        for hostile, plain_text in folds:
            written = {tuple(text.replace(hostile, plain_text) for text in entry) for entry in written}
    assert written == without_the_way_to(
        plain.tree(), [plain_value(name) for name in settings if plain_value(name).startswith("/")]
    )


def deployed_then_undone(settings: dict[str, str], box: Sandbox) -> Sandbox:
    """The node plan replayed, then the undo run's plan made from the records it left there (read by
    the undo's own fact in the root) with the same settings, replayed after it."""
    replay(steps(settings, "node"), box)
    # The runtimes' swaps roll back in the root (no systemctl to restart them): their configs at the
    # settings' paths are recorded and written as gpu-node's safe install does, for the undo to take back.
    for name, (unit, file_format, original, wired) in RUNTIME_CONFIGS.items():
        path = settings.get(name, plain_value(name))
        write(box, path, original)
        gpu_node_writes(box, path, wired, unit, file_format)
    _, undo = undo_steps(box, {**NODE_DATA, **settings, "undo_remove_packages": "true"})
    replay(undo, box)
    for name, (_, _, original, _) in RUNTIME_CONFIGS.items():
        assert read(box, settings.get(name, plain_value(name))) == original, name
    return box


RUNTIME_CONFIGS = {
    "containerd_config_path": ("containerd", "toml", ORIGINAL_TOML, WIRED_TOML),
    "docker_daemon_config_path": (
        "docker",
        "json",
        '{"log-driver": "journald"}\n',
        '{\n  "log-driver": "journald",\n  "default-runtime": "nvidia"\n}\n',
    ),
}


@pytest.fixture(scope="module")
def plain_undone(template, tmp_path_factory):
    """The node plan and the undo with the plain values of the settings named, replayed: once per module
    (the styles the node takes name the same settings)."""
    boxes: dict[frozenset, Sandbox] = {}

    def replayed(names) -> Sandbox:
        if frozenset(names) not in boxes:
            plain = {name: plain_value(name) for name in names}
            box = Sandbox.clone(template, tmp_path_factory.mktemp("plain-undone") / "root")
            seed_devices(box, plain.get("nvidia_driver_root", "/"))
            boxes[frozenset(names)] = deployed_then_undone(plain, box)
        return boxes[frozenset(names)]

    return replayed


@pytest.mark.parametrize("style", [style for kind, style in RUNS if kind == "node"])
def test_hostile_values_run_through_the_undo_as_the_plain_values_would(style, template, plain_undone, tmp_path):
    """The undo plan (deploy/undo.py) over what the node plan left: the paths it takes back come from
    the node's records, the settings from the run. No payload runs, and the hostile run leaves what the
    plain one leaves."""
    settings = hostile_settings("node", style)
    hostile = Sandbox.clone(template, tmp_path / "hostile")
    seed_devices(hostile, settings.get("nvidia_driver_root", "/"))
    deployed_then_undone(settings, hostile)
    plain = plain_undone(settings)
    assert not [path for path, _ in hostile.tree() if path.rsplit("/", 1)[-1] == PWNED], (
        f"the payload of {settings} ran"
    )
    assert [run.status for run in hostile.runs] == [run.status for run in plain.runs]
    assert not hostile.exists(REFRESH_ENV) and not plain.exists(REFRESH_ENV)  # the undo took its files back
    written = without_the_way_to(hostile.tree(), [value for value in settings.values() if value.startswith("/")])
    for name, value in sorted(settings.items(), key=lambda item: -len(item[1])):
        folds = [(value, plain_value(name))]
        if value.startswith("/"):
            folds.append((posixpath.dirname(value), posixpath.dirname(plain_value(name))))
        for hostile_text, plain_text in folds:
            written = {tuple(text.replace(hostile_text, plain_text) for text in entry) for entry in written}
    assert written == without_the_way_to(
        plain.tree(), [plain_value(name) for name in settings if plain_value(name).startswith("/")]
    )


def without_the_way_to(tree: set, values: list[str]) -> set:
    """``tree`` without the folders on the way to each path value (those are the value's own)."""
    on_the_way = {value[:index] for value in values for index in range(1, len(value)) if value[index] == "/"}
    return {entry for entry in tree if entry[0] not in on_the_way}


@pytest.mark.parametrize("name", [name for name in TEXT_SETTINGS if PLANS[name] == ("controller",)])
def test_report_paths_are_written_by_python_exactly_where_they_say(name, tmp_path, monkeypatch):
    """The controller's report files: no shell, no other program's parser, only Python's open."""
    monkeypatch.chdir(tmp_path)
    written = []
    for style in STYLES:
        value = hostile_value(name, style)
        if accepted(name, value):
            write_json_file(value, {"ok": True})
            written.append(value)
    assert written and all(json.loads(Path(value).read_text()) == {"ok": True} for value in written)
    assert not [path for path in tmp_path.rglob("*") if path.name == PWNED]


# --- manifests and files read back by their parsers ------------------------------------------------


def yaml_documents(text) -> list[dict]:
    try:
        return [document for document in yaml.safe_load_all(text) if isinstance(document, dict)]
    except yaml.YAMLError:  # a printf of something else than a manifest
        return []


def applied_documents(plan: list[tuple[str, bytes | None]]) -> list[dict]:
    """What the plan sends as YAML: manifests fed to kubectl and helm by printf, and every upload (staged
    under random names)."""
    documents = []
    for command, upload in plan:
        if upload is not None:
            documents += yaml_documents(upload)
            continue
        words = shlex.split(command) if "printf" in command else []
        if "printf" in words and len(words) > words.index("printf") + 2:
            documents += yaml_documents(words[words.index("printf") + 2])
    return documents


def values_in(tree) -> list[str]:
    if isinstance(tree, dict):
        return [text for item in tree.values() for text in values_in(item)]
    if isinstance(tree, list):
        return [text for item in tree for text in values_in(item)]
    return [str(tree)]


# Where a path setting lands in what the cluster is sent, as the YAML parser reads it back
IN_MANIFESTS = {"nvidia_driver_root": ("{value}",), "gpushare_scheduler_config_path": ("{value}", "--config={value}")}


@pytest.mark.parametrize("name", sorted(IN_MANIFESTS))
@pytest.mark.parametrize("suffix", [" #note", ": y", '\' "x" {a: [b]}', "\\x & *", "\n- z"[1:]])
def test_a_path_reaches_the_manifests_whole(name, suffix):
    value = plain_value(name) + suffix
    for kind in PLANS[name]:
        if kind == "node":
            continue
        sent = values_in(applied_documents(cluster_plan({name: value}, kind)))
        for shape in IN_MANIFESTS[name]:
            assert shape.format(value=value) in sent, (kind, shape)


# --- paths the node gives ---------------------------------------------------------------------------

NODE_FOLDER = f"/opt/it's $({PAYLOAD}); `{PAYLOAD}` x #y"


def node_read_paths(folder: str) -> list:
    """A node whose containerd, dockerd and nvidia-ctk live in ``folder`` (as `command -v` finds them)."""
    config = "version = 2\n"
    containerd = [
        f"binary_path {folder}/containerd",
        "version containerd github.com/containerd/containerd 1.7.24 x",
        f"config {base64.b64encode(config.encode()).decode()}",
    ]
    docker = f"dockerd {folder}/dockerd\nversion Docker version 26.1.5+dfsg1\nconfig e30="
    cdi = [f"ctk {folder}/nvidia-ctk", *CDI[1:]]
    return [(every(ContainerdConfig), containerd), (every(DockerState), docker), (every(CdiState), cdi)]


def node_paths_plan(folder: str) -> list[tuple[str, bytes | None]]:
    debian = node(
        "debian-12",
        node_survey=node_lines("6.1.0-18-amd64", pci=PCI_WITH_GPU),
        facts=[*DEBIAN_FILES, *node_read_paths(folder)],
    )
    plan = run_deploy(debian, data={**NODE_DATA, "stages": "runtimes"})
    return [(command, plan.uploads.get(index)) for index, (_, command) in enumerate(plan.timeline)]


def test_paths_the_node_gives_reach_its_commands_quoted(template, tmp_path):
    plain, hostile = Sandbox.clone(template, tmp_path / "plain"), Sandbox.clone(template, tmp_path / "hostile")
    plain_steps, hostile_steps = node_paths_plan("/usr/bin"), node_paths_plan(NODE_FOLDER)
    ran = [shlex.quote(f"{NODE_FOLDER}/{tool}") for tool in ("containerd", "nvidia-ctk")]
    assert all(any(word in command for command, _ in hostile_steps) for word in ran)  # the check and CDI ran them
    replay(plain_steps, plain)
    replay(hostile_steps, hostile)
    assert not [path for path, _ in hostile.tree() if path.rsplit("/", 1)[-1] == PWNED]
    assert [run.status for run in hostile.runs] == [run.status for run in plain.runs]
    assert hostile.tree() == plain.tree()
