"""Docker facts: dockerd, its version, whether it can validate a config, and daemon.json."""

from __future__ import annotations

import re

from pyinfra.api import FactBase, QuoteString, StringCommand

from deploy.facts.containerd import decode_file

# "Docker version 20.10.24+dfsg1, build 5d6db84", "Docker version 27.3.1, build ce12230"
DOCKER_VERSION_RE = re.compile(r"version\s+v?(\d+)\.(\d+)\.?(\d+)?([^\s,]*)")


def parse_docker_version(line: str) -> dict:
    match = DOCKER_VERSION_RE.search(line)
    if not match:
        return {"version": None, "major": None}
    version = ".".join(part for part in match.group(1, 2, 3) if part is not None) + match[4]
    return {"version": version, "major": int(match[1])}


class DockerState(FactBase):
    """
    dockerd and daemon.json in one command.

    .. code:: python

        {
            "dockerd": "/usr/sbin/dockerd",    # None: Docker is not installed
            "version": "20.10.24+dfsg1", "major": 20,
            "can_validate": False,             # dockerd --validate (Docker 23.0+)
            "config": "{...}",                 # None: daemon.json does not exist
        }
    """

    def command(self, path):
        return StringCommand(
            "bin=$(command -v dockerd 2>/dev/null || true);",
            'echo "dockerd $bin";',
            'if [ -n "$bin" ]; then echo "version $("$bin" --version 2>/dev/null | head -n1)";',
            "\"$bin\" --help 2>&1 | grep -q -e '--validate' && echo validate; fi;",
            "if [ -f", QuoteString(path), "]; then echo config $(base64 -w0 <", QuoteString(path), "); fi;",
            "true",
        )

    @staticmethod
    def default():
        return {"dockerd": None, "version": None, "major": None, "can_validate": False, "config": None}

    def process(self, output):
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
        return state
