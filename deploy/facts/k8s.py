"""
Kubernetes facts, read on the control plane through ``kubectl`` (cluster version and
reachability, nodes and their labels, objects a manifest names, a server-side diff, a helm
release). What a GPU node reports about itself for its labels: deploy/facts/gpu_node_identity.py.

Every kubectl fact goes through ``captured()``: one shell command that always exits 0 and
reports kubectl's exit code, stdout and stderr on prefixed lines, so a failing kubectl
becomes a clear error instead of a failed fact.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from pyinfra.api import QuoteString, StringCommand
from pyinfra.api.exceptions import FactProcessError

from ..foundations import node_text
from .base import NodeFact

KUBECTL_REQUEST_TIMEOUT = "20s"
FIELD_MANAGER = "gpu-node"


# kubeadm's cluster-admin kubeconfig: where the kubeconfig setting is unset and kubectl finds no
# kubeconfig of its own (no KUBECONFIG, no ~/.kube/config), as on a kubeadm control plane run as root.
KUBEADM_ADMIN_CONF = "/etc/kubernetes/admin.conf"
# What kubectl (and helm) read with no --kubeconfig: client-go's loading rules.
_OWN_KUBECONFIG = '[ -n "${KUBECONFIG-}" ] || [ -e "${HOME-}/.kube/config" ]'


def kubeconfig_option(kubeconfig: str | None) -> StringCommand:
    """
    The option kubectl and helm get: ``--kubeconfig K`` for a set path; unset, none while the
    host's kubectl has a kubeconfig of its own (KUBECONFIG there, else ~/.kube/config, read as
    kubectl reads them, a list of files merged), else kubeadm's admin.conf.
    """
    if kubeconfig:
        return StringCommand("--kubeconfig", QuoteString(kubeconfig))
    return StringCommand(f"$({_OWN_KUBECONFIG} || echo --kubeconfig={KUBEADM_ADMIN_CONF})")


def kubeconfig_problem(kubeconfig: str | None) -> StringCommand:
    """Prints why kubectl has no kubeconfig it can read (one line), nothing when it has one."""
    if kubeconfig:
        return StringCommand(
            "[ -r",
            QuoteString(kubeconfig),
            "] || echo",
            QuoteString("the kubeconfig does not exist or is not readable"),
        )
    # kubectl skips the files of a KUBECONFIG list that do not exist and merges the others.
    return StringCommand(
        'if [ -n "${KUBECONFIG-}" ]; then',
        '( set -f; IFS=:; for _f in $KUBECONFIG; do [ -r "$_f" ] && exit 0; done;',
        'echo "KUBECONFIG=$KUBECONFIG names no readable file" );',
        'elif [ -e "${HOME-}/.kube/config" ]; then',
        '[ -r "$HOME/.kube/config" ] || echo "$HOME/.kube/config is not readable";',
        f"elif [ -e {KUBEADM_ADMIN_CONF} ]; then",
        f"[ -r {KUBEADM_ADMIN_CONF} ] || echo '{KUBEADM_ADMIN_CONF} is not readable';",
        f"else echo 'KUBECONFIG is unset, and neither ~/.kube/config nor {KUBEADM_ADMIN_CONF} exists'; fi",
    )


def kubeconfig_in_use(kubeconfig: str | None) -> StringCommand:
    """Prints ``kubeconfig WHICH``: the file(s) kubectl reads under the rule of ``kubeconfig_option``."""
    if kubeconfig:
        return StringCommand("echo", QuoteString(f"kubeconfig {kubeconfig}"), ";")
    return StringCommand(
        'if [ -n "${KUBECONFIG-}" ]; then echo "kubeconfig KUBECONFIG=$KUBECONFIG";',
        'elif [ -e "${HOME-}/.kube/config" ]; then echo "kubeconfig $HOME/.kube/config";',
        f"else echo 'kubeconfig {KUBEADM_ADMIN_CONF}'; fi;",
    )


def kubeconfig_words(kubeconfig: str | None) -> str:
    """How a message names the kubeconfig a setting gives."""
    if kubeconfig:
        return f"kubeconfig {kubeconfig}"
    return f"the kubeconfig kubectl finds (KUBECONFIG, ~/.kube/config, else {KUBEADM_ADMIN_CONF})"


def kubectl(kubeconfig: str | None, *args: Any) -> StringCommand:
    """``kubectl --kubeconfig K --request-timeout 20s ARGS``: every kubectl call goes through here."""
    return StringCommand(
        "kubectl",
        kubeconfig_option(kubeconfig),
        f"--request-timeout={KUBECTL_REQUEST_TIMEOUT}",
        *args,
    )


def with_stdin(text: str, command: StringCommand) -> StringCommand:
    """Feed ``text`` to ``command`` on stdin (manifests for ``-f -``), without a file on the host."""
    return StringCommand("printf '%s\\n'", QuoteString(text), "|", command)


def captured(command: StringCommand, prefix: str = "") -> StringCommand:
    """
    Run ``command``, then print ``rc N``, its stderr as ``err ...`` lines and its stdout as
    ``out ...`` lines (each tag after ``prefix``, to tell several commands apart); always
    exit 0 (a fact whose command fails would fail the host).
    """
    return StringCommand(
        "_e=$(mktemp);",
        "_o=$(",
        command,
        '2>"$_e");',
        "_rc=$?;",
        f'echo "{prefix}rc $_rc";',
        f"sed 's/^/{prefix}err /' \"$_e\";",
        'rm -f "$_e";',
        f"[ -n \"$_o\" ] && printf '%s\\n' \"$_o\" | sed 's/^/{prefix}out /';",
        "true",
    )


def parse_captured(lines: list[str], prefix: str = "") -> tuple[int, str, str]:
    """(exit code, stdout, stderr) from the lines ``captured()`` prints."""
    code, out, err = None, [], []
    for line in lines:
        if not line.startswith(prefix):
            continue
        tag, _, rest = line[len(prefix) :].partition(" ")
        if tag == "rc":
            code = int(rest.strip())
        elif tag == "out":
            out.append(rest)
        elif tag == "err":
            err.append(rest)
    if code is None:
        raise FactProcessError(f"no exit code in the output of a command ({prefix or 'kubectl'})")
    return code, "\n".join(out), "\n".join(err)


def cluster_json(text: str, what: str, parse: Callable[[str], Any] = json.loads) -> Any:
    """``parse(text)`` of what kubectl or helm printed, through the guard of every parser
    (deploy/foundations/node_text.py), a fact error in one line naming ``what``. Its size is not bounded: a
    large cluster's answer is tens of MB, in memory already, and json reads it in well under a
    second. A syntax error passes through for the fact to word."""
    try:
        return node_text.parsed(parse, text, what, max_bytes=None)
    except node_text.UnreadableText as error:
        raise FactProcessError(str(error)) from None


def first_error_line(stderr: str) -> str:
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    return lines[-1] if lines else "no error output"


def unreadable_reason(line: str) -> str:
    """The reason a ``kubeconfig-unreadable REASON`` line gives (kubeconfig_problem's words)."""
    return line.partition(" ")[2].strip() or "the kubeconfig does not exist or is not readable"


def kubeconfig_read(lines: list[str]) -> str | None:
    """The kubeconfig a ``kubeconfig WHICH`` line (kubeconfig_in_use) names."""
    return next((line.partition(" ")[2] for line in lines if line.startswith("kubeconfig ")), None)


class KubeCluster(NodeFact[dict[str, Any]]):
    """
    Whether kubectl exists and the API server answers with the given kubeconfig (None: the one
    kubectl finds, see ``kubeconfig_option``), which kubeconfig that is, and the server's version.

    .. code:: python

        {"kubectl": True, "kubeconfig_readable": True, "reachable": True,
         "kubeconfig": "/root/.kube/config",  # or "KUBECONFIG=/a:/b"; None when not readable
         "version": "1.30", "git_version": "v1.30.2", "error": None}
    """

    def command(self, kubeconfig: str | None) -> StringCommand:
        return StringCommand(
            "if ! command -v kubectl >/dev/null 2>&1; then echo kubectl-missing;",
            "elif _why=$(",
            kubeconfig_problem(kubeconfig),
            '); [ -n "$_why" ];',
            'then echo "kubeconfig-unreadable $_why";',
            "else",
            kubeconfig_in_use(kubeconfig),
            captured(kubectl(kubeconfig, "get", "--raw", "/version")),
            "; fi",
        )

    @staticmethod
    def default() -> dict[str, Any]:
        return {
            "kubectl": False,
            "kubeconfig_readable": False,
            "reachable": False,
            "kubeconfig": None,
            "version": None,
            "git_version": None,
            "error": "no output",
        }

    def process(self, output: list[str]) -> dict[str, Any]:
        state = self.default()
        if output[0] == "kubectl-missing":
            state["error"] = "kubectl is not installed (not on PATH)"
            return state
        state["kubectl"] = True
        if output[0].startswith("kubeconfig-unreadable"):
            state["error"] = unreadable_reason(output[0])
            return state
        state["kubeconfig_readable"] = True
        state["kubeconfig"] = kubeconfig_read(output)
        code, out, err = parse_captured(output)
        if code != 0:
            state["error"] = f"the API server did not answer: {first_error_line(err)}"
            return state
        try:
            info = cluster_json(out, "the API server's /version")
            major, minor = (int(re.sub(r"\D", "", info[part])) for part in ("major", "minor"))
        except (ValueError, KeyError, TypeError):
            raise FactProcessError(f"unexpected /version answer: {out[:200]!r}") from None
        state.update(reachable=True, version=f"{major}.{minor}", git_version=info.get("gitVersion"), error=None)
        return state


class KubeNodes(NodeFact[dict[str, Any]]):
    """
    The cluster's nodes and their labels (None when kubectl failed: see ``error``).

    .. code:: python

        {"nodes": {"gpu1": {"kubernetes.io/hostname": "gpu1", ...}}, "error": None}
    """

    def command(self, kubeconfig: str | None) -> str | StringCommand:
        return captured(kubectl(kubeconfig, "get", "nodes", "-o", "json"))

    @staticmethod
    def default() -> dict[str, Any]:
        return {"nodes": None, "error": "no output"}

    def process(self, output: list[str]) -> dict[str, Any]:
        code, out, err = parse_captured(output)
        if code != 0:
            return {"nodes": None, "error": first_error_line(err)}
        try:
            items = cluster_json(out, "kubectl get nodes").get("items", [])
        except (ValueError, AttributeError):
            raise FactProcessError(f"kubectl get nodes: not JSON: {out[:200]!r}") from None
        return {
            "nodes": {item["metadata"]["name"]: dict(item["metadata"].get("labels") or {}) for item in items},
            "error": None,
        }


def object_key(obj: dict[str, Any]) -> tuple[str, str, str]:
    """(kind, namespace, name) of a manifest or live object; namespace '' when cluster-scoped."""
    metadata = obj.get("metadata") or {}
    return (obj["kind"], metadata.get("namespace") or "", metadata["name"])


class KubeLiveObjects(NodeFact[dict[str, Any]]):
    """
    The live objects a manifest names (missing ones left out), with their annotations.
    One ``kubectl get -f - --ignore-not-found -o json``.

    .. code:: python

        {"objects": {("DaemonSet", "nvidia-device-plugin", "nvidia-device-plugin"):
                     {"gpu-node.io/digest": "..."}}, "error": None}
    """

    def command(self, kubeconfig: str | None, manifest: str) -> str | StringCommand:
        return captured(with_stdin(manifest, kubectl(kubeconfig, "get", "-f", "-", "--ignore-not-found", "-o", "json")))

    @staticmethod
    def default() -> dict[str, Any]:
        return {"objects": None, "error": "no output"}

    def process(self, output: list[str]) -> dict[str, Any]:
        code, out, err = parse_captured(output)
        if code != 0:
            return {"objects": None, "error": first_error_line(err)}
        objects = {}
        for document in cluster_json(out, "kubectl get", _json_documents):
            items = document.get("items", []) if document.get("kind") == "List" else [document]
            for item in items:
                annotations = (item.get("metadata") or {}).get("annotations") or {}
                objects[object_key(item)] = dict(annotations)
        return {"objects": objects, "error": None}


def _json_documents(text: str) -> list[dict[str, Any]]:
    """kubectl prints one JSON value per object found, or one List: read them all."""
    decoder = json.JSONDecoder()
    documents, index = [], 0
    text = text.strip()
    while index < len(text):
        try:
            value, end = decoder.raw_decode(text, index)
        except json.JSONDecodeError:
            raise FactProcessError(f"kubectl get: not JSON: {text[index : index + 200]!r}") from None
        documents.append(value)
        index = end
        while index < len(text) and text[index].isspace():
            index += 1
    return documents


class KubeServerSideDiff(NodeFact[dict[str, Any]]):
    """
    ``kubectl diff --server-side`` of a manifest against the cluster: exit 0 no difference,
    1 a difference, anything else an error.

    .. code:: python

        {"changed": True, "diff": "...", "error": None}
    """

    def command(self, kubeconfig: str | None, manifest: str, field_manager: str = FIELD_MANAGER) -> str | StringCommand:
        return captured(
            with_stdin(
                manifest,
                kubectl(
                    kubeconfig,
                    "diff",
                    "--server-side",
                    f"--field-manager={field_manager}",
                    "--force-conflicts",
                    "-f",
                    "-",
                ),
            )
        )

    @staticmethod
    def default() -> dict[str, Any]:
        return {"changed": None, "diff": "", "error": "no output"}

    def process(self, output: list[str]) -> dict[str, Any]:
        code, out, err = parse_captured(output)
        if code == 0:
            return {"changed": False, "diff": "", "error": None}
        if code == 1:
            return {"changed": True, "diff": out, "error": None}
        return {"changed": None, "diff": out, "error": first_error_line(err)}


class HelmRelease(NodeFact[dict[str, Any]]):
    """
    A helm release: whether helm exists, the release's chart, status and user-supplied values.

    .. code:: python

        {"helm": True, "exists": True, "chart": "nvidia-device-plugin-0.17.0",
         "status": "deployed", "values": {...}, "error": None}
    """

    def command(self, kubeconfig: str | None, namespace: str, release: str) -> StringCommand:
        helm = StringCommand("helm", kubeconfig_option(kubeconfig), "-n", QuoteString(namespace))
        return StringCommand(
            "if ! command -v helm >/dev/null 2>&1; then echo helm-missing; else",
            captured(
                StringCommand(helm, "list", "--filter", QuoteString(f"^{release}$"), "-o", "json"), prefix="list-"
            ),
            ";",
            captured(StringCommand(helm, "get", "values", QuoteString(release), "-o", "json"), prefix="values-"),
            "; fi",
        )

    @staticmethod
    def default() -> dict[str, Any]:
        return {"helm": False, "exists": False, "chart": None, "status": None, "values": None, "error": "no output"}

    def process(self, output: list[str]) -> dict[str, Any]:
        state = self.default()
        if output[0] == "helm-missing":
            state["error"] = "helm is not installed (not on PATH)"
            return state
        state["helm"] = True
        code, out, err = parse_captured(output, "list-")
        if code != 0:
            state["error"] = f"helm list: {first_error_line(err)}"
            return state
        state["error"] = None
        try:
            releases = cluster_json(out or "[]", "helm list")
            if not releases:
                return state
            state.update(exists=True, chart=releases[0].get("chart"), status=releases[0].get("status"))
            code, out, err = parse_captured(output, "values-")
            if code == 0:
                state["values"] = cluster_json(out or "{}", "helm get values") or {}
        except (ValueError, AttributeError, KeyError, TypeError):
            raise FactProcessError(f"helm: not the JSON expected: {out[:200]!r}") from None
        return state
