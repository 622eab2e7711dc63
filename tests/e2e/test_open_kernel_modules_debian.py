"""
The kernel module flavours on a real bookworm node container, from Debian's real archive, with real
apt and real DKMS.

bookworm's security archive has nvidia-driver 535.309.01 while contrib's nvidia-open-kernel-dkms
exists only at 535.261.03, so the open flavour pins the driver and the open module to 535.261.03
together (and the switch below keeps the driver there: no upgrade nobody asked for). That open module does not build against bookworm's current kernel (6.1.0-56): the
kernel's pci_resize_resource() gained an argument in a stable update, and only 535.309.01's
conftest knows it (the proprietary module builds). So on bookworm the open run must fail with one
line naming the DKMS build failure and its log, never leave the half-configured packages behind
silently; and the operator's way out, switching that node to the proprietary flavour, must replace
the module package in the driver's install transaction (the half-configured open module removed,
no hold left on it; the proprietary one built by DKMS for the headers' kernel and held), report
"reboot required", and a re-run must change nothing. (trixie's open 550.163.01 fails the same way
against its 6.12 kernel, checked by hand on 26 November 2026: no Debian suite has an open module
that builds today, so the open flavour's own success path waits for one.)

No GPU here, and nothing is loaded: DKMS only compiles, modinfo reads the built file.
"""

from __future__ import annotations

import time

from harness import assert_no_change

STAGES = {"stages": "kernel,driver"}
DRIVER = ("nvidia-driver", "nvidia-smi")
OPEN_MODULE, PROPRIETARY_MODULE = "nvidia-open-kernel-dkms", "nvidia-kernel-dkms"
REBOOT_LINE = ("reboot required: the NVIDIA driver changed ({packages}) and its kernel module is not loaded; "
               "reboot the node (or rerun with reboot_allowed=true)")


def dpkg_states(node, *packages: str) -> dict[str, str]:
    """package -> "version status" as dpkg has it (status: installed, half-configured, unpacked...)."""
    out = node.sh("dpkg-query -W -f '${Package}|${Version}|${db:Status-Status}\\n' " + " ".join(packages)
                  + " 2>/dev/null || true").stdout
    return {name: f"{version} {status}" for name, version, status in (line.split("|") for line in out.splitlines())
            if status not in ("not-installed", "config-files")}


def held(node) -> set[str]:
    return set(node.sh("apt-mark showhold").stdout.split())


def preferences(node) -> str:
    """apt's preference files with their mtimes (ns) and checksums: equal before and after means untouched."""
    return node.sh("cd /etc/apt/preferences.d && for f in *; do [ -f \"$f\" ] && stat -c '%n %.9Y' \"$f\" "
                   "&& sha256sum \"$f\"; done; true").stdout


def headers_kernel(node) -> str:
    """The kernel release of the Debian headers linux-headers-amd64 depends on (linux-headers-<release>)."""
    depends = node.sh("dpkg-query -W -f '${Depends}' linux-headers-amd64").stdout
    names = [word.split()[0] for word in depends.split(",") if word.strip()]
    (release,) = [name.removeprefix("linux-headers-") for name in names if name.startswith("linux-headers-")]
    return release


def built_nvidia_modules(node, kernel: str) -> dict[str, str]:
    """The DKMS-built nvidia module files of ``kernel`` -> their modinfo license, read from the file."""
    paths = node.sh(f"find /lib/modules/{kernel}/updates -name 'nvidia-current.ko*' "
                    f"-o -name 'nvidia-current-open.ko*' 2>/dev/null || true").stdout.split()
    return {path: node.sh(f"modinfo -F license {path}").stdout.strip() for path in paths}


def test_open_flavour_on_bookworm_fails_in_one_line_and_switching_to_proprietary_replaces_the_module_held(node):
    seconds = {}
    started = time.monotonic()
    result = node.deploy(data={**STAGES, "nvidia_kernel_modules": "open"}, json_output=False)
    seconds["open (fails)"] = time.monotonic() - started
    assert result.returncode != 0
    assert "Traceback" not in result.output
    kernel = headers_kernel(node)
    lines = [line.strip() for line in result.run_output.splitlines() if "gpu-node:" in line and "DKMS" in line]
    assert len(lines) == 1, result.output[-4000:]
    line = lines[0]
    assert f"DKMS could not build the NVIDIA kernel module for kernel {kernel}: see " in line, line
    assert OPEN_MODULE in line, line
    log = line.split(" see ", 1)[1].split(" on the node", 1)[0]
    assert log.startswith("/var/lib/dkms/nvidia-current-open/535.261.03/") and log.endswith("/make.log"), line
    # the log it names is there and holds the compiler's error
    assert "error:" in node.sh(f"cat {log}").stdout
    # the pinned version was the one both packages have: the driver was not taken from the security archive
    found = dpkg_states(node, "nvidia-driver", OPEN_MODULE, PROPRIETARY_MODULE)
    assert found[OPEN_MODULE].startswith("535.261.03-1 ") and found["nvidia-driver"].startswith("535.261.03-1 ")
    assert PROPRIETARY_MODULE not in found

    # The way out: the proprietary flavour, at the driver's installed version (no upgrade nobody asked
    # for), which its module package has too.
    version = found["nvidia-driver"].split()[0]
    started = time.monotonic()
    switch = node.deploy(data={**STAGES, "nvidia_kernel_modules": "proprietary"}, default_mode=True,
                         json_output=False)
    seconds["switch to proprietary"] = time.monotonic() - started
    print(" ".join(f"{phase} {value:.0f} s;" for phase, value in seconds.items()))
    assert switch.returncode == 0, switch.explain()
    assert "Traceback" not in switch.output
    assert "NVIDIA kernel modules: proprietary" in switch.output
    changed = switch.changed_operations()
    assert "NVIDIA driver | Install the NVIDIA driver" in changed, changed
    assert "NVIDIA driver | Mark the node for a reboot after the driver change" in changed, changed
    assert dpkg_states(node, *DRIVER, OPEN_MODULE, PROPRIETARY_MODULE) == {
        name: f"{version} installed" for name in (*DRIVER, PROPRIETARY_MODULE)}
    now_held = held(node)
    assert {*DRIVER, PROPRIETARY_MODULE} <= now_held and OPEN_MODULE not in now_held, now_held
    status = node.sh("dkms status").stdout
    assert f"nvidia-current/{version.split('-')[0]}, {kernel}, x86_64: installed" in status, status
    assert "nvidia-current-open" not in status, status
    modules = built_nvidia_modules(node, kernel)
    assert list(modules.values()) == ["NVIDIA"], modules  # the proprietary module, and only it
    assert "nvidia-persistenced" in dpkg_states(node, "nvidia-persistenced")
    assert node.sh("systemctl is-enabled nvidia-persistenced.service", check=False).stdout.strip() == "enabled"
    reboot_line = REBOOT_LINE.format(packages=", ".join(sorted((*DRIVER, PROPRIETARY_MODULE))))
    assert reboot_line in switch.output, switch.output[-4000:]
    assert PROPRIETARY_MODULE in node.read("/run/reboot-required.pkgs").split()

    # A -y re-run changes nothing: no rebuild, no hold or apt preference touched.
    (module_file,) = modules
    before = node.stat(module_file), preferences(node), now_held
    assert_no_change(node.deploy(data={**STAGES, "nvidia_kernel_modules": "proprietary"}))
    assert (node.stat(module_file), preferences(node), held(node)) == before
