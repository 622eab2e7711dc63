"""
How the control plane sees one node, for a drain before a restart: read on the control-plane
host with ``kubectl get node NAME -o json`` (the same ``captured()`` form as deploy/facts/k8s.py,
so a failing kubectl is an answer, not a failed fact).
"""

from __future__ import annotations

from typing import Any

from pyinfra.api import QuoteString, StringCommand
from pyinfra.api.exceptions import FactProcessError

from .base import NodeFact
from .k8s import (
    captured,
    cluster_json,
    first_error_line,
    kubeconfig_problem,
    kubectl,
    parse_captured,
    unreadable_reason,
)


class KubeNodeSchedule(NodeFact[dict[str, Any]]):
    """
    Whether the API server answers with ``kubeconfig`` (None: the one kubectl finds), whether ``node`` is registered, and
    whether it is cordoned (``spec.unschedulable``).

    .. code:: python

        {"reachable": True, "registered": True, "unschedulable": False, "error": None}
    """

    def command(self, kubeconfig: str | None, node: str) -> StringCommand:
        return StringCommand(
            "if ! command -v kubectl >/dev/null 2>&1; then echo kubectl-missing;",
            "elif _why=$(",
            kubeconfig_problem(kubeconfig),
            '); [ -n "$_why" ];',
            'then echo "kubeconfig-unreadable $_why";',
            "else",
            captured(kubectl(kubeconfig, "get", "node", QuoteString(node), "-o", "json")),
            "; fi",
        )

    @staticmethod
    def default() -> dict[str, Any]:
        return {"reachable": False, "registered": False, "unschedulable": False, "error": "no output"}

    def process(self, output: list[str]) -> dict[str, Any]:
        state = self.default()
        if output and output[0] == "kubectl-missing":
            state["error"] = "kubectl is not installed (not on PATH)"
            return state
        if output and output[0].startswith("kubeconfig-unreadable"):
            state["error"] = unreadable_reason(output[0])
            return state
        code, out, err = parse_captured(output)
        if code != 0:
            if "(NotFound)" in err:
                state.update(reachable=True, error=None)
                return state
            state["error"] = f"the API server did not answer: {first_error_line(err)}"
            return state
        try:
            spec = cluster_json(out, "kubectl get node").get("spec") or {}
        except (ValueError, AttributeError):
            raise FactProcessError(f"kubectl get node: not a JSON object: {out[:200]!r}") from None
        state.update(reachable=True, registered=True, unschedulable=bool(spec.get("unschedulable")), error=None)
        return state
