"""
Docker facts: dockerd, its version, whether it can validate a config, daemon.json, the unit
that starts dockerd with its EnvironmentFile=s (``deploy/runtimes/docker/unit.py`` reads the
command line out of them), and how many containers run (what a dockerd restart would stop).
"""

from __future__ import annotations

import re
import shlex
from typing import Any

from pyinfra.api import QuoteString, StringCommand

from ..foundations import node_text
from .base import NodeFact
from .containerd import decode_file

# "Docker version 20.10.24+dfsg1, build 5d6db84", "Docker version 27.3.1, build ce12230"
DOCKER_VERSION_RE = re.compile(r"version\s+v?(\d+)\.(\d+)\.?(\d+)?([^\s,]*)")


def parse_docker_version(line: str) -> dict[str, Any]:
    match = DOCKER_VERSION_RE.search(line)
    if not match:
        return {"version": None, "major": None}
    version = ".".join(part for part in match.group(1, 2, 3) if part is not None) + match[4]
    return {"version": version, "major": int(match[1])}


class DockerState(NodeFact[dict[str, Any]]):
    """
    dockerd, daemon.json and the unit that starts dockerd, in one command.

    .. code:: python

        {
            "dockerd": "/usr/sbin/dockerd",    # None: Docker is not installed
            "version": "20.10.24+dfsg1", "major": 20,
            "can_validate": False,             # dockerd --validate (Docker 23.0+)
            "config": "{...}",                 # None: daemon.json does not exist
            "unit": "# /lib/systemd/...",      # `systemctl cat docker.service`; None: no unit
            "environment_files": {"/etc/default/docker": "..."},  # its EnvironmentFile=s that exist
            "containers": 3,                   # running (`docker ps -q`); None: no docker CLI, or no answer
        }
    """

    def command(self, path: str, service: str = "docker") -> StringCommand:
        unit = QuoteString(f"{service}.service")
        return StringCommand(
            "bin=$(command -v dockerd 2>/dev/null || true);",
            'echo "dockerd $bin";',
            'if [ -n "$bin" ]; then echo "version $("$bin" --version 2>/dev/null | head -n1)";',
            "\"$bin\" --help 2>&1 | grep -q -e '--validate' && echo validate;",
            "unit=$(systemctl cat",
            unit,
            "2>/dev/null || true);",
            'if [ -n "$unit" ]; then echo "unit $(printf \'%s\\n\' "$unit" | base64 -w0)";',
            "printf '%s\\n' \"$unit\" | sed -n 's/^[[:space:]]*EnvironmentFile[[:space:]]*=[[:space:]]*-\\{0,1\\}//p'",
            '| while IFS= read -r file; do [ -f "$file" ] &&',
            'echo "envfile $(printf %s "$file" | base64 -w0) $(' + node_text.base64_read('"$file"') + ')"; done; fi;',
            # Bounded: a dockerd that does not answer must not hold the run's one read.
            "if command -v docker >/dev/null 2>&1 && ids=$(timeout 10 docker ps -q 2>/dev/null); then",
            'echo "containers $(printf \'%s\\n\' "$ids" | grep -c .)"; fi; fi;',
            "if [ -f",
            QuoteString(path),
            f"]; then echo config $({node_text.base64_read(shlex.quote(path))}); fi;",
            "true",
        )

    @staticmethod
    def default() -> dict[str, Any]:
        return {
            "dockerd": None,
            "version": None,
            "major": None,
            "can_validate": False,
            "config": None,
            "unit": None,
            "environment_files": {},
            "containers": None,
        }

    def process(self, output: list[str]) -> dict[str, Any]:
        state = self.default()
        for line in output:
            kind, _, rest = line.strip().partition(" ")
            if kind == "dockerd":
                state["dockerd"] = rest.strip() or None
            elif kind == "version":
                state.update(parse_docker_version(rest))
            elif kind == "validate":
                state["can_validate"] = True
            elif kind == "config":
                state["config"] = decode_file(rest, "daemon.json")
            elif kind == "unit":
                state["unit"] = decode_file(rest, "the docker unit")
            elif kind == "containers":
                state["containers"] = int(rest) if rest.strip().isdigit() else None
            elif kind == "envfile":
                name, _, content = rest.partition(" ")
                file = decode_file(name, "an EnvironmentFile name")
                state["environment_files"][file] = decode_file(content, file) if content.strip() else ""
        return state
