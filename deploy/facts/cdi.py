"""The node's CDI spec for NVIDIA's GPUs and the toolkit's units that keep it current."""

from __future__ import annotations

import base64
import shlex


from .. import node_text
from .base import NodeFact

REFRESH_PATH_UNIT = "nvidia-cdi-refresh.path"
UNIT_DIRS = ("/etc/systemd/system", "/usr/lib/systemd/system", "/lib/systemd/system")

# The spec is stale when the module index (a driver install rebuilds it) or nvidia-ctk changed after
# it: what the toolkit's own path unit watches. Change times, not modification times: a package
# keeps its build's mtime on the files it installs. Only a missing or stale spec asks nvidia-smi
# whether the driver answers, so a node whose spec is current pays nothing for it.
CDI_SCRIPT = """
ctk=$(command -v nvidia-ctk 2>/dev/null || true)
echo "ctk $ctk"
for dir in __UNIT_DIRS__; do
  if [ -f "$dir/__PATH_UNIT__" ]; then echo "refresh_unit $dir/__PATH_UNIT__"; break; fi
done
# One systemctl call for both (each is a round trip to systemd); is-enabled and is-active print these.
enabled=; active=
for property in $(systemctl show -p UnitFileState -p ActiveState __PATH_UNIT__ 2>/dev/null); do
  case $property in UnitFileState=*) enabled=${property#*=} ;; ActiveState=*) active=${property#*=} ;; esac
done
echo "refresh_enabled $enabled"
echo "refresh_active $active"
[ -f __ENV__ ] && echo "env $(__READ_ENV__)"
[ -f __RUNTIME_CONFIG__ ] && echo "runtime_config $(__READ_RUNTIME_CONFIG__)"
# the newest of their change times, in the shell (uname -r is the kernel's osrelease): one process
read -r kernel < /proc/sys/kernel/osrelease
newest=
for changed in $(stat -c %Z "/lib/modules/$kernel/modules.dep" $ctk 2>/dev/null); do
  { [ -z "$newest" ] || [ "$changed" -gt "$newest" ]; } && newest=$changed
done
echo "inputs_changed $newest"
if [ -f __SPEC__ ]; then
  spec=$(stat -c %Z __SPEC__); echo "spec_changed $spec"; echo "spec $(__READ_SPEC__)"
else
  spec=0
fi
if [ "$spec" = 0 ] || [ "${newest:-0}" -gt "$spec" ]; then
  smi=$(command -v nvidia-smi 2>/dev/null || true)
  if [ -n "$smi" ]; then
    out=$("$smi" -L 2>&1); echo "smi_exit_code $?"
    echo "smi_gpus $(printf '%s\\n' "$out" | grep -c '^GPU [0-9]')"
  fi
fi
true
"""


class CdiState(NodeFact):
    """
    The CDI spec at ``spec`` (its text, and when it was written), the refresh units the toolkit ships (where, enabled,
    active), their environment file's text, the nvidia runtime's config at ``runtime_config`` (its
    mode), the newest of the module index and ``nvidia-ctk``, and, only when the spec is missing or
    older than those, whether ``nvidia-smi -L`` answers with GPUs.

    .. code:: python

        {
            "ctk": "/usr/bin/nvidia-ctk",            # None: the toolkit is not installed
            "refresh_unit": "/usr/lib/systemd/system/nvidia-cdi-refresh.path",  # None: not shipped
            "refresh_enabled": "enabled", "refresh_active": "active",
            "env": None,                              # the environment file's text; None: absent
            "runtime_config": "[nvidia-container-runtime]\\nmode = \\"cdi\\"\\n",  # None: absent
            "inputs_changed": 1764115200,             # ctime of the newest of them
            "spec_changed": 1764115300,               # None: no spec
            "spec": "cdiVersion: 0.5.0\\n...",
            "smi_exit_code": None, "smi_gpus": 0,     # asked only for a missing or stale spec
        }
    """

    def command(self, spec, env, runtime_config):
        return (CDI_SCRIPT.strip()
                .replace("__READ_SPEC__", node_text.base64_read("__SPEC__"))
                .replace("__READ_ENV__", node_text.base64_read("__ENV__"))
                .replace("__READ_RUNTIME_CONFIG__", node_text.base64_read("__RUNTIME_CONFIG__"))
                .replace("__UNIT_DIRS__", " ".join(UNIT_DIRS)).replace("__PATH_UNIT__", REFRESH_PATH_UNIT)
                .replace("__SPEC__", shlex.quote(spec)).replace("__ENV__", shlex.quote(env))
                .replace("__RUNTIME_CONFIG__", shlex.quote(runtime_config)))

    @staticmethod
    def default():
        return {"ctk": None, "refresh_unit": None, "refresh_enabled": None, "refresh_active": None, "env": None,
                "runtime_config": None, "inputs_changed": None, "spec_changed": None, "spec": None,
                "smi_exit_code": None, "smi_gpus": 0}

    def process(self, output):
        state = self.default()
        for line in output:
            kind, _, rest = line.strip().partition(" ")
            rest = rest.strip()
            if kind in ("ctk", "refresh_unit", "refresh_enabled", "refresh_active"):
                state[kind] = rest or None
            elif kind in ("env", "spec", "runtime_config"):
                state[kind] = node_text.decode(base64.b64decode(rest)) if rest else ""
            elif kind in ("inputs_changed", "spec_changed", "smi_exit_code", "smi_gpus") and rest.isdigit():
                state[kind] = int(rest)
        return state


def spec_stale(state: dict) -> bool:
    """Whether the spec is missing or older than the driver's module index or nvidia-ctk."""
    return state["spec_changed"] is None or (state["inputs_changed"] or 0) > state["spec_changed"]
