"""
The undo run (deploy/undo.py), piece by piece. Where a piece changes files, it runs for real: the
records are written by gpu-node's own recording shell (deploy/node/records.py) or by a replayed
deploy plan in a scratch root (tests/shell_sandbox.py), the undo run reads them there with its own
fact's command (deploy/facts/records.py), its plan is made on pyinfra's @fake connector from that
answer, and replayed in the same root. The root has no systemctl, apt or rpm: a restart and a
package manager's commands are read from the plan, not run (the Debian e2e test runs them:
tests/e2e/test_undo_debian.py).
"""

from __future__ import annotations

import logging
import os
import shlex
from pathlib import Path

import pytest
from plan import DEFAULT, Node, every, host_access, os_release, run_deploy
from pyinfra.facts.server import Arch, LinuxDistribution
from shell_sandbox import Sandbox, build_template
from test_driver_plans import DEBIAN_FILES
from test_driver_plans import node as debian_node

from deploy.facts.access import HostAccess
from deploy.facts.packages import DebPackageStates
from deploy.facts.records import NodeRecords
from deploy.node import records as node_records
from deploy.operations import safe_install
from deploy.tasks import kernel as kernel_stage
from deploy.tasks.undo import OWN_FILES, records_read

REPO = Path(__file__).resolve().parents[2]
UNDO = str(REPO / "deploy" / "undo.py")
CONFIG = "/etc/containerd/config.toml"
DAEMON_JSON = "/etc/docker/daemon.json"

ORIGINAL_TOML = """# the site's containerd config
version = 2

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.9"
"""
WIRED_TOML = """# the site's containerd config
version = 2

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.9"

[plugins."io.containerd.grpc.v1.cri".containerd]
  default_runtime_name = "nvidia"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]
  runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]
  BinaryName = "/usr/bin/nvidia-container-runtime"
  SystemdCgroup = true
"""


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    return build_template(tmp_path_factory.mktemp("sandbox") / "template")


@pytest.fixture
def box(template, tmp_path) -> Sandbox:
    return Sandbox.clone(template, tmp_path / "root")


def write(box: Sandbox, path: str, text: str, mode: int = 0o644) -> None:
    target = box.root / path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    target.chmod(mode)


def read(box: Sandbox, path: str) -> str:
    return (box.root / path.lstrip("/")).read_text()


def gpu_node_writes(box: Sandbox, path: str, text: str, unit: str = "", file_format: str = "") -> None:
    """What gpu-node's safe install does around its write: the record before, the copy of what it wrote after."""
    quoted = shlex.quote(path)
    ran = box.run(
        f"{node_records.record_file(quoted, unit, file_format)} || exit 1\n"
        f'mkdir -p "$(dirname {quoted})" && printf %s {shlex.quote(text)} > {quoted}\n'
        f"{node_records.wrote_file(quoted)}"
    )
    assert ran.status == 0, ran.stderr


def records_answer(box: Sandbox) -> list[str]:
    """The undo fact's command run in the root: what it prints there."""
    return box.output(NodeRecords().command(own_files=list(OWN_FILES))).splitlines()


def undo_node(answer: list[str], distro: str = "debian-12", facts=()) -> Node:
    return Node(
        facts=[
            (HostAccess, host_access(distro)),
            (LinuxDistribution, os_release(distro)),
            (Arch, "x86_64"),
            (records_read(), answer),
            *facts,
        ],
        unstated=DEFAULT,
    )


def undo_plan(node: Node, data: dict | None = None):
    return run_deploy(node, data={**(data or {})}, deploy_file=UNDO)


def undo_steps(box: Sandbox, data: dict | None = None, facts=()):
    """The undo run planned from the root's records: (plan, its steps to replay)."""
    plan = undo_plan(undo_node(records_answer(box), facts=facts), data)
    assert not plan.failed, plan.refusal
    return plan, [(command, plan.uploads.get(index)) for index, (_, command) in enumerate(plan.timeline)]


def replay_undo(box: Sandbox, data: dict | None = None, facts=(), caplog=None):
    """The undo run planned from the root's records, then replayed there; (plan, lines it said)."""
    if caplog is not None:
        caplog.clear()
    plan, steps = undo_steps(box, data, facts)
    for ran in box.replay(steps):
        assert not ran.syntax_error, (ran.syntax_error, ran.step)
    said = [record.getMessage() for record in caplog.records if "undo: " in record.getMessage()] if caplog else []
    return plan, said


def replay_undo_answer(box: Sandbox, answer: list[str]):
    """The undo run planned from ``answer`` (the records' answer, edited where the root cannot say
    what systemctl would), then replayed in the root; (plan, its commands)."""
    plan = undo_plan(undo_node(answer))
    assert not plan.failed, plan.refusal
    steps = [(command, plan.uploads.get(index)) for index, (_, command) in enumerate(plan.timeline)]
    for ran in box.replay(steps):
        assert not ran.syntax_error, (ran.syntax_error, ran.step)
    return plan, plan.commands


def changing_commands(plan) -> list[str]:
    """The commands of the plan that are no fact read (the undo's one combined read aside)."""
    return [
        command
        for command in plan.commands
        if "records=" not in command
        and "uid" not in command
        and not command.startswith(("sh -c 'command -v", "cat /etc/os-release", "uname"))
    ]


def stat(box: Sandbox, path: str) -> str:
    info = os.stat(box.root / path.lstrip("/"))
    return f"{info.st_mode & 0o7777:o} {info.st_uid}:{info.st_gid}"


def tree_outside_records(box: Sandbox) -> set:
    return {entry for entry in box.tree() if not entry[0].startswith(node_records.RECORDS_DIR)}


# --- files ----------------------------------------------------------------------------------------


def test_a_runtime_config_as_gpu_node_left_it_is_restored_byte_for_byte_with_its_mode(box, caplog):
    caplog.set_level(logging.INFO)
    write(box, CONFIG, ORIGINAL_TOML, 0o600)
    gpu_node_writes(box, CONFIG, WIRED_TOML, unit="containerd", file_format="toml")
    assert read(box, CONFIG) == WIRED_TOML

    plan, said = replay_undo(box, caplog=caplog)
    assert read(box, CONFIG) == ORIGINAL_TOML
    assert stat(box, CONFIG) == "600 0:0"
    assert [line for line in said if CONFIG in line] == [
        f"[@fake/node] undo: {CONFIG}: restored byte for byte as it was before gpu-node (mode and owner 600 0:0): "
        "it is as gpu-node last wrote it"
    ]
    # its unit is restarted through the safe install, when it is active (here no systemctl: it is not)
    assert plan.matching("unit=containerd")
    assert not box.exists(node_records.RECORDS_DIR)


def test_a_runtime_config_someone_changed_since_loses_only_the_values_gpu_node_set(box, caplog):
    caplog.set_level(logging.INFO)
    write(box, CONFIG, ORIGINAL_TOML)
    gpu_node_writes(box, CONFIG, WIRED_TOML, unit="containerd", file_format="toml")
    site = '\n[plugins."io.containerd.grpc.v1.cri".registry]\n  # the site\'s own\n  config_path = "/etc/containerd/certs.d"\n'
    write(box, CONFIG, WIRED_TOML.replace("version = 2\n", "version = 2\noom_score = -999\n") + site)

    _, said = replay_undo(box, caplog=caplog)
    assert read(box, CONFIG) == ORIGINAL_TOML.replace("version = 2\n", "version = 2\noom_score = -999\n") + site
    (line,) = [line for line in said if CONFIG in line]
    assert "changed since gpu-node last wrote it: the values gpu-node set taken back out" in line
    assert "every other edit kept" in line


def test_the_safe_install_records_a_live_config_before_its_own_backup_so_the_undo_restores_it(box, caplog):
    """The node run's swap of a runtime config that was there (deploy/operations/safe_install.py, run
    for real): its record holds the file before it, not marked as changed by an earlier gpu-node (the
    swap's own backup is made after the record), and the undo restores it."""
    caplog.set_level(logging.INFO)
    write(box, CONFIG, ORIGINAL_TOML)
    write(box, safe_install.candidate_path(CONFIG), WIRED_TOML)
    swap = box.run(
        safe_install.install_script(
            CONFIG, None, None, 30, record=safe_install.FileRecord(unit="containerd", format=node_records.TOML)
        )
    )
    assert swap.status == 0, swap.stderr
    assert read(box, CONFIG) == WIRED_TOML
    record = node_records.file_record(CONFIG)
    assert read(box, f"{record}/{node_records.ORIGINAL}") == ORIGINAL_TOML
    assert not box.exists(f"{record}/{node_records.EARLIER}")

    replay_undo(box, caplog=caplog)
    assert read(box, CONFIG) == ORIGINAL_TOML


def test_a_changed_config_whose_site_comment_would_go_with_gpu_node_s_table_is_left_byte_for_byte(box, caplog):
    """tomlkit keeps a comment with the table above it: a site's comment under gpu-node's last table
    would go with it, so the file is left as it is, in one line."""
    caplog.set_level(logging.INFO)
    write(box, CONFIG, ORIGINAL_TOML)
    gpu_node_writes(box, CONFIG, WIRED_TOML, unit="containerd", file_format="toml")
    edited = (
        WIRED_TOML
        + '\n# the site\'s mirrors\n[plugins."io.containerd.grpc.v1.cri".registry]\n  config_path = "/etc/containerd/certs.d"\n'
    )
    write(box, CONFIG, edited)

    _, said = replay_undo(box, caplog=caplog)
    assert read(box, CONFIG) == edited
    (line,) = [line for line in said if CONFIG in line]
    assert "left as it is" in line and "a comment someone added would go" in line, line


def test_a_daemon_json_gpu_node_created_and_someone_edited_keeps_the_edit_without_the_wiring(box, caplog):
    caplog.set_level(logging.INFO)
    wired = '{\n  "default-runtime": "nvidia",\n  "runtimes": {\n    "nvidia": {\n      "path": "nvidia-container-runtime"\n    }\n  }\n}\n'
    gpu_node_writes(box, DAEMON_JSON, wired, unit="docker", file_format="json")
    write(
        box, DAEMON_JSON, wired.replace('{\n  "default-runtime"', '{\n  "log-driver": "journald",\n  "default-runtime"')
    )

    _, said = replay_undo(box, caplog=caplog)
    assert read(box, DAEMON_JSON).replace(" ", "").replace("\n", "") == '{"log-driver":"journald"}'
    assert [line for line in said if DAEMON_JSON in line and "taken back out" in line]


def test_a_file_changed_since_that_is_no_runtime_config_is_left_byte_for_byte_with_one_line(box, caplog):
    caplog.set_level(logging.INFO)
    path = kernel_stage.SYSCTL_PATH
    write(box, path, "net.ipv4.ip_forward = 0\n")
    gpu_node_writes(box, path, "net.ipv4.ip_forward = 1\n")
    write(box, path, "net.ipv4.ip_forward = 1\n# the site's\n")

    plan, said = replay_undo(box, caplog=caplog)
    assert read(box, path) == "net.ipv4.ip_forward = 1\n# the site's\n"
    (line,) = [line for line in said if path in line]
    assert "left as it is: changed since gpu-node last wrote it" in line and "its original is kept at" in line
    # the original stays where the line says; the rest of the records go
    kept = line.rsplit("kept at ", 1)[1]
    assert read(box, kept) == "net.ipv4.ip_forward = 0\n"
    # a second undo changes nothing and says the same
    again, said_again = replay_undo(box, caplog=caplog)
    assert [entry for entry in said_again if path in entry] == [line]
    assert read(box, kept) == "net.ipv4.ip_forward = 0\n"


def test_a_file_gpu_node_0_1_changed_before_it_kept_records_is_left_byte_for_byte_naming_its_oldest_backup(box, caplog):
    """A backup of gpu-node's beside the file at its first record: a run of gpu-node 0.1 changed it, so
    the record's "original" is not the file before gpu-node."""
    caplog.set_level(logging.INFO)
    write(box, CONFIG + ".gpu-node-backup-20250101T000000", ORIGINAL_TOML, 0o600)
    write(box, CONFIG, WIRED_TOML)
    gpu_node_writes(box, CONFIG, WIRED_TOML + "# again\n", unit="containerd", file_format="toml")

    plan, said = replay_undo(box, caplog=caplog)
    assert read(box, CONFIG) == WIRED_TOML + "# again\n"
    (line,) = [line for line in said if CONFIG in line]
    assert "left as it is: gpu-node changed it before it kept records" in line
    assert line.endswith(f"its oldest backup is {CONFIG}.gpu-node-backup-20250101T000000")
    assert read(box, CONFIG + ".gpu-node-backup-20250101T000000") == ORIGINAL_TOML


def test_gpu_node_s_own_files_from_a_replayed_kernel_stage_are_removed_and_the_initramfs_rebuilt(box, caplog):
    """The kernel stage's plan replayed (its own files and their records), then the undo: the root is
    as before the deploy, and the initramfs is rebuilt because the nouveau blacklist went."""
    caplog.set_level(logging.INFO)
    for folder in ("/etc/modprobe.d", "/etc/sysctl.d", "/etc/modules-load.d", "/var/lib"):  # a node's own folders
        (box.root / folder.lstrip("/")).mkdir(parents=True, exist_ok=True)
    before = box.tree()
    deploy = run_deploy(debian_node("debian-12", facts=DEBIAN_FILES), data={"stages": "kernel"})
    steps = [(command, deploy.uploads.get(index)) for index, (_, command) in enumerate(deploy.timeline)]
    box.replay(steps)
    for path in (kernel_stage.MODULES_LOAD_PATH, kernel_stage.SYSCTL_PATH, kernel_stage.BLACKLIST_PATH):
        assert box.exists(path), path

    plan, said = replay_undo(box, caplog=caplog)
    for path in (kernel_stage.MODULES_LOAD_PATH, kernel_stage.SYSCTL_PATH, kernel_stage.BLACKLIST_PATH):
        assert not box.exists(path), path
        assert [line for line in said if f"{path}: removed: gpu-node created it" in line], said
    assert plan.matching("update-initramfs")
    assert box.tree() == before


def test_own_files_from_a_run_before_records_are_known_by_their_first_line_and_removed(box, caplog):
    caplog.set_level(logging.INFO)
    write(
        box, kernel_stage.SYSCTL_PATH, "# Managed by gpu-node (deploy/tasks/kernel.py); local edits are overwritten.\n"
    )
    write(box, kernel_stage.MODULES_LOAD_PATH, "overlay\n")  # not gpu-node's header: someone's own
    _, said = replay_undo(box, caplog=caplog)
    assert not box.exists(kernel_stage.SYSCTL_PATH)
    assert read(box, kernel_stage.MODULES_LOAD_PATH) == "overlay\n"
    assert [line for line in said if "its first line says so" in line]


# --- the records folder: root's alone, or refused -----------------------------------------------------

RECORDS = node_records.RECORDS_DIR
REFUSED_TAIL = "gpu-node keeps its records only in a folder root alone owns and writes; move it away"


def records_folder(box: Sandbox, kind: str) -> None:
    """The records folder as someone left it before gpu-node's first record: another user's, root's
    but writable by others, a link to root's own folder, or root's with its files folder another's."""
    folder = box.root / RECORDS.lstrip("/")
    if kind == "link":
        (box.root / "srv" / "records").mkdir(parents=True, mode=0o700)
        folder.parent.mkdir(parents=True, exist_ok=True)
        folder.symlink_to("/srv/records")
        return
    folder.mkdir(parents=True)
    folder.chmod({"other-user": 0o700, "others-write": 0o777, "group-writes": 0o770, "files-other-user": 0o700}[kind])
    if kind == "other-user":
        os.chown(folder, 4242, 4242)
    if kind == "files-other-user":
        (folder / "files").mkdir(mode=0o700)
        os.chown(folder / "files", 4242, 4242)


@pytest.mark.parametrize(
    "kind, line",
    [
        ("other-user", f"gpu-node: {RECORDS} is owned by uid 4242, not root: {REFUSED_TAIL}"),
        ("others-write", f"gpu-node: {RECORDS} is writable by its group or others (mode 777): {REFUSED_TAIL}"),
        ("group-writes", f"gpu-node: {RECORDS} is writable by its group or others (mode 770): {REFUSED_TAIL}"),
        ("link", f"gpu-node: {RECORDS} is not a folder (a symbolic link or another kind): {REFUSED_TAIL}"),
        ("files-other-user", f"gpu-node: {RECORDS}/files is owned by uid 4242, not root: {REFUSED_TAIL}"),
    ],
)
def test_a_records_folder_someone_else_may_write_is_refused_by_the_recording_and_the_file_is_not_changed(
    box, kind, line
):
    """Refused, not taken over (a chown would make what they planted root's): the record fails in one
    line naming the folder, so the change it guards does not happen, and the folder is left as it was."""
    write(box, CONFIG, ORIGINAL_TOML)
    records_folder(box, kind)
    before = box.tree(), stat(box, RECORDS) if kind != "link" else None
    quoted = shlex.quote(CONFIG)
    ran = box.run(
        f"{node_records.record_file(quoted, 'containerd', 'toml')} || exit 1\n"
        f"printf %s {shlex.quote(WIRED_TOML)} > {quoted}"
    )
    assert ran.status == 1 and ran.stderr.splitlines() == [line], ran.stderr
    assert read(box, CONFIG) == ORIGINAL_TOML
    assert (box.tree(), stat(box, RECORDS) if kind != "link" else None) == before


def test_a_records_folder_root_owns_and_alone_may_write_is_kept_and_made_0700(box):
    (box.root / RECORDS.lstrip("/")).mkdir(parents=True, mode=0o755)
    gpu_node_writes(box, CONFIG, WIRED_TOML, unit="containerd", file_format="toml")
    assert stat(box, RECORDS) == "700 0:0" and stat(box, node_records.FILES_DIR) == "700 0:0"


@pytest.mark.parametrize(
    "change, line",
    [
        ("chown -R 4242:4242", f"{RECORDS} is owned by uid 4242 with mode 700"),
        ("chmod 755", f"{RECORDS} is owned by uid 0 with mode 755"),
        ("link", f"{RECORDS} is a symbolic link"),
    ],
)
def test_the_undo_acts_only_on_records_in_a_root_owned_0700_folder(box, change, line):
    """Records gpu-node wrote, then the folder given to another user, opened to others, or replaced by a
    link to it: the undo refuses the host in one line, reads nothing inside and changes nothing."""
    write(box, CONFIG, ORIGINAL_TOML)
    gpu_node_writes(box, CONFIG, WIRED_TOML, unit="containerd", file_format="toml")
    if change == "link":
        box.output(f"mv {RECORDS} /srv-records && ln -s /srv-records {RECORDS}")
    else:
        box.output(f"{change} {RECORDS}")
    answer = records_answer(box)
    assert not [entry for entry in answer if entry.startswith("file ")], answer
    plan = undo_plan(undo_node(answer))
    assert plan.failed
    assert plan.refusal == (
        f"{line}: the undo acts only on records in a folder root owns with mode 0700 (another "
        "user could have written these); nothing changed"
    )
    assert changing_commands(plan) == []
    assert read(box, CONFIG) == WIRED_TOML


# --- idempotence ----------------------------------------------------------------------------------


def test_the_undo_refuses_a_node_it_cannot_work_on_before_any_change(box):
    """Records gpu-node wrote, read by a login that is not root: the undo refuses the host in the one
    line preflight gives, and changes nothing."""
    write(box, CONFIG, ORIGINAL_TOML)
    gpu_node_writes(box, CONFIG, WIRED_TOML, unit="containerd", file_format="toml")
    not_root = ["uid 1000", "user ubuntu", "kernel Linux", "systemd", "init systemd", "manager apt"]
    plan = undo_plan(undo_node(records_answer(box), facts=[(HostAccess, not_root)]))
    assert plan.refusal.startswith("commands run as ubuntu (uid 1000), not as root"), plan.refusal
    assert plan.op_names() == ["Refuse this host (undo)"]
    assert changing_commands(plan) == []


def test_a_file_changed_after_the_undo_read_it_is_left_as_it_is_in_one_line(box):
    """The undo planned from what it read, then the file edited before its put-back runs: the put-back
    stops in one line naming the file, and the edit stays."""
    write(box, CONFIG, ORIGINAL_TOML)
    gpu_node_writes(box, CONFIG, WIRED_TOML, unit="containerd", file_format="toml")
    _, steps = undo_steps(box)
    edited = WIRED_TOML + "# edited while the undo ran\n"
    write(box, CONFIG, edited)
    # the put-back: the original copied from its record beside the file, then swapped in
    put_back = [(command, upload) for command, upload in steps if CONFIG in command and "/original" in command]
    (ran,) = box.replay(put_back)
    assert ran.status != 0
    assert (
        ran.stderr.strip().splitlines()[-1].endswith(f"{CONFIG} changed while the undo ran: not changed; run it again")
    )
    assert read(box, CONFIG) == edited


def test_a_node_gpu_node_never_changed_gets_no_command(box, caplog):
    caplog.set_level(logging.INFO)
    write(box, CONFIG, ORIGINAL_TOML)
    before = {(path, kind) for path, kind in box.tree()}
    plan, said = replay_undo(box, caplog=caplog)
    assert changing_commands(plan) == [], changing_commands(plan)
    assert said == ["[@fake/node] undo: no records of gpu-node on this node: nothing to take back off"]
    assert box.tree() == before and read(box, CONFIG) == ORIGINAL_TOML


def test_a_second_undo_changes_nothing(box, caplog):
    caplog.set_level(logging.INFO)
    write(box, CONFIG, ORIGINAL_TOML)
    gpu_node_writes(box, CONFIG, WIRED_TOML, unit="containerd", file_format="toml")
    gpu_node_writes(box, kernel_stage.SYSCTL_PATH, "net.ipv4.ip_forward = 1\n")
    replay_undo(box, caplog=caplog)
    after_first = box.tree()
    plan, _ = replay_undo(box, caplog=caplog)
    assert changing_commands(plan) == []
    assert box.tree() == after_first


# --- holds, packages, units -----------------------------------------------------------------------


def records(*lines: str) -> list[str]:
    return [f"records {node_records.ROOT_ALONE}", *lines]


HELD = records("held nvidia-container-toolkit", "held nvidia-container-toolkit-base")


def test_apt_holds_gpu_node_placed_are_released_and_only_those_still_held():
    states = (
        every(DebPackageStates),
        [
            "nvidia-container-toolkit 1.17.8-1 hold ok installed",
            "nvidia-container-toolkit-base 1.17.8-1 install ok installed",
        ],
    )
    plan = undo_plan(undo_node(HELD, facts=[states]))
    assert plan.matching("apt-mark unhold") == ["apt-mark unhold nvidia-container-toolkit"]


def test_the_keys_gpu_node_imported_into_rpms_database_are_taken_back_out_and_only_those():
    plan = undo_plan(undo_node(records("rpm_key gpg-pubkey-f796ecb0-6412f5e3"), distro="rocky-9"))
    assert not plan.failed, plan.refusal
    (removal,) = plan.matching("rpm -e")
    assert removal.startswith("for key in gpg-pubkey-f796ecb0-6412f5e3; do if rpm -q")
    assert plan.op_names() == [
        "Take gpu-node back off | Take the keys gpu-node imported out of rpm's database",
        "Take gpu-node back off | Remove gpu-node's records",
    ]


# Each family's fact of its holds, on a node where gpu-node's hold of the toolkit is still there and
# that of its base package is gone
@pytest.mark.parametrize(
    "distro, answer, released",
    [
        (
            "rocky-9",
            [
                "installed nvidia-container-toolkit 1.17.8-1",
                "installed nvidia-container-toolkit-base 1.17.8-1",
                "lock nvidia-container-toolkit-0:1.17.8-1.*",
            ],
            "dnf versionlock delete nvidia-container-toolkit",
        ),
        (
            "opensuse-leap-15.6",
            ["type: package", "solvable_name: nvidia-container-toolkit"],
            "zypper --non-interactive removelock nvidia-container-toolkit",
        ),
        ("arch", ["nvidia-container-toolkit"], "IgnorePkg"),
    ],
)
def test_holds_gpu_node_placed_are_released_on_every_family(distro, answer, released):
    from deploy.facts.nvidia import IgnoredPackages
    from deploy.facts.packages import RpmPackageStates, ZypperLocks

    fact = {"rocky-9": RpmPackageStates, "opensuse-leap-15.6": ZypperLocks, "arch": IgnoredPackages}[distro]
    plan = undo_plan(undo_node(HELD, distro=distro, facts=[(every(fact), answer)]))
    assert plan.matching(released), plan.commands
    releases = [command for command in plan.commands if released.split()[0] in command and "rpm -q" not in command]
    assert not [command for command in releases if "nvidia-container-toolkit-base" in command], (
        "a hold no longer there is not released again"
    )


INSTALLED = records("installed nvidia-container-toolkit", "installed nvidia-container-toolkit-base")


def test_packages_gpu_node_installed_stay_unless_undo_remove_packages(caplog):
    caplog.set_level(logging.INFO)
    from pyinfra.facts.deb import DebPackages

    installed = (
        DebPackages,
        ["ii  nvidia-container-toolkit  1.17.8-1  amd64  x", "ii  nvidia-container-toolkit-base  1.17.8-1  amd64  x"],
    )
    kept = undo_plan(undo_node(INSTALLED, facts=[installed]))
    assert not kept.matching("purge")
    assert [record for record in caplog.records if "the packages gpu-node installed stay" in record.getMessage()]
    removed = undo_plan(undo_node(INSTALLED, facts=[installed]), data={"undo_remove_packages": "true"})
    (purge,) = removed.matching("apt-get -y")
    assert purge.endswith("purge nvidia-container-toolkit nvidia-container-toolkit-base")
    # what apt would take with them, that gpu-node did not install, stops it in one line
    assert "which gpu-node did not install" in purge


def test_a_unit_gpu_node_enabled_goes_back_to_its_state_before():
    answer = records(
        "unit_record nvidia-cdi-refresh.path disabled inactive",
        "unit_now nvidia-cdi-refresh.path enabled active",
        "unit_record nvidia-persistenced.service enabled active",
        "unit_now nvidia-persistenced.service enabled active",
        # not there before: it came with a package gpu-node installed, and goes with it
        "unit_record nvidia-fabricmanager.service not-found inactive",
        "unit_now nvidia-fabricmanager.service enabled active",
    )
    plan = undo_plan(undo_node(answer))
    assert plan.starting("systemctl") == [
        "systemctl disable nvidia-cdi-refresh.path",
        "systemctl stop nvidia-cdi-refresh.path",
    ]


# The units gpu-node writes itself: the first-boot unit and its target (deploy/tasks/boot.py, recorded
# after its files were written: "disabled"), the health check's timer (deploy/tasks/health.py, the same)
# and pull mode's timer and service (deploy/node/pull_install.py, recorded before: "not-found").
OWN_UNITS = {
    "gpu-node-boot.service": "disabled inactive",
    "gpu-node-ready.target": "disabled inactive",
    "gpu-node-health.timer": "disabled inactive",
    "gpu-node-pull.timer": "not-found inactive",
}


def test_units_gpu_node_created_are_disabled_before_their_files_go_and_a_timer_is_stopped(box):
    """Their enablement links go with them (each unit's file is gpu-node's: nothing was there before,
    whatever systemctl said when it was recorded), disabled while the file is still there for
    systemctl to read; the timer is stopped so it does not fire again; the finished one-shot service
    and its target are left active (stopping the target would stop what a site made require it)."""
    for unit in (*OWN_UNITS, "gpu-node-pull.service", "gpu-node-health.service"):
        gpu_node_writes(box, f"/etc/systemd/system/{unit}", f"# Managed by gpu-node\n[Unit]\nDescription={unit}\n")
    assert box.run(node_records.record_units(OWN_UNITS)).status == 0
    answer = []
    for line in records_answer(box):
        kind, _, rest = line.partition(" ")
        unit = rest.split(" ")[0]
        if kind == "unit_record":
            line = f"unit_record {unit} {OWN_UNITS[unit]}"
        elif kind == "unit_now":  # the sandbox has no systemctl: the node's answer after the run
            line = f"unit_now {unit} enabled active"
        answer.append(line)
    plan = undo_plan(undo_node(answer))
    assert not plan.failed, plan.refusal
    systemctl = plan.starting("systemctl")
    assert systemctl == [
        "systemctl disable gpu-node-boot.service",
        "systemctl disable gpu-node-health.timer",
        "systemctl stop gpu-node-health.timer",
        "systemctl disable gpu-node-pull.timer",
        "systemctl stop gpu-node-pull.timer",
        "systemctl disable gpu-node-ready.target",
        "systemctl daemon-reload",
    ], plan.commands
    commands = plan.commands
    for unit in OWN_UNITS:
        (removal,) = [
            index
            for index, command in enumerate(commands)
            if f"/etc/systemd/system/{unit}" in command and not command.startswith("systemctl")
        ]
        assert commands.index(f"systemctl disable {unit}") < removal
        assert removal < commands.index("systemctl daemon-reload")
    for service in ("gpu-node-pull.service", "gpu-node-health.service"):  # not enabled: their files go
        assert [
            command
            for command in commands
            if f"/etc/systemd/system/{service}" in command and not command.startswith("systemctl")
        ], service


def test_pull_modes_units_as_pull_install_records_them_are_taken_off_by_the_undo(box):
    """deploy/node/pull_install.py's own recording shell run in the root around its writes: the undo stops
    and disables the timer, then removes both unit files."""
    from deploy.node import pull_install

    texts = pull_install.unit_texts("/opt/gpu-node/bin/python", "/opt/gpu-node/lib/gpu_node/pull.py")
    paths = [f"{pull_install.UNIT_DIR}/{name}" for name in texts]
    assert box.run(pull_install.records_before(paths)).status == 0
    for path, text in zip(paths, texts.values()):
        write(box, path, text)
    assert box.run(pull_install.records_after(paths)).status == 0
    answer = [
        f"unit_now {pull_install.TIMER} enabled active" if line.startswith("unit_now ") else line
        for line in records_answer(box)
    ]
    assert f"unit_record {pull_install.TIMER} not-found inactive" in answer
    plan, _ = replay_undo_answer(box, answer)
    assert plan.starting("systemctl") == [
        f"systemctl disable {pull_install.TIMER}",
        f"systemctl stop {pull_install.TIMER}",
        "systemctl daemon-reload",
    ]
    assert not any((box.root / path.lstrip("/")).exists() for path in paths)


# --- what module signing put on the node (deploy/tasks/module_signing.py) ----------------------------

DKMS_CONFIG = "/etc/dkms/framework.conf.d/gpu-node-module-signing.conf"
# A stand-in for openssl (the root has none): writes the key and the certificate where the key script
# asks, so the script's own folder, umask and renames run for real.
STAND_IN_OPENSSL = """#!/bin/sh
while [ $# -gt 0 ]; do
  case $1 in -keyout) key=$2 ;; -out) cert=$2 ;; esac
  shift
done
echo stand-in-private-key > "$key" && echo stand-in-certificate > "$cert"
"""


# Debian's DKMS driver, as its driver plan installs it (deploy/distros/families.py)
DKMS_DRIVER = ("nvidia-driver", "nvidia-kernel-dkms", "dkms")


def gpu_node_installed(box: Sandbox, *names: str) -> None:
    """The record gpu-node keeps of the packages its install added (deploy/node/records.py), written by
    its recording shell (the root has no package manager to install them)."""
    ran = box.run(f"{node_records.LIBRARY}gn_record_names installed-packages {shlex.join(names)}")
    assert ran.status == 0, ran.stderr


def signed_driver_stage(box: Sandbox) -> None:
    """The signing steps of a Secure Boot Debian node's driver stage, replayed in the root (openssl a
    stand-in): the key generated under gpu-node's folder, DKMS's drop-in written and recorded."""
    from test_module_signing import debian

    from deploy.driver.signing import GENERATED_FOLDER

    write(box, "/usr/bin/openssl", STAND_IN_OPENSSL, 0o755)
    (box.root / "var/lib").mkdir(parents=True, exist_ok=True)
    run = debian(stages="driver")
    steps = []
    for index, (_, command) in enumerate(run.timeline):
        if (GENERATED_FOLDER in command and "openssl req" in command) or (
            "/etc/dkms/" in command and not command.startswith("upload ")
        ):
            if index and run.timeline[index - 1][1].startswith("upload "):
                steps.append((run.timeline[index - 1][1], run.uploads[index - 1]))
            steps.append((command, None))
    for ran in box.replay(steps):
        assert ran.status == 0, (ran.step, ran.stderr)
    assert box.exists(DKMS_CONFIG) and box.exists(f"{GENERATED_FOLDER}/signing.key")


def test_with_the_driver_staying_the_dkms_signing_drop_in_and_key_stay_in_one_line_stand_in_openssl(box, caplog):
    """undo_remove_packages=false: the driver stays and DKMS rebuilds its module for every new kernel,
    so the drop-in naming the key and the key stay (without them the next kernel's module would be
    unsigned, and refused under Secure Boot); one line names them and how to remove them. The
    signing steps are replayed with a stand-in openssl."""
    from deploy.driver.signing import GENERATED_CERT, GENERATED_FOLDER, GENERATED_KEY

    caplog.set_level(logging.INFO)
    signed_driver_stage(box)
    drop_in = read(box, DKMS_CONFIG)

    _, said = replay_undo(box, caplog=caplog)
    assert read(box, DKMS_CONFIG) == drop_in
    assert read(box, GENERATED_KEY) == "stand-in-private-key\n"
    assert (stat(box, GENERATED_KEY), stat(box, GENERATED_FOLDER)) == ("600 0:0", "700 0:0")
    assert box.exists(GENERATED_CERT)
    (line,) = [line for line in said if DKMS_CONFIG in line or GENERATED_KEY in line]
    assert line.startswith(f"[@fake/node] undo: {DKMS_CONFIG}: left as it is, with the module signing key")
    assert "undo_remove_packages=false" in line and f"rm {DKMS_CONFIG} {GENERATED_KEY} {GENERATED_CERT}" in line
    assert not [entry for entry in said if "stand-in-private-key" in entry]

    # a later undo keeps them and says the same; so does one with undo_remove_packages=true: the first
    # undo forgot the packages gpu-node installed (they stayed), so the driver stays with this one too
    _, again = replay_undo(box, caplog=caplog)
    assert [entry for entry in again if DKMS_CONFIG in entry] == [line]
    replay_undo(box, data={"undo_remove_packages": "true"}, caplog=caplog)
    assert read(box, DKMS_CONFIG) == drop_in and box.exists(GENERATED_KEY)


def test_with_the_packages_removed_the_drop_in_goes_and_the_key_stays_in_one_line_stand_in_openssl(box, caplog):
    """undo_remove_packages=true: the drop-in goes with gpu-node's other files; the key and its
    certificate stay (the firmware may trust the certificate: removing the files would not un-enroll
    it), one line saying so and naming mokutil --delete. A second undo changes nothing. The signing
    steps are replayed with a stand-in openssl."""
    from deploy.driver.signing import GENERATED_CERT, GENERATED_FOLDER, GENERATED_KEY

    caplog.set_level(logging.INFO)
    signed_driver_stage(box)
    gpu_node_installed(box, *DKMS_DRIVER)

    _, said = replay_undo(box, data={"undo_remove_packages": "true"}, caplog=caplog)
    assert not box.exists(DKMS_CONFIG)
    assert read(box, GENERATED_KEY) == "stand-in-private-key\n" and box.exists(GENERATED_CERT)
    assert (stat(box, GENERATED_KEY), stat(box, GENERATED_FOLDER)) == ("600 0:0", "700 0:0")
    assert [line for line in said if f"{DKMS_CONFIG}: removed: gpu-node created it" in line]
    (line,) = [line for line in said if GENERATED_KEY in line]
    assert f"mokutil --delete {GENERATED_CERT}" in line, line
    assert {entry for entry in box.tree() if entry[0].startswith(node_records.RECORDS_DIR)} == {
        (node_records.RECORDS_DIR, "dir"),
        (GENERATED_FOLDER, "dir"),
        (GENERATED_KEY, "file"),
        (GENERATED_CERT, "file"),
    }, box.tree()

    after = box.tree()
    plan, again = replay_undo(box, data={"undo_remove_packages": "true"}, caplog=caplog)
    assert changing_commands(plan) == [] and box.tree() == after
    assert [entry for entry in again if f"mokutil --delete {GENERATED_CERT}" in entry]


@pytest.mark.parametrize(
    ("installed", "drop_in_goes"),
    [(DKMS_DRIVER, True), ((), False), (("nvidia-driver", "dkms"), False)],
    ids=["driver-gpu-node-installed", "driver-there-before", "only-its-dkms-module-there-before"],
)
def test_with_undo_remove_packages_the_drop_in_goes_only_with_a_dkms_driver_gpu_node_installed_stand_in_openssl(
    box, caplog, installed, drop_in_goes
):
    """undo_remove_packages=true removes the packages gpu-node installed (its package records): where
    the driver's DKMS module package is not among them (the node had it before gpu-node), the driver
    stays and DKMS keeps building its module for each new kernel, so the drop-in naming the key stays,
    in one line saying why; where gpu-node installed it, the drop-in goes with it. The signing steps
    are replayed with a stand-in openssl."""
    caplog.set_level(logging.INFO)
    signed_driver_stage(box)
    drop_in = read(box, DKMS_CONFIG)
    gpu_node_installed(box, *installed)

    _, said = replay_undo(box, data={"undo_remove_packages": "true"}, caplog=caplog)
    (line,) = [line for line in said if f"undo: {DKMS_CONFIG}:" in line]
    if drop_in_goes:
        assert not box.exists(DKMS_CONFIG)
        assert f"{DKMS_CONFIG}: removed: gpu-node created it" in line
    else:
        assert read(box, DKMS_CONFIG) == drop_in
        assert "the NVIDIA driver's DKMS packages stay (gpu-node did not install them" in line, line


# --- the folders gpu-node made (deploy/operations/files.py make_folder) ------------------------------

DROP_INS = DKMS_CONFIG.rpartition("/")[0]


@pytest.mark.parametrize("before", ["nothing", "/etc/dkms", DROP_INS], ids=["none", "dkms", "drop-ins"])
def test_the_folders_gpu_node_made_for_the_drop_in_go_with_it_and_those_there_before_stay_stand_in_openssl(
    box, caplog, before
):
    """The module signing steps make DKMS's drop-in folder where it is absent (and /etc/dkms above it:
    the driver's install brings DKMS after them), recording each folder they make: the undo that takes
    the drop-in removes each of those folders once nothing else is in it, and one line says so; a
    folder that was there before gpu-node has no record and stays. The signing steps are replayed with
    a stand-in openssl."""
    caplog.set_level(logging.INFO)
    if before != "nothing":
        (box.root / before.lstrip("/")).mkdir(parents=True)
    signed_driver_stage(box)
    gpu_node_installed(box, *DKMS_DRIVER)

    plan, said = replay_undo(box, data={"undo_remove_packages": "true"}, caplog=caplog)
    assert not box.exists(DKMS_CONFIG)
    made = [folder for folder in ("/etc/dkms", DROP_INS) if not before.startswith(folder)]
    assert [folder for folder in ("/etc/dkms", DROP_INS) if box.exists(folder)] == [
        folder for folder in ("/etc/dkms", DROP_INS) if folder not in made
    ]
    assert sorted(line.partition("undo: ")[2] for line in said if "gpu-node made it" in line) == sorted(
        f"{folder}: removed: gpu-node made it, and nothing else is in it" for folder in made
    )
    # a second undo has nothing left to do
    after = box.tree()
    again, _ = replay_undo(box, data={"undo_remove_packages": "true"}, caplog=caplog)
    assert changing_commands(again) == [] and box.tree() == after


def test_a_folder_gpu_node_made_that_holds_another_file_stays_in_one_line_stand_in_openssl(box, caplog):
    """A file of the site's in the drop-in folder gpu-node made keeps the folder (and /etc/dkms above
    it): the drop-in goes, the site's file and its folders stay, one line naming what it holds."""
    caplog.set_level(logging.INFO)
    signed_driver_stage(box)
    gpu_node_installed(box, *DKMS_DRIVER)
    write(box, f"{DROP_INS}/site.conf", "sign_file=/usr/local/bin/site-sign\n")

    _, said = replay_undo(box, data={"undo_remove_packages": "true"}, caplog=caplog)
    assert not box.exists(DKMS_CONFIG) and read(box, f"{DROP_INS}/site.conf").startswith("sign_file=")
    assert [line.partition("undo: ")[2] for line in said if "gpu-node made it" in line] == [
        f"{DROP_INS}: left as it is: gpu-node made it, but it holds site.conf",
        "/etc/dkms: left as it is: gpu-node made it, but it holds framework.conf.d",
    ]


def test_a_folder_the_signing_steps_could_not_make_is_no_record_and_a_package_s_later_stays(box, caplog):
    """A folder the recording fails to make (here a file stands in its way) is not recorded as
    gpu-node's: when a package makes it later, the undo leaves it, empty or not."""
    caplog.set_level(logging.INFO)
    write(box, DROP_INS, "a file where the folder goes\n")
    (box.root / "var/lib").mkdir(parents=True, exist_ok=True)
    assert box.run(node_records.make_folder(f"{DROP_INS}/more")).status != 0
    (box.root / DROP_INS.lstrip("/")).unlink()
    (box.root / f"{DROP_INS}/more".lstrip("/")).mkdir(parents=True)  # as DKMS's package would make it
    gpu_node_installed(box, *DKMS_DRIVER)

    replay_undo(box, data={"undo_remove_packages": "true"}, caplog=caplog)
    assert box.exists(f"{DROP_INS}/more")


def test_a_folder_gpu_node_made_and_removed_whose_record_an_undo_kept_is_not_taken_again(box, caplog):
    """An undo that leaves a changed file (and so its records) removes the folders gpu-node made and
    forgets them: a package that makes the same folder afterwards keeps it at the next undo."""
    caplog.set_level(logging.INFO)
    gpu_node_writes(box, "/etc/modprobe.d/gpu-node-site.conf", "options nvidia NVreg_x=1\n")
    write(box, "/etc/modprobe.d/gpu-node-site.conf", "options nvidia NVreg_x=2 # the site's\n")
    signed_driver_stage(box)
    gpu_node_installed(box, *DKMS_DRIVER)
    replay_undo(box, data={"undo_remove_packages": "true"}, caplog=caplog)
    assert not box.exists("/etc/dkms") and box.exists("/etc/modprobe.d/gpu-node-site.conf")

    (box.root / DROP_INS.lstrip("/")).mkdir(parents=True)  # DKMS's package, installed by the site since
    replay_undo(box, data={"undo_remove_packages": "true"}, caplog=caplog)
    assert box.exists(DROP_INS)


def test_a_folder_gpu_node_made_reached_now_through_a_symbolic_link_stays(box, caplog):
    """A recorded folder whose path leads through a symbolic link now (/etc/dkms replaced by a link
    to another folder) is not the folder gpu-node made: the undo leaves what the link leads to."""
    caplog.set_level(logging.INFO)
    signed_driver_stage(box)
    gpu_node_installed(box, *DKMS_DRIVER)
    (box.root / "etc/dkms").rename(box.root / "srv-dkms")
    (box.root / "srv-dkms/framework.conf.d/gpu-node-module-signing.conf").unlink()
    (box.root / "etc/dkms").symlink_to("/srv-dkms")

    _, said = replay_undo(box, data={"undo_remove_packages": "true"}, caplog=caplog)
    assert box.exists("/srv-dkms/framework.conf.d")
    assert not [line for line in said if f"{DROP_INS}: removed" in line]


def test_a_file_that_comes_into_a_folder_as_the_undo_removes_it_keeps_it_without_failing_stand_in_ls(box):
    """The undo's removal of an empty folder gpu-node made does not fail when a file came in since the
    undo looked (a stand-in ls that sees the folder empty stands in for the race): the folder stays."""
    from deploy.operations.undo import remove_folders

    write(box, "/usr/local/bin/ls", "#!/bin/sh\ntrue\n", 0o755)
    write(box, f"{DROP_INS}/site.conf", "x\n")
    (command,) = [str(command) for command in remove_folders._inner(paths=[DROP_INS, "/etc/dkms"])]
    ran = box.run(command)
    assert ran.status == 0, ran.stderr
    assert read(box, f"{DROP_INS}/site.conf") == "x\n"


def test_the_removal_of_the_folders_leaves_one_reached_now_through_a_symbolic_link(box):
    """Between the undo's read and its removal, a recorded folder's path may come to lead through a
    symbolic link: the removal checks again and leaves what the link leads to."""
    from deploy.operations.undo import remove_folders

    (box.root / "srv-dkms/framework.conf.d").mkdir(parents=True)
    (box.root / "etc/dkms").symlink_to("/srv-dkms")
    (command,) = [str(command) for command in remove_folders._inner(paths=[DROP_INS])]
    ran = box.run(command)
    assert ran.status == 0, ran.stderr
    assert box.exists("/srv-dkms/framework.conf.d")


def test_a_folder_named_by_no_absolute_path_is_refused_in_one_line_and_nothing_made(box):
    """The recording's make_folder takes absolute paths alone: a relative one is one line, status 1."""
    (box.root / "var/lib").mkdir(parents=True, exist_ok=True)
    ran = box.run(f"cd /etc && {node_records.make_folder('dkms/framework.conf.d')}")
    assert ran.status == 1 and ran.stderr == "gpu-node: dkms/framework.conf.d is not an absolute path\n"
    assert not box.exists("/etc/dkms")
