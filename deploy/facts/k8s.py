"""
Kubernetes facts, read on the control plane through ``kubectl`` (cluster version and
reachability, nodes and their labels, objects a manifest names, a server-side diff), and
the GPU facts a GPU node reports about itself (for its labels).

Every kubectl fact goes through ``captured()``: one shell command that always exits 0 and
reports kubectl's exit code, stdout and stderr on prefixed lines, so a failing kubectl
becomes a clear error instead of a failed fact.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from pyinfra.api import QuoteString, StringCommand
from pyinfra.api.exceptions import FactProcessError

from ..foundations import node_text
from .base import NodeFact
from ..runtimes.cdi import SPEC_PATH as CDI_SPEC

KUBECTL_REQUEST_TIMEOUT = "20s"
FIELD_MANAGER = "gpu-node"
# Label values: at most 63 characters, alphanumeric at both ends, '-', '_', '.' inside.
LABEL_VALUE_MAX = 63


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
        return StringCommand("[ -r", QuoteString(kubeconfig), "] || echo",
                             QuoteString("the kubeconfig does not exist or is not readable"))
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
        "kubectl", kubeconfig_option(kubeconfig), f"--request-timeout={KUBECTL_REQUEST_TIMEOUT}", *args,
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
        "_e=$(mktemp);", "_o=$(", command, "2>\"$_e\");", "_rc=$?;",
        f"echo \"{prefix}rc $_rc\";", f"sed 's/^/{prefix}err /' \"$_e\";", "rm -f \"$_e\";",
        f"[ -n \"$_o\" ] && printf '%s\\n' \"$_o\" | sed 's/^/{prefix}out /';", "true",
    )


def parse_captured(lines: list[str], prefix: str = "") -> tuple[int, str, str]:
    """(exit code, stdout, stderr) from the lines ``captured()`` prints."""
    code, out, err = None, [], []
    for line in lines:
        if not line.startswith(prefix):
            continue
        tag, _, rest = line[len(prefix):].partition(" ")
        if tag == "rc":
            code = int(rest.strip())
        elif tag == "out":
            out.append(rest)
        elif tag == "err":
            err.append(rest)
    if code is None:
        raise FactProcessError(f"no exit code in the output of a command ({prefix or 'kubectl'})")
    return code, "\n".join(out), "\n".join(err)


def cluster_json(text: str, what: str, parse=json.loads):
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


class KubeCluster(NodeFact):
    """
    Whether kubectl exists and the API server answers with the given kubeconfig (None: the one
    kubectl finds, see ``kubeconfig_option``), which kubeconfig that is, and the server's version.

    .. code:: python

        {"kubectl": True, "kubeconfig_readable": True, "reachable": True,
         "kubeconfig": "/root/.kube/config",  # or "KUBECONFIG=/a:/b"; None when not readable
         "version": "1.30", "git_version": "v1.30.2", "error": None}
    """

    def command(self, kubeconfig):
        return StringCommand(
            "if ! command -v kubectl >/dev/null 2>&1; then echo kubectl-missing;",
            "elif _why=$(", kubeconfig_problem(kubeconfig), '); [ -n "$_why" ];',
            'then echo "kubeconfig-unreadable $_why";',
            "else", kubeconfig_in_use(kubeconfig), captured(kubectl(kubeconfig, "get", "--raw", "/version")), "; fi",
        )

    @staticmethod
    def default():
        return {"kubectl": False, "kubeconfig_readable": False, "reachable": False, "kubeconfig": None,
                "version": None, "git_version": None, "error": "no output"}

    def process(self, output):
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


class KubeNodes(NodeFact):
    """
    The cluster's nodes and their labels (None when kubectl failed: see ``error``).

    .. code:: python

        {"nodes": {"gpu1": {"kubernetes.io/hostname": "gpu1", ...}}, "error": None}
    """

    def command(self, kubeconfig):
        return captured(kubectl(kubeconfig, "get", "nodes", "-o", "json"))

    @staticmethod
    def default():
        return {"nodes": None, "error": "no output"}

    def process(self, output):
        code, out, err = parse_captured(output)
        if code != 0:
            return {"nodes": None, "error": first_error_line(err)}
        try:
            items = cluster_json(out, "kubectl get nodes").get("items", [])
        except (ValueError, AttributeError):
            raise FactProcessError(f"kubectl get nodes: not JSON: {out[:200]!r}") from None
        return {
            "nodes": {
                item["metadata"]["name"]: dict(item["metadata"].get("labels") or {}) for item in items
            },
            "error": None,
        }


def object_key(obj: dict) -> tuple[str, str, str]:
    """(kind, namespace, name) of a manifest or live object; namespace '' when cluster-scoped."""
    metadata = obj.get("metadata") or {}
    return (obj["kind"], metadata.get("namespace") or "", metadata["name"])


class KubeLiveObjects(NodeFact):
    """
    The live objects a manifest names (missing ones left out), with their annotations.
    One ``kubectl get -f - --ignore-not-found -o json``.

    .. code:: python

        {"objects": {("DaemonSet", "nvidia-device-plugin", "nvidia-device-plugin"):
                     {"gpu-node.io/digest": "..."}}, "error": None}
    """

    def command(self, kubeconfig, manifest):
        return captured(with_stdin(manifest, kubectl(kubeconfig, "get", "-f", "-", "--ignore-not-found",
                                                     "-o", "json")))

    @staticmethod
    def default():
        return {"objects": None, "error": "no output"}

    def process(self, output):
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


def _json_documents(text: str) -> list[dict]:
    """kubectl prints one JSON value per object found, or one List: read them all."""
    decoder = json.JSONDecoder()
    documents, index = [], 0
    text = text.strip()
    while index < len(text):
        try:
            value, end = decoder.raw_decode(text, index)
        except json.JSONDecodeError:
            raise FactProcessError(f"kubectl get: not JSON: {text[index:index + 200]!r}") from None
        documents.append(value)
        index = end
        while index < len(text) and text[index].isspace():
            index += 1
    return documents


class KubeServerSideDiff(NodeFact):
    """
    ``kubectl diff --server-side`` of a manifest against the cluster: exit 0 no difference,
    1 a difference, anything else an error.

    .. code:: python

        {"changed": True, "diff": "...", "error": None}
    """

    def command(self, kubeconfig, manifest, field_manager=FIELD_MANAGER):
        return captured(with_stdin(manifest, kubectl(
            kubeconfig, "diff", "--server-side", f"--field-manager={field_manager}", "--force-conflicts",
            "-f", "-",
        )))

    @staticmethod
    def default():
        return {"changed": None, "diff": "", "error": "no output"}

    def process(self, output):
        code, out, err = parse_captured(output)
        if code == 0:
            return {"changed": False, "diff": "", "error": None}
        if code == 1:
            return {"changed": True, "diff": out, "error": None}
        return {"changed": None, "diff": out, "error": first_error_line(err)}


# Reads the GPUs' product names through NVML itself, for a driver root with a libnvidia-ml but no
# nvidia-smi (NVIDIA's mock NVML has none; a driver container keeps nvidia-smi off the host's PATH).
# python3's ctypes is the only NVML client such a host reliably has; without python3 the fact says so.
NVML_PRODUCTS_PY = """\
import ctypes, sys
try:
    nvml = ctypes.CDLL(sys.argv[1])
    nvml.nvmlErrorString.restype = ctypes.c_char_p
except (OSError, AttributeError) as error:
    print("nvml failed cannot load NVML from " + sys.argv[1] + ": " + str(error)); sys.exit(0)
def check(code, call):
    if code:
        print("nvml failed " + call + ": " + nvml.nvmlErrorString(code).decode(errors="replace")); sys.exit(0)
check(nvml.nvmlInit_v2(), "nvmlInit_v2")
count, names = ctypes.c_uint(), []
check(nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)), "nvmlDeviceGetCount_v2")
for index in range(count.value):
    handle, name = ctypes.c_void_p(), ctypes.create_string_buffer(96)
    check(nvml.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle)), "nvmlDeviceGetHandleByIndex_v2")
    check(nvml.nvmlDeviceGetName(handle, name, 96), "nvmlDeviceGetName")
    names.append(name.value.decode(errors="replace"))
nvml.nvmlShutdown()
print("nvml ok")
for name in names:
    print("product " + name)
"""
# Where driver installs and driver containers put libnvidia-ml, relative to the driver root.
NVML_LIBRARY_DIRS = ("usr/lib64", "usr/lib/x86_64-linux-gnu", "usr/lib/aarch64-linux-gnu", "usr/lib",
                     "lib64", "lib/x86_64-linux-gnu", "lib/aarch64-linux-gnu")


class GpuNodeIdentity(NodeFact):
    """
    What a GPU node says about itself, for its Kubernetes labels: its hostname (the kubelet's
    default node name), NVIDIA display/3D controllers on the PCI bus, and the GPUs' product names.
    The names come from nvidia-smi on PATH, else the one under ``driver_root`` (run with that
    root's libnvidia-ml); where neither answers with names, from NVML itself through the driver
    root's libnvidia-ml (a driver root without a working nvidia-smi, such as NVIDIA's mock NVML).

    .. code:: python

        {"hostname": "gpu1", "pci_gpus": 2, "products": ["NVIDIA A100-SXM4-40GB", ...],
         "nvidia_smi": "ok",     # or "missing", "exit 9", "unexpected output"
         "nvml": None,           # not needed; else "ok", "no library", "no python3", "failed <why>"
         "cdi_spec": True}       # the node has NVIDIA's CDI spec (the deploy's CDI stage wrote it)
    """

    def command(self, driver_root):
        root = driver_root.rstrip("/")
        library_dirs = " ".join(NVML_LIBRARY_DIRS)
        return StringCommand(
            "echo \"hostname $(hostname 2>/dev/null || cat /etc/hostname)\";",
            "n=0; for d in /sys/bus/pci/devices/*; do",
            "[ \"$(cat \"$d/vendor\" 2>/dev/null)\" = 0x10de ] || continue;",
            "case \"$(cat \"$d/class\" 2>/dev/null)\" in 0x0300*|0x0302*) n=$((n+1));; esac; done;",
            "echo \"pci_gpus $n\";",
            "[ -f", QuoteString(CDI_SPEC), "] && echo 'cdi_spec 1';",
            StringCommand("_root=", QuoteString(root), ";", _separator=""),
            f"_lib=; for _d in {library_dirs}; do",
            "[ -e \"$_root/$_d/libnvidia-ml.so.1\" ] && { _lib=\"$_root/$_d/libnvidia-ml.so.1\"; break; }; done;",
            "_path=; _ld=${LD_LIBRARY_PATH-}; _named=;",
            "if command -v nvidia-smi >/dev/null 2>&1; then _path=$PATH;",
            "elif [ -x \"$_root/usr/bin/nvidia-smi\" ]; then _path=\"$_root/usr/bin:$PATH\"; _ld=\"${_lib%/*}\"; fi;",
            "if [ -z \"$_path\" ]; then echo 'nvidia_smi missing';",
            "else _o=$(PATH=\"$_path\" LD_LIBRARY_PATH=\"$_ld\" nvidia-smi --query-gpu=name,index --format=csv,noheader",
            "2>/dev/null); _rc=$?;",
            "if [ $_rc -ne 0 ]; then echo \"nvidia_smi exit $_rc\";",
            # Only "<name>, <index>" lines answer the query: a mock driver's fallback nvidia-smi script
            # ignores its arguments and prints its version lines.
            "elif printf '%s\\n' \"$_o\" | grep -qv ', [0-9][0-9]*$' && [ -n \"$_o\" ]; then",
            "echo 'nvidia_smi unexpected output';",
            "else echo 'nvidia_smi ok'; _named=1;",
            "[ -n \"$_o\" ] && printf '%s\\n' \"$_o\" | sed 's/^\\(.*\\), [0-9][0-9]*$/product \\1/'; fi; fi;",
            "if [ -z \"$_named\" ]; then",
            "if [ -z \"$_lib\" ]; then echo 'nvml no library';",
            "elif ! command -v python3 >/dev/null 2>&1; then echo 'nvml no python3';",
            "else _n=$(python3 -c", QuoteString(NVML_PRODUCTS_PY), "\"$_lib\" 2>&1); _rc=$?;",
            "printf '%s\\n' \"$_n\"; [ $_rc -eq 0 ] || echo \"nvml failed python3 exit $_rc\"; fi; fi",
        )

    @staticmethod
    def default():
        return {"hostname": None, "pci_gpus": 0, "products": [], "nvidia_smi": "missing", "nvml": None,
                "cdi_spec": False}

    def process(self, output):
        state = self.default()
        for line in output:
            key, _, value = line.partition(" ")
            value = value.strip()
            if key == "hostname":
                state["hostname"] = value or None
            elif key == "pci_gpus":
                state["pci_gpus"] = int(value or 0)
            elif key == "nvidia_smi":
                state["nvidia_smi"] = value
            elif key == "nvml":
                state["nvml"] = value
            elif key == "cdi_spec":
                state["cdi_spec"] = value == "1"
            elif key == "product" and value:
                state["products"].append(value)
        if state["nvml"] not in (None, "ok"):
            state["products"] = []  # a failed NVML read names no product
        return state


def accelerator_label(product: str | None) -> str | None:
    """
    ``NVIDIA A100-SXM4-40GB`` -> ``nvidia-a100-sxm4-40gb``, ``Tesla T4`` -> ``nvidia-tesla-t4``
    (the seed's ``accelerator=nvidia-tesla-p100`` form); None when there is no product name.
    """
    if not product:
        return None
    value = re.sub(r"[^a-z0-9._]+", "-", product.strip().lower()).strip("-._")
    if not value.startswith("nvidia"):
        value = f"nvidia-{value}"
    value = value[:LABEL_VALUE_MAX].rstrip("-._")
    return value or None


def kube_node_name(node_names: dict[str, str], host_name: str, hostname: str | None) -> str:
    """
    The Kubernetes node name of an inventory host: the ``kube_node_names`` mapping first, else
    the host's own hostname lower-cased (what the kubelet registers by default), else the
    inventory name.
    """
    if host_name in node_names:
        return node_names[host_name]
    if hostname:
        return hostname.strip().lower()
    return host_name


@dataclass(frozen=True)
class GpuNode:
    """One host of the gpu_nodes group, as the control plane sees it."""

    host_name: str  # pyinfra inventory name
    node_name: str  # Kubernetes node name
    products: tuple[str, ...]  # product names (nvidia-smi or NVML), one per GPU; () when unknown
    pci_gpus: int  # NVIDIA GPUs on the PCI bus
    nvidia_smi: str  # "ok", "missing" or "exit N"
    gpu_sharing: str  # the node's own gpu_sharing setting
    nvidia_runtime_default: bool  # the node's own setting
    settings: Any  # the node's full deploy.settings.Settings
    nvml: str | None = None  # NVML read from the driver root when nvidia-smi is missing: "ok", or why not
    cdi_spec: bool = False  # the node has NVIDIA's CDI spec

    @property
    def cdi(self) -> bool:
        """Whether the device plugin hands this node's GPUs out by CDI name: cdi=true, or auto where the
        node's CDI stage wrote the spec (its runtime has CDI and its driver answers)."""
        return self.settings.cdi == "true" or (self.settings.cdi == "auto" and self.cdi_spec)

    @property
    def has_gpu(self) -> bool:
        return self.pci_gpus > 0 or bool(self.products)

    @property
    def accelerator(self) -> str | None:
        return accelerator_label(self.products[0]) if self.products else None


class HelmRelease(NodeFact):
    """
    A helm release: whether helm exists, the release's chart, status and user-supplied values.

    .. code:: python

        {"helm": True, "exists": True, "chart": "nvidia-device-plugin-0.17.0",
         "status": "deployed", "values": {...}, "error": None}
    """

    def command(self, kubeconfig, namespace, release):
        helm = StringCommand("helm", kubeconfig_option(kubeconfig), "-n", QuoteString(namespace))
        return StringCommand(
            "if ! command -v helm >/dev/null 2>&1; then echo helm-missing; else",
            captured(StringCommand(helm, "list", "--filter", QuoteString(f"^{release}$"), "-o", "json"),
                     prefix="list-"), ";",
            captured(StringCommand(helm, "get", "values", QuoteString(release), "-o", "json"),
                     prefix="values-"), "; fi",
        )

    @staticmethod
    def default():
        return {"helm": False, "exists": False, "chart": None, "status": None, "values": None,
                "error": "no output"}

    def process(self, output):
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
