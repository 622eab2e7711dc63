"""
gpu-node's merge side by side with NVIDIA's own `nvidia-ctk runtime configure` (toolkit 1.20.0)
on the real-world corpus of other projects' configs (env GPU_NODE_CORPUS, default ../shared/corpus
next to the repo). Not a test: it asserts nothing; it prints a table and writes
docs/nvidia-ctk-comparison.md.

    .venv/bin/python bench/nvidia_ctk_compare.py

nvidia-ctk runs as NVIDIA's install guide documents it, with the option Kubernetes needs to make
the runtime the default:

    nvidia-ctk runtime configure --runtime=containerd --config=COPY --set-as-default
        (its default drop-in /etc/containerd/conf.d/99-nvidia.toml is redirected next to COPY
         with --drop-in-config, so nothing outside a temporary folder is written)
    nvidia-ctk runtime configure --runtime=docker --config=COPY --set-as-default

gpu-node's merge runs in-process (merge_containerd_config / merge_daemon_config + render) on
another copy. Each result is then judged by the real programs: containerd 1.6 (bookworm),
1.7 (trixie) and 2.1 (sid) `config dump` (imports, thus nvidia-ctk's drop-in, resolved) for
each release that reads the file's config version, and dockerd 26 `--validate`.

nvidia-ctk comes from NVIDIA's deb as published, in the lab folder (env GPU_NODE_LAB, no default):
$GPU_NODE_LAB/nvidia-container-toolkit/nvidia-container-toolkit-base_1.20.0-1_amd64.deb.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import tomllib

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from config_checks import NVIDIA_BINARY, leaves  # noqa: E402
from containerd_releases import READERS, config_dump, dockerd, dockerd_validate, release  # noqa: E402
from corpus import corpus_root  # noqa: E402

from deploy.foundations.toml_layout import ConfigError  # noqa: E402
from deploy.operations.containerd import ConfigFile, plan_wiring  # noqa: E402
from deploy.runtimes.containerd.cri import merge_containerd_config  # noqa: E402
from deploy.runtimes.docker.daemon_json import (  # noqa: E402
    DaemonConfigError,
    merge_daemon_config,
    parse_daemon_json,
    render_daemon_json,
)
from deploy.runtimes.wiring import RuntimeWiring  # noqa: E402

CORPUS = corpus_root()  # the tests' one setting, GPU_NODE_CORPUS
DOC = REPO / "docs" / "nvidia-ctk-comparison.md"
TOOLKIT_DEB_NAME = "nvidia-container-toolkit-base_1.20.0-1_amd64.deb"
CRI_PLUGIN_IDS = {"cri", "io.containerd.grpc.v1.cri", "io.containerd.cri.v1.runtime", "io.containerd.cri.v1.images"}
WIRING = RuntimeWiring()
COMMAND = ".venv/bin/python bench/nvidia_ctk_compare.py"


def corpus_files(folder: str, pattern: str) -> list[Path]:
    if not (CORPUS / folder).is_dir():
        sys.exit(
            f"real-world corpus not found: set GPU_NODE_CORPUS to a folder of other projects' configs "
            f"(default ../shared/corpus; {CORPUS}/{folder} is not a folder)"
        )
    return sorted((CORPUS / folder).glob(pattern))


def nvidia_ctk() -> Path:
    lab = os.environ.get("GPU_NODE_LAB")
    if not lab:
        sys.exit(f"GPU_NODE_LAB is unset: set it to the lab folder holding nvidia-container-toolkit/{TOOLKIT_DEB_NAME}")
    deb = Path(lab).expanduser() / "nvidia-container-toolkit" / TOOLKIT_DEB_NAME
    if not deb.is_file():
        sys.exit(f"nvidia-ctk 1.20.0 not found: {deb} is missing (GPU_NODE_LAB={lab}; NVIDIA's deb as published)")
    root = REPO / ".cache" / "nvidia-ctk-1.20.0"
    if not root.exists():
        root.parent.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(dir=root.parent, prefix="nvidia-ctk."))
        subprocess.run(["dpkg-deb", "-x", str(deb), str(scratch)], check=True)
        os.rename(scratch, root)
    return root / "usr" / "bin" / "nvidia-ctk"


# ---------------------------------------------------------------- what is measured


def comment_lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip().startswith("#")]


def toml_key_order(text: str) -> list[tuple[str, str]]:
    """(table, key) pairs in the order the file's lines give them (quotes and spaces normalised)."""
    order, table = [], ""
    for line in text.splitlines():
        stripped = line.strip()
        header = re.fullmatch(r"\[\[?(.+?)\]\]?\s*(#.*)?", stripped)
        if header:
            table = re.sub(r"\s*\.\s*", ".", header.group(1).replace("'", '"').strip())
            continue
        key = re.match(r"""^("[^"]*"|'[^']*'|[A-Za-z0-9_.-]+)\s*=""", stripped)
        if key:
            order.append((table, key.group(1).replace("'", '"')))
    return order


def reordered(before: list, after: list) -> bool:
    """The input's keys, those still present, no longer in their input order."""
    common = set(before) & set(after)
    return [k for k in before if k in common] != [k for k in after if k in common]


def toml_version(text: str) -> int:
    try:
        return tomllib.loads(text).get("version", 1)
    except tomllib.TOMLDecodeError:
        return 0


@dataclass
class Effect:
    """What containerd's own dump shows, per release that reads the main config's version."""

    wired: dict = field(default_factory=dict)  # suite -> nvidia runtime + default in effect
    systemd: dict = field(default_factory=dict)  # suite -> SystemdCgroup true on runc and nvidia
    refused: dict = field(default_factory=dict)  # suite -> containerd's error
    input_refused: list = field(default_factory=list)  # suites that refuse the untouched input too


def containerd_effect(main: Path, original: str, suites=None) -> Effect:
    effect = Effect()
    for suite in READERS.get(toml_version(main.read_text()), ()) if suites is None else suites:
        found = release(suite)
        dumped = config_dump(found.binary, main)
        if dumped.returncode != 0:
            probe = main.parent / "original" / main.name  # same depth, so relative imports resolve alike
            probe.parent.mkdir(exist_ok=True)
            probe.write_text(original)
            if config_dump(found.binary, probe).returncode != 0:
                effect.input_refused.append(suite)
                continue
            effect.refused[suite] = dumped.stderr.strip().splitlines()[-1][:200] if dumped.stderr.strip() else "refused"
            continue
        dump = tomllib.loads(dumped.stdout)
        plugin = "io.containerd.grpc.v1.cri" if found.major == 1 else "io.containerd.cri.v1.runtime"
        containerd = dump.get("plugins", {}).get(plugin, {}).get("containerd", {})
        runtimes = containerd.get("runtimes", {})
        nvidia, runc = runtimes.get("nvidia", {}), runtimes.get("runc", {})
        cri_on = not (set(dump.get("disabled_plugins", [])) & CRI_PLUGIN_IDS)
        effect.wired[suite] = bool(
            cri_on
            and nvidia.get("runtime_type") == "io.containerd.runc.v2"
            and nvidia.get("options", {}).get("BinaryName") == NVIDIA_BINARY
            and containerd.get("default_runtime_name") == "nvidia"
        )
        effect.systemd[suite] = (
            nvidia.get("options", {}).get("SystemdCgroup") is True
            and runc.get("options", {}).get("SystemdCgroup") is True
        )
    return effect


@dataclass
class Outcome:
    name: str
    failed: str = ""  # the tool's own error (exit status, exception)
    crashed: bool = False  # a traceback/unexpected exception rather than a clean refusal
    comments_in: int = 0
    comments_kept: int = 0
    reordered: bool = False
    changed_on_rerun: bool = False
    seconds: float = 0.0
    version: int = 0
    effect: Effect = field(default_factory=Effect)
    v1_on_2x: bool | None = None  # a version-1 input: is the result in effect on containerd 2.1?
    files_written: int = 0
    why: str = ""  # a likely reason, read from the files written, when not in effect


def diagnose(main: Path, dropin: Path | None) -> str:
    """Why containerd may not run the wiring, read from the files (facts measured on the releases)."""
    try:
        document = tomllib.loads(main.read_text())
    except tomllib.TOMLDecodeError:
        return "config.toml is not valid TOML"
    reasons = []
    if set(document.get("disabled_plugins", [])) & CRI_PLUGIN_IDS:
        reasons.append("CRI left in disabled_plugins")
    imports = document.get("imports", [])
    if dropin is not None and dropin.exists():
        covering = [i for i, entry in enumerate(imports) if Path(entry).parent == dropin.parent]
        if not covering:
            reasons.append("drop-in written, but config.toml does not import it")
        elif any(not any(c in entry for c in "*?[") and not Path(entry).exists() for entry in imports[: covering[0]]):
            reasons.append("an import listed before the drop-in does not exist: containerd 2.1 skips the rest")
    plugins = document.get("plugins", {})
    for written in (main, dropin):
        if written is not None and written.exists():
            for plugin in tomllib.loads(written.read_text()).get("plugins", {}).values():
                runtime_type = (plugin.get("containerd", {}).get("runtimes", {}).get("nvidia") or {}).get(
                    "runtime_type"
                )
                if runtime_type not in (None, "io.containerd.runc.v2"):
                    reasons.append(f"nvidia runtime_type {runtime_type} (copied from runc's)")
    if document.get("version", 1) == 2 and {"io.containerd.cri.v1.runtime", "io.containerd.cri.v1.images"} & set(
        plugins
    ):
        reasons.append("version 2 file that already uses 2.x plugin IDs (io.containerd.cri.v1.*)")
    if document.get("version", 1) == 1:
        reasons.append("version 1 file")
    return "; ".join(reasons)


def snapshot(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def run_ctk(command: list[str], outcome) -> bool:
    """Run nvidia-ctk, timing it into ``outcome``; False (and ``outcome.failed``) when it fails."""
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    outcome.seconds = time.perf_counter() - started
    if done.returncode != 0:
        outcome.failed = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1][:200]
    return done.returncode == 0


def run_nvidia_ctk_containerd(ctk: Path, source: Path, work: Path) -> Outcome:
    outcome = Outcome(source.name)
    main, dropin = work / "config.toml", work / "conf.d" / "99-nvidia.toml"
    shutil.copyfile(source, main)
    text = main.read_text()
    command = [
        str(ctk),
        "runtime",
        "configure",
        "--runtime=containerd",
        f"--config={main}",
        f"--drop-in-config={dropin}",
        "--set-as-default",
    ]
    if not run_ctk(command, outcome):
        return outcome
    written = "".join(p.read_text() for p in (main, dropin) if p.exists())
    outcome.files_written = sum(1 for p in (main, dropin) if p.exists())
    outcome.comments_in = len(comment_lines(text))
    kept = set(comment_lines(written))
    outcome.comments_kept = sum(1 for line in comment_lines(text) if line in kept)
    outcome.reordered = reordered(
        toml_key_order(text),
        toml_key_order(main.read_text()) + toml_key_order(dropin.read_text() if dropin.exists() else ""),
    )
    outcome.version = toml_version(main.read_text())
    outcome.effect = containerd_effect(main, text)
    if toml_version(text) == 1:
        outcome.v1_on_2x = all(containerd_effect(main, text, suites=("sid",)).wired.values())
    outcome.why = diagnose(main, dropin)
    before = snapshot(work)
    subprocess.run(command, capture_output=True, text=True)
    outcome.changed_on_rerun = snapshot(work) != before
    return outcome


def run_gpu_node_containerd(source: Path, work: Path) -> Outcome:
    outcome = Outcome(source.name)
    text = source.read_text()
    started = time.perf_counter()
    try:
        merged = merge_containerd_config(text, WIRING, source=source.name)
    except ConfigError as error:
        outcome.failed = str(error)[:200]
        return outcome
    except Exception as error:  # noqa: BLE001 - measured, not hidden: a traceback on a real config
        outcome.failed, outcome.crashed = f"{type(error).__name__}: {error}"[:200], True
        return outcome
    finally:
        outcome.seconds = time.perf_counter() - started
    main = work / "config.toml"
    main.write_text(merged.text)
    outcome.files_written = 1
    outcome.comments_in = len(comment_lines(text))
    kept = set(comment_lines(merged.text))
    outcome.comments_kept = sum(1 for line in comment_lines(text) if line in kept)
    outcome.reordered = reordered(toml_key_order(text), toml_key_order(merged.text))
    outcome.version = toml_version(merged.text)
    # On a node the tool knows its containerd: each release gets what the tool would write for it
    # (a version 2 file holding 2.x plugin names is wired under them on 2.x; a version 1 file is
    # refused on 2.x, so it counts as not wired there).
    outcome.effect = Effect()
    for suite in READERS.get(toml_version(merged.text), ()):
        found = release(suite)
        try:
            planned, _ = plan_wiring([ConfigFile("config.toml", text, source.name)], WIRING, found.major, found.version)
        except ConfigError as error:
            outcome.effect.refused[suite] = f"gpu-node refused: {str(error)[:160]}"
            continue
        per_release = work / suite / "config.toml"
        per_release.parent.mkdir(parents=True, exist_ok=True)
        per_release.write_text(planned[0].text)
        found_effect = containerd_effect(per_release, text, suites=(suite,))
        for name in ("wired", "systemd", "refused"):
            getattr(outcome.effect, name).update(getattr(found_effect, name))
        outcome.effect.input_refused += found_effect.input_refused
    if toml_version(text) == 1:
        outcome.v1_on_2x = all(containerd_effect(main, text, suites=("sid",)).wired.values())
    outcome.why = diagnose(main, None)
    try:
        outcome.changed_on_rerun = merge_containerd_config(merged.text, WIRING, source=source.name).text != merged.text
    except Exception:  # noqa: BLE001
        outcome.changed_on_rerun = True
    return outcome


# ---------------------------------------------------------------- Docker


@dataclass
class DockerOutcome:
    name: str
    failed: str = ""
    keys_kept: bool = False
    reordered: bool = False
    indent: str = ""
    wired: bool = False
    systemd_driver: bool = False
    validated: str = ""  # "ok", "refused: ...", "input refused"
    changed_on_rerun: bool = False
    seconds: float = 0.0


def docker_unrelated(config: dict) -> dict:
    return {
        path: value
        for path, value in leaves(config).items()
        if path not in {("default-runtime",), ("exec-opts",)} and path[:2] != ("runtimes", "nvidia")
    }


def judge_docker(outcome: DockerOutcome, original_text: str, result_text: str, work: Path, input_valid: bool) -> None:
    original = json.loads(original_text) if original_text.strip() else {}
    result = json.loads(result_text)
    outcome.keys_kept = docker_unrelated(result) == docker_unrelated(original)
    common = [k for k in original if k in result]
    outcome.reordered = [k for k in result if k in common] != common
    indent = re.search(r"\n([ \t]+)\"", result_text)
    outcome.indent = repr(indent.group(1)) if indent else "none"
    nvidia = (result.get("runtimes") or {}).get("nvidia") or {}
    outcome.wired = (
        nvidia.get("path") in (NVIDIA_BINARY, "nvidia-container-runtime") and result.get("default-runtime") == "nvidia"
    )
    outcome.systemd_driver = "native.cgroupdriver=systemd" in (result.get("exec-opts") or [])
    if not input_valid:
        outcome.validated = "input refused"
        return
    candidate = work / "validate.json"
    candidate.write_text(result_text)
    checked = dockerd_validate(dockerd(), candidate)
    outcome.validated = (
        "ok" if checked.returncode == 0 else "refused: " + (checked.stderr or checked.stdout).strip()[-160:]
    )


def docker_input_valid(source: Path, work: Path) -> bool:
    candidate = work / "input.json"
    shutil.copyfile(source, candidate)
    return dockerd_validate(dockerd(), candidate).returncode == 0


def run_nvidia_ctk_docker(ctk: Path, source: Path, work: Path, input_valid: bool) -> DockerOutcome:
    outcome = DockerOutcome(source.name)
    config = work / "daemon.json"
    shutil.copyfile(source, config)
    command = [str(ctk), "runtime", "configure", "--runtime=docker", f"--config={config}", "--set-as-default"]
    if not run_ctk(command, outcome):
        return outcome
    result_text = config.read_text()
    judge_docker(outcome, source.read_text(), result_text, work, input_valid)
    subprocess.run(command, capture_output=True, text=True)
    outcome.changed_on_rerun = config.read_text() != result_text
    return outcome


def run_gpu_node_docker(source: Path, work: Path, input_valid: bool) -> DockerOutcome:
    outcome = DockerOutcome(source.name)
    text = source.read_text()
    started = time.perf_counter()
    try:
        rendered = render_daemon_json(merge_daemon_config(parse_daemon_json(text, source.name), WIRING).config)
    except DaemonConfigError as error:
        outcome.failed = str(error)[:200]
        return outcome
    finally:
        outcome.seconds = time.perf_counter() - started
    judge_docker(outcome, text, rendered, work, input_valid)
    again = render_daemon_json(merge_daemon_config(parse_daemon_json(rendered, source.name), WIRING).config)
    outcome.changed_on_rerun = again != rendered
    return outcome


# ---------------------------------------------------------------- report


def share(count: int, total: int) -> str:
    return f"{count}/{total}"


def containerd_rows(results: dict[str, list[Outcome]], v1_names: set[str]) -> list[tuple[str, ...]]:
    rows = []
    for tool, outcomes in results.items():
        total = len(outcomes)
        done = [o for o in outcomes if not o.failed]
        pairs = [(o, s) for o in done for s in o.effect.wired]
        rows.append(
            (
                tool,
                share(len(done), total)
                + (f" ({sum(o.crashed for o in outcomes)} tracebacks)" if any(o.crashed for o in outcomes) else ""),
                share(sum(o.comments_kept for o in done), sum(o.comments_in for o in done)),
                share(sum(o.reordered for o in done), len(done)),
                share(sum(o.effect.wired[s] for o, s in pairs), len(pairs)),
                share(sum(o.effect.systemd[s] for o, s in pairs), len(pairs)),
                share(sum(bool(o.effect.refused) for o in done), len(done)),
                f"{sum(1 for o in done if o.name in v1_names and o.effect.wired and all(o.effect.wired.values()))} / "
                f"{sum(1 for o in done if o.v1_on_2x)} of {len(v1_names)}",
                share(sum(o.changed_on_rerun for o in done), len(done)),
                f"{1000 * sum(o.seconds for o in outcomes) / max(total, 1):.1f} ms",
            )
        )
    return rows


def docker_rows(results: dict[str, list[DockerOutcome]]) -> list[tuple[str, ...]]:
    rows = []
    for tool, outcomes in results.items():
        total = len(outcomes)
        done = [o for o in outcomes if not o.failed]
        judged = [o for o in done if o.validated != "input refused"]
        rows.append(
            (
                tool,
                share(len(done), total),
                share(sum(o.keys_kept for o in done), len(done)),
                share(sum(o.reordered for o in done), len(done)),
                ", ".join(sorted({o.indent for o in done})),
                share(sum(o.wired for o in done), len(done)),
                share(sum(o.systemd_driver for o in done), len(done)),
                share(sum(o.validated == "ok" for o in judged), len(judged)),
                share(sum(o.changed_on_rerun for o in done), len(done)),
                f"{1000 * sum(o.seconds for o in outcomes) / max(total, 1):.1f} ms",
            )
        )
    return rows


def table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


CONTAINERD_HEADER = (
    "tool",
    "files handled",
    "comment lines kept",
    "files with keys reordered",
    "wiring in effect (file × release)",
    "SystemdCgroup on runc+nvidia (file × release)",
    "result refused by a containerd",
    "v1 files wired (1.6+1.7 / 2.1)",
    "second run changes files",
    "time per file",
)
DOCKER_HEADER = (
    "tool",
    "files handled",
    "unrelated keys kept",
    "keys reordered",
    "indent",
    "nvidia default",
    "systemd cgroup driver",
    "dockerd 26 --validate ok",
    "second run changes file",
    "time per file",
)


def details(results: dict[str, list[Outcome]]) -> str:
    lines = []
    for tool, outcomes in results.items():
        for o in outcomes:
            if o.failed:
                lines.append(f"- {tool}, `{o.name}`: {'crashed' if o.crashed else 'refused'}: {o.failed}")
            elif o.effect.refused:
                lines.append(f"- {tool}, `{o.name}`: containerd refuses the result: {o.effect.refused}")
            elif o.effect.wired and not all(o.effect.wired.values()):
                not_in_effect = [s for s, ok in o.effect.wired.items() if not ok]
                why = f" ({o.why})" if o.why else ""
                lines.append(f"- {tool}, `{o.name}`: wiring not in effect on {', '.join(not_in_effect)}{why}")
    return "\n".join(lines) or "- none"


def docker_details(results: dict[str, list[DockerOutcome]]) -> str:
    lines = []
    for tool, outcomes in results.items():
        for o in outcomes:
            if o.failed:
                lines.append(f"- {tool}, `{o.name}`: refused: {o.failed}")
            elif o.validated.startswith("refused"):
                lines.append(f"- {tool}, `{o.name}`: dockerd {o.validated}")
            elif o.validated == "input refused":
                lines.append(f"- {tool}, `{o.name}`: not asked of dockerd (dockerd 26 refuses the input itself)")
    return "\n".join(lines) or "- none"


def main() -> None:
    containerd_files = corpus_files("containerd", "*.toml")
    docker_files = corpus_files("docker", "*.json")
    ctk = nvidia_ctk()
    ctk_version = subprocess.run([str(ctk), "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    releases_used = ", ".join(f"{s} {release(s).version}" for s in ("bookworm", "trixie", "sid"))
    v1_names = {p.name for p in containerd_files if toml_version(p.read_text()) == 1}

    containerd_results: dict[str, list[Outcome]] = {"gpu-node merge": [], "nvidia-ctk 1.20.0": []}
    docker_results: dict[str, list[DockerOutcome]] = {"gpu-node merge": [], "nvidia-ctk 1.20.0": []}
    with tempfile.TemporaryDirectory(prefix="ctk-compare-") as scratch:
        root = Path(scratch)
        for index, source in enumerate(containerd_files):
            for tool in containerd_results:
                work = root / f"c{index}-{tool.split()[0]}"
                work.mkdir()
                outcome = (
                    run_gpu_node_containerd(source, work)
                    if tool.startswith("gpu-node")
                    else run_nvidia_ctk_containerd(ctk, source, work)
                )
                containerd_results[tool].append(outcome)
        for index, source in enumerate(docker_files):
            probe = root / f"d{index}-probe"
            probe.mkdir()
            valid = docker_input_valid(source, probe)
            for tool in docker_results:
                work = root / f"d{index}-{tool.split()[0]}"
                work.mkdir()
                outcome = (
                    run_gpu_node_docker(source, work, valid)
                    if tool.startswith("gpu-node")
                    else run_nvidia_ctk_docker(ctk, source, work, valid)
                )
                docker_results[tool].append(outcome)

    containerd_table = table(CONTAINERD_HEADER, containerd_rows(containerd_results, v1_names))
    docker_table = table(DOCKER_HEADER, docker_rows(docker_results))
    print(containerd_table, "\n", docker_table, sep="\n")

    DOC.parent.mkdir(exist_ok=True)
    DOC.write_text(f"""# gpu-node and nvidia-ctk side by side

Generated by `{COMMAND}` (figures written by the script; edit the script, not this file).
Tools: gpu-node's merge at this commit; `{ctk_version}` (NVIDIA's toolkit 1.20.0 package,
`nvidia-container-toolkit-base`). Judges: Debian's containerd {releases_used} (`containerd --config F
config dump`, imports resolved, for each release that reads the file's config version: 1.6 and 1.7 read
versions 1 and 2, 2.1 reads 2 and 3, none of them 4) and trixie's dockerd 26 (`dockerd --validate`).

Corpus: {len(containerd_files)} containerd `config.toml` and {len(docker_files)} Docker `daemon.json` files written by
other projects (the real-world corpus, kept outside the repository: env `GPU_NODE_CORPUS`, default
`../shared/corpus`; origins in its `SOURCES.toml`), {len(v1_names)} of the config.toml files in config version 1.

How each tool was run, on a copy of each file:

- nvidia-ctk, as NVIDIA's install guide documents, with the option Kubernetes needs for the default
  runtime: `nvidia-ctk runtime configure --runtime=containerd --config=COPY --set-as-default`, its drop-in
  (`/etc/containerd/conf.d/99-nvidia.toml` by default) redirected next to the copy with `--drop-in-config`;
  `nvidia-ctk runtime configure --runtime=docker --config=COPY --set-as-default`. nvidia-ctk has no cgroup
  driver option: it copies runc's options (SystemdCgroup included) to the nvidia runtime.
- gpu-node: `merge_containerd_config` / `merge_daemon_config` + `render_daemon_json` with the default
  wiring (nvidia default, SystemdCgroup on runc and nvidia), in-process (its time excludes a process start,
  nvidia-ctk's includes one). Times are wall-clock means on a 2-core machine shared with other work: noisy.

## containerd config.toml

{containerd_table}

- *comment lines kept*: comment lines of the input still present in any file the tool wrote.
- *keys reordered*: the input's `(table, key)` pairs that are still there, in a different order.
- *wiring in effect*: containerd's dump shows runtimes.nvidia (runc v2 shim, BinaryName
  `{NVIDIA_BINARY}`), `default_runtime_name = "nvidia"`, CRI not disabled; counted per (file, release
  that reads the result's config version).
- *v1 files wired*: version-1 inputs whose result is in effect on both 1.x releases / on containerd 2.1
  (which loads a version-1 file but drops its `plugins.cri` with a warning). On containerd 2.x
  gpu-node refuses a version-1 file before any change, naming the version and what to do: its
  0 there is a refusal, not a silent no-op. gpu-node's results are what it writes on a node
  running each release (it reads the installed containerd's version).
- A (file, release) whose untouched input that containerd refuses too (an import the source does not
  give) is left out of the counts.
- *second run*: the tool run again on its own output changes any file.

Files that were refused, crashed, or whose wiring does not take effect:

{details(containerd_results)}

## Docker daemon.json

{docker_table}

- *unrelated keys kept*: every key but `runtimes.nvidia`, `default-runtime` and `exec-opts` has its value.
- *dockerd 26 --validate ok*: counted over the files whose input dockerd 26 itself accepts.
- nvidia-ctk writes the runtime as `"path": "nvidia-container-runtime"` with `"args": []` (a key Docker
  does not read; Docker's is `runtimeArgs`), sorts the keys and indents with 4 spaces.

Files refused or not judged:

{docker_details(docker_results)}
""")
    print(f"\nwrote {DOC.relative_to(REPO)}")


if __name__ == "__main__":
    main()
