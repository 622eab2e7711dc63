"""
The quarantine's changes on the control-plane host (deploy/k8s/quarantine.py plans them), one node's
step at a time, each change one kubectl command: the node's JSON patch first (its first operation tests
the resourceVersion, so a node changed since it was read is not patched and the step stops there), then
the DeviceTaintRules it creates, then those it deletes. A step stopped half way is finished by the next
run: its plan makes the rules a record names and the cluster lacks, and deletes gpu-node's rules no
record names.
"""

from __future__ import annotations

import json

from pyinfra.api import QuoteString, operation

from ..facts.k8s import kubectl, with_stdin
from ..foundations.pyinfra_api import Commands
from ..k8s.quarantine import Step
from .kubectl import dump_documents


@operation(is_idempotent=False)
def apply_step(kubeconfig: str | None, step: Step) -> Commands:
    """One node's step: the node patched, rules created, rules deleted."""
    if step.patch:
        yield kubectl(
            kubeconfig,
            "patch",
            "--type=json",
            "-p",
            QuoteString(json.dumps(list(step.patch))),
            "--",  # names are never options (`-f/etc/passwd`, `--all`)
            "node",
            QuoteString(step.node),
        )
    if step.create:
        yield with_stdin(dump_documents(list(step.create)), kubectl(kubeconfig, "create", "-f", "-"))
    if step.delete:
        yield kubectl(
            kubeconfig,
            "delete",
            "--ignore-not-found",
            "--",
            "devicetaintrules",
            *(QuoteString(name) for name in step.delete),
        )
