"""
Pull mode's settings file (deploy/node/pull_settings.py), its entry file (deploy/pull.py) and its units
(deploy/node/pull_install.py).

The file is read only when it and every folder above it are root's alone. That walk starts at
``/``, and this machine's temporary folder (``/tmp``, mode 1777) fails it, as it should: the walk is
run in a forked child chrooted into a folder of the test's (``in_root``: root is needed, as for the
shell sandbox), laid out as a node's ``/etc/gpu-node``. The owner rule itself (``unsafe``) is tested
without root on files the test owns, against its own uid and another.
"""

from __future__ import annotations

import os
import pickle
import re
import select
import shlex
import signal
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml
from plan import DEFAULT, Node, run_deploy

from deploy.node import pull_settings
from deploy.node.pull_install import exec_word, unit_texts
from deploy.node.pull_settings import PULL_DEFAULTS, SETTINGS_FILE, settings_from_file, settings_from_text
from deploy.node.root_files import unsafe
from deploy.settings import SettingsError, parse_settings

REPO = Path(__file__).resolve().parents[2]
PULL = str(REPO / "deploy" / "pull.py")
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="chroot and chown need root")

GOOD = """\
# this node's settings
stages = ["kernel", "runtimes"]
container_runtimes = ["containerd"]
kernel_modules_load = false
"""


def test_a_good_file_gives_the_settings_with_pull_modes_report_paths():
    values = settings_from_text(GOOD)
    assert values["container_runtimes"] == ["containerd"] and values["kernel_modules_load"] is False
    assert values["verify_report_path"] == PULL_DEFAULTS["verify_report_path"]
    assert parse_settings(values).stages == ("kernel", "runtimes")


@pytest.mark.parametrize(
    "text, line",
    [
        (
            GOOD + 'container_runtimes_x = ["podman"]\n',
            "unknown setting 'container_runtimes_x' given to /e/s.toml: did you mean",
        ),
        (GOOD.replace('["containerd"]', '["podman"]'), "invalid setting container_runtimes=['podman']: allowed:"),
        (GOOD + "kernel_modules_load = \n", "/e/s.toml: not valid TOML: "),
    ],
)
def test_a_broken_file_is_one_line_naming_the_file_and_its_line(text, line):
    with pytest.raises(SettingsError) as raised:
        settings_from_text(text, "/e/s.toml")
    message = str(raised.value)
    assert "\n" not in message and message.startswith(line), message
    assert "line 3" in message or "line 5" in message, message


# --- who may have written the file ------------------------------------------------------------------


def test_the_owner_rule_on_files_the_test_owns_against_its_own_uid_and_another(tmp_path):
    """``unsafe`` of real files, without root: the test's own file passes for its own uid and is
    refused for another; a file or folder writable by group or others is refused whoever owns it."""
    mine = tmp_path / "settings.toml"
    mine.write_text(GOOD)
    mine.chmod(0o644)
    uid = os.getuid()
    assert unsafe(str(mine), os.stat(mine), owner=uid) is None
    other = uid + 4242
    assert unsafe(str(mine), os.stat(mine), owner=other) == f"{mine} is owned by uid {uid}, not uid {other}"
    if uid != 0:
        assert unsafe(str(mine), os.stat(mine)) == f"{mine} is owned by uid {uid}, not root"
    for mode in (0o664, 0o646, 0o666):
        mine.chmod(mode)
        assert (
            unsafe(str(mine), os.stat(mine), owner=uid)
            == f"{mine} is writable by its group or others (mode {mode:04o})"
        )
    folder = tmp_path / "gpu-node"
    folder.mkdir(mode=0o755)
    assert unsafe(str(folder), os.stat(folder), owner=uid) is None
    folder.chmod(0o1777)
    assert unsafe(str(folder), os.stat(folder), owner=uid) == f"{folder} is writable by its group or others (mode 1777)"


def test_a_settings_file_below_this_machines_tmp_is_refused_naming_tmp():
    """The real walk, outside any chroot: /tmp (1777) lets anyone put a folder there first."""
    assert stat.S_IMODE(os.stat("/tmp").st_mode) == 0o1777
    with tempfile.TemporaryDirectory(dir="/tmp") as folder:
        path = Path(folder) / "settings.toml"
        path.write_text(GOOD)
        path.chmod(0o644)
        with pytest.raises(SettingsError) as raised:
            settings_from_file(str(path))
    assert str(raised.value).startswith(
        "/tmp is writable by its group or others (mode 1777): pull mode applies "
        "settings as root only from a file root alone can change"
    )


def in_root(root: Path, path: str = SETTINGS_FILE):
    """``settings_from_file(path)`` in a forked child chrooted into ``root``: the settings, or the
    SettingsError's line (any other exception: its type and text, for the test to fail on)."""
    settings_from_text(GOOD)  # what the read imports lazily, imported before the chroot
    reader, writer = os.pipe()
    child = os.fork()
    if child == 0:
        try:
            os.close(reader)
            os.chroot(root)
            os.chdir("/")
            try:
                result = ("settings", settings_from_file(path))
            except SettingsError as error:
                result = ("refused", str(error))
            except BaseException as error:  # noqa: BLE001 - handed to the parent to fail on
                result = ("error", f"{type(error).__name__}: {error}")
            with os.fdopen(writer, "wb") as stream:
                pickle.dump(result, stream)
        finally:
            os._exit(0)
    os.close(writer)
    # a bound, not a timing assertion: a read that blocks (a FIFO opened for reading) fails the test
    if not select.select([reader], [], [], 60)[0]:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
        os.close(reader)
        pytest.fail(f"reading {path} blocked")
    with os.fdopen(reader, "rb") as stream:
        result = pickle.load(stream)
    os.waitpid(child, 0)
    assert result[0] != "error", result
    return result


@pytest.fixture
def node_root(tmp_path) -> Path:
    """A node's root as gpu-node expects it: /, /etc and /etc/gpu-node root's, 0755; the settings 0644."""
    root = tmp_path / "root"
    (root / "etc" / "gpu-node").mkdir(parents=True)
    for folder in (root, root / "etc", root / "etc" / "gpu-node"):
        folder.chmod(0o755)
    settings = root / SETTINGS_FILE.lstrip("/")
    settings.write_text(GOOD)
    settings.chmod(0o644)
    return root


def refused(root: Path, path: str = SETTINGS_FILE) -> str:
    kind, line = in_root(root, path)
    assert kind == "refused", line
    assert "\n" not in line
    return line


TAIL = (
    "pull mode applies settings as root only from a file root alone can change: the file and every folder "
    "above it root's, not writable by group or others, none a symbolic link"
)


@needs_root
def test_a_root_owned_file_in_root_owned_folders_is_read(node_root):
    assert in_root(node_root) == ("settings", settings_from_text(GOOD))


@needs_root
@pytest.mark.parametrize(
    "where, mode",
    [(SETTINGS_FILE, 0o664), (SETTINGS_FILE, 0o646), ("/etc/gpu-node", 0o775), ("/etc", 0o757), ("/", 0o1777)],
    ids=lambda value: f"{value:04o}" if isinstance(value, int) else value,
)
def test_a_file_or_folder_above_it_writable_by_group_or_others_is_refused_naming_it(node_root, where, mode):
    (node_root / where.lstrip("/")).chmod(mode)
    assert refused(node_root) == f"{where} is writable by its group or others (mode {mode:04o}): {TAIL}"


@needs_root
@pytest.mark.parametrize("where", [SETTINGS_FILE, "/etc/gpu-node", "/etc"])
def test_a_file_or_folder_above_it_owned_by_another_user_is_refused_naming_it(node_root, where):
    os.chown(node_root / where.lstrip("/"), 4242, 4242)
    assert refused(node_root) == f"{where} is owned by uid 4242, not root: {TAIL}"


@needs_root
def test_a_symbolic_link_is_not_followed_for_the_file_nor_a_folder_above_it(node_root):
    """Even to a file root owns: whoever may change a link chooses what root reads through it."""
    srv = node_root / "srv"
    srv.mkdir(mode=0o755)
    (node_root / SETTINGS_FILE.lstrip("/")).rename(srv / "settings.toml")
    (node_root / SETTINGS_FILE.lstrip("/")).symlink_to("/srv/settings.toml")
    assert refused(node_root) == f"{SETTINGS_FILE} is a symbolic link (not followed): {TAIL}"
    (node_root / SETTINGS_FILE.lstrip("/")).unlink()
    (node_root / "etc" / "gpu-node").rmdir()
    (node_root / "etc" / "gpu-node").symlink_to("/srv")
    assert refused(node_root) == f"/etc/gpu-node is a symbolic link (not followed): {TAIL}"


@needs_root
def test_a_fifo_or_a_folder_in_its_place_is_refused_without_blocking(node_root):
    settings = node_root / SETTINGS_FILE.lstrip("/")
    settings.unlink()
    os.mkfifo(settings, 0o644)
    assert refused(node_root) == f"{SETTINGS_FILE} is not a regular file: {TAIL}"
    settings.unlink()
    settings.mkdir(mode=0o755)
    assert refused(node_root) == f"{SETTINGS_FILE} is not a regular file: {TAIL}"


@needs_root
@pytest.mark.parametrize("remove", [SETTINGS_FILE, "/etc/gpu-node"])
def test_no_settings_file_is_refused_never_the_defaults(node_root, remove):
    target = node_root / remove.lstrip("/")
    target.unlink() if target.is_file() else (target / "settings.toml").unlink() or target.rmdir()
    assert refused(node_root) == (
        f"{remove} does not exist: pull mode converges a node only with the settings "
        f"written in {SETTINGS_FILE} (docs/without-controller.md), never with defaults; "
        "nothing changed"
    )


@needs_root
@pytest.mark.parametrize(
    "content, line",
    [
        ("x = " + "[" * 100_000, f"{SETTINGS_FILE} nests values deeper than gpu-node reads (64 levels)"),
        ("#" * (2 * 1024 * 1024), f"{SETTINGS_FILE} is larger than gpu-node reads (1024 KiB)"),
        (GOOD + "# \xff\n", f"{SETTINGS_FILE} is not UTF-8 text: byte 0xff on line 5"),
    ],
    ids=["100000-nested-brackets", "2-MiB", "not-utf-8"],
)
def test_text_no_parser_should_meet_is_one_line_through_the_node_text_guards(node_root, content, line):
    (node_root / SETTINGS_FILE.lstrip("/")).write_bytes(content.encode("latin-1"))
    assert refused(node_root) == line


# --- deploy/pull.py: what the timer runs ------------------------------------------------------------


@pytest.mark.parametrize("case", ["absent", "below-tmp"])
def test_pull_py_run_as_pyinfra_runs_it_refuses_a_missing_or_untrusted_file_before_any_operation(
    case, tmp_path, monkeypatch
):
    """deploy/pull.py loaded by pyinfra as the timer's run loads it (on @fake): its settings come through
    pull_settings' checks, not read raw, so a file that is missing or anyone could have written stops
    the run in that one line, with no operation and no command."""
    assert str(tmp_path).startswith("/tmp/")
    # absent: in a folder / does not hold (the walk reaches it through / alone)
    path = (
        Path(f"/gpu-node-test-{os.urandom(8).hex()}/settings.toml") if case == "absent" else tmp_path / "settings.toml"
    )
    if case == "below-tmp":
        path.write_text(GOOD)
        path.chmod(0o644)
    monkeypatch.setattr(pull_settings, "SETTINGS_FILE", str(path))
    plan = run_deploy(Node(unstated=DEFAULT), data={}, deploy_file=PULL)
    assert isinstance(plan.error, SettingsError), plan.error
    expected = (
        f"{path.parent} does not exist: pull mode converges a node only with the settings"
        if case == "absent"
        else "/tmp is writable by its group or others (mode 1777)"
    )
    assert str(plan.error).startswith(expected), plan.error
    assert plan.commands == [] and plan.op_names() == []


def test_the_service_runs_pyinfra_local_with_the_entry_and_quotes_odd_paths():
    service = unit_texts("/opt/gpu-node/bin/python", "/opt/gpu node/gpu_node/pull.py")["gpu-node-pull.service"]
    assert 'ExecStart=/opt/gpu-node/bin/python -m pyinfra -y @local "/opt/gpu node/gpu_node/pull.py"' in service
    assert exec_word('a"b\\c%d$e') == '"a\\"b\\\\c%%d$$e"'


EXAMPLE = REPO / "docs" / "examples" / "cloud-init-pull.yaml"


def cloud_config(text: str | None = None) -> dict:
    return yaml.safe_load(EXAMPLE.read_text() if text is None else text)


def test_the_cloud_init_examples_settings_pass_the_model_and_it_installs_the_timer():
    example = cloud_config()
    (settings,) = [entry for entry in example["write_files"] if entry["path"] == "/etc/gpu-node/settings.toml"]
    assert parse_settings(settings_from_text(settings["content"])).container_runtimes == ("containerd",)
    assert ["/opt/gpu-node/bin/python", "-m", "gpu_node.node.pull_install"] in example["runcmd"]


# --- the example's install: pinned wheels from the site, never a name from an index -----------------

PIP = re.compile(r"(?:.*/)?pip(?:3(?:\.\d+)?)?")
SEPARATORS = {";", "&&", "||", "|", "&"}
INDEXES = ("-i", "--index-url", "--extra-index-url")
TAKES_A_VALUE = {
    "-r",
    "--requirement",
    "-f",
    "--find-links",
    "-c",
    "--constraint",
    "-t",
    "--target",
    "--prefix",
    "--root",
    "--python-version",
    "--platform",
    "--implementation",
    "--abi",
    "--progress-bar",
    *INDEXES,
}
# A requirement pinned to one version and its SHA-256: name==version --hash=sha256:DIGEST
PINNED = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*==[^\s;@]+(?:\s+--hash=sha256:\S+)+")


def pip_installs(command) -> list[list[str]]:
    """The words after ``install`` of each pip install a cloud-config command runs (an argument
    list, or a line for the shell), up to a shell separator."""
    if isinstance(command, str):
        lexer = shlex.shlex(command, posix=True, punctuation_chars=";&|")
        lexer.whitespace_split = True
        words = list(lexer)
    else:
        words = [str(word) for word in command]
    found = []
    for index, word in enumerate(words):
        rest = words[index + 1 :]
        if PIP.fullmatch(word) and rest[:1] == ["install"]:
            rest = rest[1:]
        elif word == "-m" and rest[:2] == ["pip", "install"]:
            rest = rest[2:]
        else:
            continue
        end = next((at for at, item in enumerate(rest) if item in SEPARATORS), len(rest))
        found.append(rest[:end])
    return found


def unpinned(example: dict) -> list[str]:
    """Why each pip install of the example is not pinned, one line each: run as root at boot, an install
    by name from an index installs whatever the index serves under that name."""
    files = {entry["path"]: entry.get("content", "") for entry in example.get("write_files", [])}
    problems = []
    for command in [*example.get("bootcmd", []), *example.get("runcmd", [])]:
        for words in pip_installs(command):
            said = f"pip install {' '.join(words)}"
            for needed in ("--require-hashes", "--no-index"):
                if needed not in words:
                    problems.append(f"{said}: without {needed}")
            index = 0
            while index < len(words):
                word, value = words[index], words[index + 1] if index + 1 < len(words) else ""
                name = word.split("=", 1)[0]
                if name in INDEXES:
                    problems.append(f"{said}: from an index ({word})")
                if name in TAKES_A_VALUE and "=" not in word:
                    index += 1
                value = word.split("=", 1)[1] if "=" in word else value
                if name in ("-f", "--find-links") and not value.startswith(("https://", "/")):
                    problems.append(f"{said}: wheels from {value}, neither https nor a local folder")
                if name in ("-r", "--requirement"):
                    problems += [f"{value}: {problem}" for problem in unpinned_requirements(files.get(value))]
                if not word.startswith("-"):
                    problems.append(f"{said}: installs {word} by name, not from hashed requirements")
                index += 1
    return problems


def unpinned_requirements(text: str | None) -> list[str]:
    if text is None:
        return ["not written by the example: its pins are not known"]
    lines = [line.split(" #", 1)[0].strip() for line in text.splitlines()]
    return [
        f"{line!r} is not name==version --hash=sha256:DIGEST"
        for line in lines
        if line and not line.startswith("#") and not PINNED.fullmatch(line)
    ]


def test_the_cloud_init_example_installs_gpu_node_only_from_hashed_wheels_without_an_index():
    example = cloud_config()
    assert unpinned(example) == []
    installs = [words for command in example["runcmd"] for words in pip_installs(command)]
    assert len(installs) == 1 and "-r" in installs[0]


TODAYS = "/opt/gpu-node/bin/pip install gpu-node==0.2.0"  # the example before it pinned hashes


@pytest.mark.parametrize(
    "runcmd, requirements, problem",
    [
        ([TODAYS.split()], None, "installs gpu-node==0.2.0 by name"),
        ([TODAYS.split()], None, "without --require-hashes"),
        ([TODAYS], None, "without --no-index"),
        (["python3 -m pip install --require-hashes --no-index gpu-node"], None, "installs gpu-node by name"),
        (
            ["cd /tmp && pip3 install --require-hashes --no-index -r /r.txt; pip install x"],
            "a==1 --hash=sha256:ab\n",
            "installs x by name",
        ),
        (
            [
                [
                    "pip",
                    "install",
                    "--require-hashes",
                    "--no-index",
                    "--index-url=https://pypi.org/simple",
                    "-r",
                    "/r.txt",
                ]
            ],
            "a==1 --hash=sha256:ab\n",
            "from an index (--index-url=https://pypi.org/simple)",
        ),
        (
            [["pip", "install", "--require-hashes", "--no-index", "--extra-index-url", "https://x", "-r", "/r.txt"]],
            "a==1 --hash=sha256:ab\n",
            "from an index (--extra-index-url)",
        ),
        (
            [["pip", "install", "--require-hashes", "--no-index", "-f", "http://wheels/", "-r", "/r.txt"]],
            "a==1 --hash=sha256:ab\n",
            "wheels from http://wheels/, neither https nor a local folder",
        ),
        (
            [["pip", "install", "--require-hashes", "--no-index", "-r", "/r.txt"]],
            "gpu-node==0.2.0\n",
            "'gpu-node==0.2.0' is not name==version --hash=sha256:DIGEST",
        ),
        (
            [["pip", "install", "--require-hashes", "--no-index", "-r", "/r.txt"]],
            "gpu-node --hash=sha256:ab\n",
            "'gpu-node --hash=sha256:ab' is not name==version",
        ),
        (
            [["pip", "install", "--require-hashes", "--no-index", "-r", "/r.txt"]],
            "--index-url https://pypi.org/simple\n",
            "'--index-url https://pypi.org/simple' is not name==version",
        ),
        (
            [["pip", "install", "--require-hashes", "--no-index", "-r", "/elsewhere.txt"]],
            None,
            "/elsewhere.txt: not written by the example",
        ),
    ],
)
def test_an_unpinned_install_line_is_refused(runcmd, requirements, problem):
    """The check above can fail: today's example's line (a name from the public index) and each way
    an install escapes the pins are named."""
    example = {
        "runcmd": runcmd,
        "write_files": [] if requirements is None else [{"path": "/r.txt", "content": requirements}],
    }
    assert [line for line in unpinned(example) if problem in line], unpinned(example)


def test_the_docs_build_recipe_is_the_one_the_e2e_install_runs():
    """docs/without-controller.md's lines that write requirements.txt are tests/wheels.py's, which the
    pull e2e runs over the wheels it built, then installs from with --require-hashes and no index."""
    from wheels import REQUIREMENTS_RECIPE

    assert REQUIREMENTS_RECIPE in (REPO / "docs" / "without-controller.md").read_text()


# --- deploy/node/pull_install.py: the units only once the settings are there and root's -------------------


@pytest.mark.parametrize("case", ["absent", "below-tmp", "invalid"])
def test_pull_install_without_trusted_valid_settings_writes_and_enables_nothing(case, tmp_path, monkeypatch, capsys):
    """Its settings read through pull_settings (the file there, root's alone, valid) before the
    recording shell, the unit files and systemctl: otherwise one line, exit 1, none of them."""
    from deploy.node import pull_install

    path = (
        Path(f"/gpu-node-test-{os.urandom(8).hex()}/settings.toml") if case == "absent" else tmp_path / "settings.toml"
    )
    if case != "absent":
        path.write_text(GOOD if case == "below-tmp" else GOOD.replace('["containerd"]', '["podman"]'))
        path.chmod(0o644)
    monkeypatch.setattr(pull_settings, "SETTINGS_FILE", str(path))
    if case == "invalid":  # a trusted file whose setting is wrong: the owner check passes, the model refuses
        monkeypatch.setattr(pull_settings, "read_settings_text", lambda path, owner=0: Path(path).read_text())
    ran = []
    monkeypatch.setattr(subprocess, "run", lambda args, **kwargs: ran.append(args))
    units = tmp_path / "units"
    units.mkdir()
    assert pull_install.main([], unit_dir=str(units)) == 1
    assert ran == [] and list(units.iterdir()) == []
    captured = capsys.readouterr()
    (line,) = captured.err.splitlines()
    assert captured.out == ""
    assert line.startswith(
        "gpu-node pull_install: "
        + {
            "absent": f"{path.parent} does not exist: pull mode converges a node only with the settings",
            "below-tmp": "/tmp is writable by its group or others (mode 1777): pull mode applies settings as root",
            "invalid": "invalid setting container_runtimes=['podman']",
        }[case]
    ), line
