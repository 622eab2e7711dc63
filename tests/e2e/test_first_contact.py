"""
First contact: a host gpu-node cannot work on is refused by preflight, in one line naming the
problem, before any change. Real: the node image started as a plain container, PID 1 not systemd
(what `docker run` of a distribution image gives), reached by pyinfra's own @docker connector.
"""

from __future__ import annotations

from harness import Node

ETC_DIGESTS = "find /etc -xdev -type f -print0 | sort -z | xargs -0 sha256sum"


def test_a_container_without_systemd_as_pid_1_is_refused_in_one_line_before_any_change(image):
    node = Node(image=image, init=("sleep", "infinity")).start()
    try:
        before = node.sh(ETC_DIGESTS).stdout
        result = node.deploy(json_output=False)
        assert result.returncode != 0
        lines = [line.strip() for line in result.output.splitlines() if "gpu-node:" in line or "Traceback" in line
                 or "could not load fact" in line]
        assert lines == [f"[{node.target}] gpu-node: systemd is not running as PID 1 (PID 1 is sleep): gpu-node "
                         "enables and restarts services through systemd; run it on a host booted with systemd"], \
            result.explain()
        assert node.sh(ETC_DIGESTS).stdout == before
    finally:
        node.remove()
