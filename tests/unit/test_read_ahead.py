"""
Facts read ahead in preflight's one command (deploy/facts/read_ahead.py): each value is what the
fact alone gives (run for real in a local shell), an operation gets it without a remote command
while nothing changed on the host, and reads again after a change; stages create no operation
for what is already in place.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest
from plan import gpu_node, run_deploy, run_plan, settings_for
from pyinfra import host
from pyinfra.api import Config, Inventory, State, deploy, operation

from deploy.distros.families import detect_platform
from deploy.facts.base import UnreadableOutput
from deploy.facts.files import FileDigest, FileDigests
from deploy.facts.kernel_state import KernelState
from deploy.facts.read_ahead import MARKER, CombinedOutput, known_fact, read_facts
from deploy.operations import files
from deploy.tasks import containerd as containerd_stage
from deploy.tasks import kernel as kernel_stage
from deploy.tasks.kernel import BLACKLIST_PATH, MODULES_LOAD_PATH, SYSCTL_PATH, kernel_prerequisites, read_files

# The main paths, as ``pyinfra -y`` and in the CLI's default mode (tests/plan.py).
pytestmark = pytest.mark.usefixtures("both_modes")


def shell(command) -> list[str]:
    text = command if isinstance(command, str) else command.get_raw_value()
    return subprocess.run(
        ["sh", "-c", text], capture_output=True, text=True, check=True, timeout=60
    ).stdout.splitlines()


class LocalHost:
    """Answers get_fact by running the fact's command in a local shell; counts the reads.
    Its run (``state``) has no operation: nothing changed the host since a read."""

    name = "local"

    def __init__(self):
        self.reads = []
        self.state = State(Inventory((["@local"], {})), Config())

    def get_fact(self, fact, **kwargs):
        self.reads.append(fact.__name__)
        self.last_kwargs = kwargs
        # pyinfra's global arguments (_success_exit_codes) are pyinfra's, not the fact's
        kwargs = {key: value for key, value in kwargs.items() if not key.startswith("_")}
        lines = shell(fact().command(**kwargs))
        if not lines:
            return fact().default()
        return fact().process(lines)


def test_read_ahead_values_equal_the_facts_read_alone_and_need_no_second_read(tmp_path):
    managed = tmp_path / "managed.conf"
    managed.write_text("overlay\n")
    missing = str(tmp_path / "missing.conf")
    config = tmp_path / "config.toml"
    config.write_text(
        'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd]\n  default_runtime_name = "runc"\n'
    )
    calls = [
        (FileDigest, {"path": str(managed)}),
        (FileDigest, {"path": missing}),
        (FileDigests, {"paths": [str(managed), missing]}),
        (KernelState, {"modules": ["overlay"], "sysctls": ["net.ipv4.ip_forward"]}),
        # The runtimes stage's read (containerd_stage.reads): the file and containerd's own dump of it.
        *containerd_stage.reads(settings_for(containerd_config_path=str(config))),
    ]
    local = LocalHost()
    read_facts(local, read_ahead=calls)
    assert local.reads == ["CombinedOutput"]
    alone = LocalHost()
    for fact, kwargs in calls:
        assert known_fact(local, fact, **kwargs) == alone.get_fact(fact, **kwargs), (fact.__name__, kwargs)
    assert local.reads == ["CombinedOutput"]
    assert known_fact(local, FileDigest, path=str(managed))["sha256"] == hashlib.sha256(b"overlay\n").hexdigest()
    assert known_fact(local, FileDigest, path=missing) is None


def test_every_file_digest_of_a_read_is_one_section_with_one_stat_and_one_sha256sum(tmp_path):
    """FileDigest and FileDigests calls (other paths each, some shared, a name with a space, one with
    a shell's quotes, expansions and a backslash) are read as one FileDigests over all their paths;
    each call's value is what the fact alone gives. What is not a regular file through its links (a
    folder, a FIFO, which a read would wait on forever, a dangling link) is absent, as alone."""
    names = ("a.conf", "b.conf", "containerd config.toml", 'it\'s $(id) `id` "q" \\b #c.toml')
    paths = {name: tmp_path / name for name in names}
    for path in paths.values():
        path.write_text(f"{path.name}\n")
    paths["b.conf"].chmod(0o600)
    (tmp_path / "link.conf").symlink_to(paths["a.conf"])
    (tmp_path / "dangling.conf").symlink_to(tmp_path / "nowhere")
    (tmp_path / "folder.conf").mkdir()
    os.mkfifo(tmp_path / "fifo.conf")
    a, b, spaced, quoted = (str(path) for path in paths.values())
    link, missing = str(tmp_path / "link.conf"), str(tmp_path / "missing.conf")
    not_files = [str(tmp_path / name) for name in ("dangling.conf", "folder.conf", "fifo.conf")]
    calls = [
        (FileDigest, {"path": a}),
        (KernelState, {"modules": ["overlay"], "sysctls": []}),
        (FileDigest, {"path": spaced}),
        (FileDigests, {"paths": [b, missing]}),
        (FileDigest, {"path": link}),
        (FileDigests, {"paths": [a, b]}),
        (FileDigest, {"path": quoted}),
        *((FileDigest, {"path": path}) for path in not_files),
    ]
    local = LocalHost()
    read_facts(local, read_ahead=calls)
    sent = local.last_kwargs["calls"]
    assert [fact for fact, _ in sent] == [FileDigests, KernelState]
    assert sent[0][1] == {"paths": [a, spaced, b, missing, link, quoted, *not_files]}
    command = CombinedOutput().command(calls=sent).get_raw_value()
    assert command.count("sha256sum") == 1 and command.count("stat -L") == 1
    alone = LocalHost()
    for fact, kwargs in calls:
        assert known_fact(local, fact, **kwargs) == alone.get_fact(fact, **kwargs), (fact.__name__, kwargs)
    assert local.reads == ["CombinedOutput"]
    assert known_fact(local, FileDigests, paths=[a, b])[b]["mode"] == "600"
    assert known_fact(local, FileDigest, path=quoted)["sha256"] == hashlib.sha256(f"{names[3]}\n".encode()).hexdigest()
    assert [known_fact(local, FileDigest, path=path) for path in not_files] == [None, None, None]
    # a call the read did not name is read when asked, not answered from the others' digests
    assert known_fact(local, FileDigest, path=str(tmp_path)) is None
    assert local.reads == ["CombinedOutput", "FileDigest"]


class ScriptedHost(LocalHost):
    """Answers the combined read with stated lines for its sections, by fact name."""

    def __init__(self, sections):
        super().__init__()
        self.sections = sections

    def get_fact(self, fact, **kwargs):
        self.reads.append(fact.__name__)
        text = "".join(
            f"{MARKER}{fact.__name__}#{index}\n" + "".join(f"{line}\n" for line in self.sections[fact.__name__])
            for index, (fact, _) in enumerate(kwargs["calls"])
        )
        return fact().process([base64.b64encode(text.encode()).decode()])


FIXTURES = Path(__file__).resolve().parents[1] / "facts" / "files.FileDigests"


@pytest.mark.parametrize("case", ["removed-before-stat", "removed-before-sha256sum"])
def test_a_file_removed_while_the_digests_are_read_fails_the_read_in_one_line_not_shifting_a_digest(case):
    fixture = json.loads((FIXTURES / f"{case}.json").read_text())
    vanishing, kept = fixture["kwargs"]["paths"]
    host = ScriptedHost({"FileDigests": fixture["output"]})
    with pytest.raises(UnreadableOutput) as raised:
        read_facts(host, read_ahead=[(FileDigest, {"path": vanishing}), (FileDigest, {"path": kept})])
    assert str(raised.value) == fixture["error"]


def debian():
    return detect_platform({"name": "debian", "release_meta": {"ID": "debian"}}, "x86_64")


def digest_lines(text: str, mode: str = "644", owner: str = "root:root") -> list[str]:
    return [f"{mode} {owner}", f"{hashlib.sha256(text.encode()).hexdigest()}  file"]


def kernel_files_in_place(**overrides) -> list:
    texts = kernel_stage.managed_files()
    return [(files.digest_read(path), overrides.get(path, digest_lines(text))) for path, text in texts.items()]


def test_kernel_files_in_place_make_no_operation_and_one_read_each():
    plan = run_plan(
        kernel_prerequisites, settings_for(kernel_modules_load=False), debian(), facts=kernel_files_in_place()
    )
    assert plan.state.get_op_order() == []
    for path in (MODULES_LOAD_PATH, SYSCTL_PATH, BLACKLIST_PATH):
        assert len(plan.matching(f"if [ -f {path} ]")) == 1, path


def test_only_the_drifted_kernel_file_gets_an_operation_and_its_fact_is_not_read_twice():
    sysctl_text = kernel_stage.sysctl_text()
    plan = run_plan(
        kernel_prerequisites,
        settings_for(kernel_modules_load=False),
        debian(),
        facts=kernel_files_in_place(**{SYSCTL_PATH: digest_lines(sysctl_text, mode="600")}),
    )
    names = [", ".join(plan.state.op_meta[op_hash].names) for op_hash in plan.state.get_op_order()]
    assert names == ["Kernel prerequisites | Persist the Kubernetes sysctls"]
    assert plan.starting("chmod") == [f"chmod 644 {SYSCTL_PATH}"]
    assert len(plan.matching(f"if [ -f {SYSCTL_PATH} ]")) == 1


@operation()
def _read_again(path: str):
    known_fact(host, FileDigest, path=path)
    host.noop("read")
    return
    yield


@deploy("read, change, read")
def _read_change_read(changed: str, watched: str):
    known_fact(host, FileDigest, path=watched)
    files.put_text(name="change", dest=changed, content="new\n")
    _read_again(name="read after the change", path=watched)


def test_a_change_on_the_host_makes_the_next_known_fact_read_again():
    plan = run_plan(
        _read_change_read,
        "/etc/changed.conf",
        "/etc/watched.conf",
        facts=[
            (files.digest_read("/etc/changed.conf"), ["absent"]),
            (files.digest_read("/etc/watched.conf"), digest_lines("x\n")),
        ],
    )
    assert len(plan.matching("if [ -f /etc/watched.conf ]")) == 2


@deploy("read, read")
def _read_read(watched: str):
    known_fact(host, FileDigest, path=watched)
    _read_again(name="read with no change before", path=watched)


def test_without_a_change_the_operation_reuses_the_value():
    plan = run_plan(
        _read_read, "/etc/watched.conf", facts=[(files.digest_read("/etc/watched.conf"), digest_lines("x\n"))]
    )
    assert len(plan.matching("if [ -f /etc/watched.conf ]")) == 1


def test_the_no_op_deploy_reads_the_kernel_files_in_one_file_digests_section_and_not_again():
    """gpu_node.py on a node whose kernel files are in place: preflight's one read has one FileDigests
    section for them (the scripted node answers it from each file's FileDigest), no FileDigest one,
    and no file is read again after it."""
    # the kernel stage's other files (read, not written on this platform) absent; a later pair wins
    node_files = [(files.digest_read(path), ["absent"]) for path in read_files()] + kernel_files_in_place()
    plan = run_deploy(gpu_node("debian-12", facts=node_files), data={"stages": "kernel"})
    assert plan.error is None and not plan.failed, plan.failures
    (combined,) = plan.matching(MARKER)
    assert combined.count(f"{MARKER}FileDigests#") == 1 and f"{MARKER}FileDigest#" not in combined
    assert plan.commands == [combined]
