"""
The operation that wires the NVIDIA runtime into containerd's config through the safe install,
and the candidate check: the node's own containerd reads the new files before any is installed.
"""

from __future__ import annotations

from typing import Sequence

import tomlkit
from pyinfra import host, logger
from pyinfra.api import FunctionCommand, QuoteString, StringCommand, operation
from pyinfra.api.command import PyinfraCommand

from .. import node_records, probes, redact
from .cri import effective_problems
from .layout import line_endings
from .plan import NodeWiringPlan, PlannedFile, still_current
from ..operations import safe_install
from ..operations.failure import failing_command
from ..operations.upload import Staging, Upload
from ..settings import RuntimeWiring


@operation()
def configure_nvidia_runtime(
    plan: NodeWiringPlan,
    restart_timeout: int = 30,
    restart_pending: bool = False,
    before_restart: Sequence[PyinfraCommand] = (),
    keep_backups: int = safe_install.KEEP_BACKUPS,
):
    """
    Apply the stage's wiring plan (``plan_node_wiring``): the merged files installed safely, the
    flavour's service restarted on change.

    + plan: what to write where, made once by the stage (made again only if the host changed since:
      an install before this operation, say)
    + restart_timeout: seconds the restarted service has to become active before rollback
    + restart_pending: an interrupted run installed this config without restarting the service
    + before_restart: commands run after the candidate's check, before the swap and restart (a drain)
    + keep_backups: how many backups of each file stay after a swap (the newest)
    """
    plan = still_current(plan)
    target, wiring = plan.target, plan.checked
    path, service = target.path, target.service
    if plan.refusal:
        yield failing_command(plan.refusal)
        return
    config_fact, source, planned, changed, holder = plan.config_fact, plan.source, plan.planned, plan.changed, plan.holder
    if not changed:
        if plan.overridden:
            yield failing_command(plan.overridden)
            return
        yield from safe_install.file_in_place(path, service, restart_pending, restart_timeout, before_restart,
                                              f"{holder} already wires the nvidia runtime")
        return

    for file in changed:
        for note in file.merged.notes:
            host.log_styled(f"{file.path}: {note}", fg="yellow")
        if file.current is None:
            host.log_styled(f"{file.path} is missing: creating it from {source}", fg="yellow")
        redact.log_masked_diff(host, file.path, file.current, file.merged.text, "toml")

    # Without the binary (a microk8s template) the merge's own read-back is the check.
    if target.validate_with_binary:
        yield from _check_candidates(config_fact["binary_path"] or target.binary, planned, changed, wiring, holder)
    for file in changed:
        last = file is changed[-1]
        # One restart, after the last file: containerd reads them together.
        yield from safe_install.install_file._inner(
            path=file.path,
            content=file.merged.text,
            service=service if last else None,
            restart_timeout=restart_timeout,
            before_restart=before_restart if last else (),
            keep_backups=keep_backups,
            record=safe_install.FileRecord(unit=service, format=node_records.TOML),
        )


CHECK_SUFFIX = ".gpu-node-check"


def _check_candidates(binary: str, planned: list[PlannedFile], changed: list[PlannedFile],
                      wiring: RuntimeWiring, holder: str):
    """
    Ask the node's containerd what it would run with the new files, before any is installed:
    copies beside the live files (relative imports resolve the same), the main one importing
    the new versions of changed imported files in containerd's own order.
    """
    main = planned[0]
    main_text = main.merged.text
    if any(file is not main for file in changed):
        imports = [file.path + CHECK_SUFFIX if file in changed else file.path for file in planned[1:]]
        document = tomlkit.parse(line_endings(main_text)[0])
        document["imports"] = imports
        main_text = tomlkit.dumps(document)
    copies = {main.path + CHECK_SUFFIX: main_text}
    copies.update({file.path + CHECK_SUFFIX: file.merged.text for file in changed if file is not main})
    live = {file.path + CHECK_SUFFIX: file.path for file in changed}
    staging = Staging.new(host, [Upload(copy, text.encode(), live=live.get(copy)) for copy, text in copies.items()])
    yield from staging.commands()
    yield FunctionCommand(_run_candidate_check, (binary, main.path + CHECK_SUFFIX, list(copies), wiring,
                                                 ", ".join(file.path for file in changed), holder,
                                                 staging.place_script()), {})


def _run_candidate_check(state, host, binary: str, config: str, copies: list[str], wiring: RuntimeWiring,
                         changed: str, holder: str, placed: str) -> bool:
    command = StringCommand(placed, QuoteString(binary), "--config", QuoteString(config),
                            "config dump; status=$?; rm -f", *[QuoteString(copy) for copy in copies], "; exit $status")
    # pyinfra hands a FunctionCommand no connector arguments: take the operation's (--sudo, _su_user...)
    succeeded, output = host.run_shell_command(command, **probes.connector_arguments(host))
    own_line = next((line for line in output.stderr_lines if line.startswith("gpu-node: ")), None)
    if not succeeded and own_line:
        # The copies could not be put in place (a symbolic link, a full disk): that line says why.
        host.log_styled(own_line, fg="red", log_func=logger.error)
        return False
    if not succeeded:
        problem = f"{binary} config dump rejected the new version: {redact.daemon_output(output.stderr)}"
    else:
        where, problems = effective_problems(output.stdout, wiring)
        if not problems:
            return True
        problem = (f"containerd would not run the nvidia wiring in {holder}: {where} would have "
                   + "; ".join(problems))
    host.log_styled(f"gpu-node: {changed} was not changed: {problem}", fg="red", log_func=logger.error)
    return False
