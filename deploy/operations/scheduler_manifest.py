"""
The safe kube-scheduler static pod edit: the kubelet restarts the scheduler as soon as its
manifest changes, and a broken manifest leaves the cluster without a scheduler. So the edited
copy is validated and staged outside the manifests folder (the kubelet reads every file in it),
the current manifest is backed up, the copy is moved in, and the operation waits, bounded, for
the new scheduler pod to be Ready; otherwise the backup goes back in and the operation fails.
The restored manifest loads the config file again, so the config the scheduler ran with is kept
beside the backup before a new one is written, and goes back in with it.
"""

from __future__ import annotations

import hashlib
import posixpath

from pyinfra import host
from pyinfra.api import QuoteString, StringCommand, operation
from pyinfra.facts.files import Sha256File

from ..facts.files import FileText
from ..facts.k8s import kubectl
from ..foundations.pyinfra_api import Commands
from ..k8s.gpushare import (
    CONFIG_CHECKSUM_ANNOTATION,
    NAMESPACE,
    ManifestError,
    check_scheduler_manifest,
    edit_scheduler_manifest,
)
from .failure import failing_command
from .upload import Staging, Upload

POLL_SECONDS = 3
# The mirror pod's config hash (new manifest), our checksum annotation, and Ready.
POD_STATE_TEMPLATE = (
    '{{index .metadata.annotations "kubernetes.io/config.hash"}} '
    '{{index .metadata.annotations "' + CONFIG_CHECKSUM_ANNOTATION + '"}} '
    '{{range .status.conditions}}{{if eq .type "Ready"}}{{.status}}{{end}}{{end}}'
)


def staging_paths(work_dir: str) -> dict[str, str]:
    """Where the edited copy, the rollback backup and the first (pre-gpushare) copy live."""
    return {
        "staged": posixpath.join(work_dir, "kube-scheduler.yaml.new"),
        "backup": posixpath.join(work_dir, "kube-scheduler.yaml.backup"),
        "original": posixpath.join(work_dir, "kube-scheduler.yaml.before-gpushare"),
        "restore": posixpath.join(work_dir, "kube-scheduler.yaml.restore"),
        "config_backup": posixpath.join(work_dir, "scheduler-config.yaml.backup"),
        "config_restore": posixpath.join(work_dir, "scheduler-config.yaml.restore"),
    }


@operation()
def keep_scheduler_config(config_path: str, config_sha256: str, work_dir: str) -> Commands:
    """
    Before ``config_path`` is replaced by a config with SHA-256 ``config_sha256``: copy the one the
    scheduler runs with beside the manifest's backup (none yet: no copy), for the swap's rollback.
    """
    if host.get_fact(Sha256File, path=config_path) == config_sha256:
        host.noop(f"{config_path} is already the new config")
        return
    paths = staging_paths(work_dir)
    config, backup = QuoteString(config_path), QuoteString(paths["config_backup"])
    yield StringCommand(
        "mkdir -p",
        QuoteString(work_dir),
        "&& chmod 700",
        QuoteString(work_dir),
        "&&",
        "if [ -e",
        config,
        "]; then cp -p",
        config,
        backup,
        "; else rm -f",
        backup,
        "; fi",
    )


def swap_in_command(
    manifest_path: str,
    work_dir: str,
    staged_sha256: str,
    config_sha256: str,
    kubeconfig: str | None,
    pod_name: str,
    timeout: int,
    config_path: str | None = None,
    placed: str = "",
) -> StringCommand:
    """
    One shell script: check the staged copy is the validated one, back up, move in, wait for
    the new scheduler pod (new config hash, our checksum, Ready) until ``timeout``; on timeout
    move the backup back in (atomically, through a copy outside the manifests folder) and fail.
    With ``config_path``: on timeout the config kept by ``keep_scheduler_config`` goes back in first
    (the restored manifest loads it); on success that copy is dropped. ``placed``: the staging's
    ``place_script``, which puts the staged copy in ``work_dir`` (made 0700) first.
    """
    paths = staging_paths(work_dir)
    config_success: str | StringCommand = ""
    config_rollback: str | StringCommand = ""
    if config_path:
        kept, kept_restore = QuoteString(paths["config_backup"]), QuoteString(paths["config_restore"])
        config_success = StringCommand("rm -f", kept, ";")
        config_rollback = StringCommand(
            "if [ -e",
            kept,
            "]; then cp -p",
            kept,
            kept_restore,
            "&& mv -f",
            kept_restore,
            QuoteString(config_path),
            "&& rm -f",
            kept,
            "; fi;",
        )
    manifest, staged, backup = QuoteString(manifest_path), QuoteString(paths["staged"]), QuoteString(paths["backup"])
    original, restore = QuoteString(paths["original"]), QuoteString(paths["restore"])
    pod_state = kubectl(
        kubeconfig,
        "-n",
        NAMESPACE,
        "get",
        "pod",
        QuoteString(pod_name),
        "-o",
        QuoteString(f"go-template={POD_STATE_TEMPLATE}"),
    )
    work = QuoteString(work_dir)
    return StringCommand(
        "mkdir -p",
        work,
        "&& chmod 700",
        work,
        "|| exit 1;",
        placed,
        "_sha=$(sha256sum",
        staged,
        "| cut -d' ' -f1);",
        'if [ "$_sha" !=',
        QuoteString(staged_sha256),
        "]; then",
        "echo",
        QuoteString(f"{paths['staged']} is not the validated copy: not moved in"),
        ">&2; exit 1; fi;",
        "cp -p",
        manifest,
        backup,
        "&&",
        "{ [ -e",
        original,
        "] || cp -p",
        manifest,
        original,
        "; } &&",
        "chmod --reference",
        manifest,
        staged,
        "|| exit 1;",
        "_old=$(",
        pod_state,
        "2>/dev/null | cut -d' ' -f1);",
        "mv -f",
        staged,
        manifest,
        "|| exit 1;",
        f"_deadline=$(( $(date +%s) + {int(timeout)} ));",
        "while :; do",
        "_state=$(",
        pod_state,
        "2>/dev/null);",
        "set -- $_state;",
        'if [ -n "$1" ] && [ "$1" != "$_old" ] && [ "$2" =',
        QuoteString(config_sha256),
        '] && [ "$3" = True ]; then',
        config_success,
        "echo",
        QuoteString(f"kube-scheduler pod {pod_name} is Ready with the gpushare scheduler config"),
        "; exit 0; fi;",
        '[ "$(date +%s)" -ge "$_deadline" ] && break;',
        f"sleep {POLL_SECONDS};",
        "done;",
        config_rollback,
        "cp -p",
        backup,
        restore,
        "&& mv -f",
        restore,
        manifest,
        ";",
        "echo",
        QuoteString(
            f"kube-scheduler pod {pod_name} was not Ready with the new manifest within {int(timeout)}s: "
            f"restored {manifest_path} from {paths['backup']}"
        ),
        ">&2; exit 1",
    )


@operation()
def configure_scheduler_manifest(
    config_path: str,
    config_sha256: str,
    kubeconfig: str | None,
    pod_name: str,
    work_dir: str,
    manifest_path: str = "/etc/kubernetes/manifests/kube-scheduler.yaml",
    timeout: int = 180,
) -> Commands:
    """
    Point the kube-scheduler static pod at ``config_path`` (flag, hostPath volume and mount, each
    once, and the config's checksum so a new config restarts it), keeping every other field.

    + config_sha256: SHA-256 of the config file's content, kept as a pod annotation
    + pod_name: the scheduler's mirror pod, ``kube-scheduler-<node name>``
    + work_dir: outside the manifests folder, on the same filesystem (the move must be atomic)
    + timeout: seconds the new scheduler pod has to become Ready before the backup is restored
    """
    manifests_dir = posixpath.dirname(manifest_path)
    if (posixpath.normpath(work_dir) + "/").startswith(manifests_dir + "/"):
        yield failing_command(f"{work_dir}: the staging folder must be outside {manifests_dir}")
        return
    current = host.get_fact(FileText, path=manifest_path)
    if current is None:
        yield failing_command(
            f"{manifest_path} does not exist: not a kubeadm control-plane host (kube-scheduler as a static pod)"
        )
        return
    try:
        edited = edit_scheduler_manifest(current, config_path, config_sha256)
        if edited is current:
            host.noop(f"{manifest_path} already loads {config_path}")
            return
        check_scheduler_manifest(edited, config_path)
    except ManifestError as error:
        yield failing_command(f"{manifest_path}: {error} (left unchanged)")
        return

    staging = Staging.new(host, [Upload(staging_paths(work_dir)["staged"], edited.encode(), live=manifest_path)])
    yield from staging.commands()
    yield swap_in_command(
        placed=staging.place_script(),
        manifest_path=manifest_path,
        work_dir=work_dir,
        staged_sha256=hashlib.sha256(edited.encode()).hexdigest(),
        config_sha256=config_sha256,
        kubeconfig=kubeconfig,
        pod_name=pod_name,
        timeout=timeout,
        config_path=config_path,
    )
