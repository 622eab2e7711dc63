"""
The kernel module types on a real bookworm node container, from Debian's real archive, with real
apt and real DKMS.

bookworm's security archive has nvidia-driver 535.309.01 while contrib's nvidia-open-kernel-dkms
exists only at 535.261.03, so the open module type pins the driver and the open module to 535.261.03
together (and the switch below keeps the driver there: no upgrade nobody asked for). That open module does not build against bookworm's current kernel (6.1.0-56): the
kernel's pci_resize_resource() gained an argument in a stable update, and only 535.309.01's
conftest knows it (the proprietary module builds). So on bookworm the open run must fail with one
line naming the DKMS build failure and its log, never leave the half-configured packages behind
silently; and the operator's way out, switching that node to the proprietary module type, must replace
the module package in the driver's install transaction (the half-configured open module removed,
no hold left on it; the proprietary one built by DKMS for the headers' kernel and held), report
"reboot required", and a re-run must change nothing. (trixie's open 550.163.01 fails the same way
against its 6.12 kernel, checked by hand on 26 November 2026: no Debian suite has an open module
that builds today, so the open module type's own success path waits for one.)

The same node then gets a second kernel as an update brings one: Debian's cloud kernel
(``linux-image-cloud-amd64`` from the real archive), its image without its headers. The switch run
installs the headers metapackage that follows that kernel metapackage and builds the module for it
with the real DKMS; verify's boot_kernels step passes; with that kernel's module removed it fails
naming the kernel (it boots next: GRUB's first entry is the newest), in verify's one line and the
fleet report. Debian's real unattended-upgrades (dry run), whose default origins take bookworm-security
with its newer driver, upgrades none of the held, pinned driver packages.

The switch runs on a node whose Secure Boot is on, as a STAND-IN mokutil (tests/standin_mokutil.py:
no EFI variables in a container) says, with module_signing=true and a MOK password: gpu-node
generates the module signing key on the node (root's, 0600), has the real DKMS sign both kernels'
modules with it (the real modinfo names it as their signer), stages the key's enrollment through the
stand-in with the password's SHA-512 crypt hash (checked against the real openssl's), and verify says
"enrolled: pending next boot", then "yes" once the stand-in's next boot confirms it. The re-run keeps
the key and rebuilds nothing. The signing rides on the switch's DKMS builds: no build of its own.

No GPU here, and nothing is loaded: DKMS only compiles, modinfo reads the built file.
"""

from __future__ import annotations

import json
import time

import standin_mokutil
from harness import assert_no_change

STAGES = {"stages": "kernel,driver"}
DRIVER = ("nvidia-driver", "nvidia-smi")
OPEN_MODULE, PROPRIETARY_MODULE = "nvidia-open-kernel-dkms", "nvidia-kernel-dkms"
SIGNING = {"module_signing": "true", "module_signing_mok_password": "e2e-only one-time password"}
KEY, CERT = "/var/lib/gpu-node/module-signing/signing.key", "/var/lib/gpu-node/module-signing/signing.der"
REBOOT_LINE = (
    "reboot required: the NVIDIA driver changed ({packages}) and its kernel module is not loaded; "
    "reboot the node (or rerun with reboot_allowed=true)"
)


def dpkg_states(node, *packages: str) -> dict[str, str]:
    """package -> "version status" as dpkg has it (status: installed, half-configured, unpacked...)."""
    out = node.sh(
        "dpkg-query -W -f '${Package}|${Version}|${db:Status-Status}\\n' " + " ".join(packages) + " 2>/dev/null || true"
    ).stdout
    return {
        name: f"{version} {status}"
        for name, version, status in (line.split("|") for line in out.splitlines())
        if status not in ("not-installed", "config-files")
    }


def held(node) -> set[str]:
    return set(node.sh("apt-mark showhold").stdout.split())


def preferences(node) -> str:
    """apt's preference files with their mtimes (ns) and checksums: equal before and after means untouched."""
    return node.sh(
        'cd /etc/apt/preferences.d && for f in *; do [ -f "$f" ] && stat -c \'%n %.9Y\' "$f" '
        '&& sha256sum "$f"; done; true'
    ).stdout


def headers_kernel(node) -> str:
    """The kernel release of the Debian headers linux-headers-amd64 depends on (linux-headers-<release>)."""
    depends = node.sh("dpkg-query -W -f '${Depends}' linux-headers-amd64").stdout
    names = [word.split()[0] for word in depends.split(",") if word.strip()]
    (release,) = [name.removeprefix("linux-headers-") for name in names if name.startswith("linux-headers-")]
    return release


def built_nvidia_modules(node, kernel: str) -> dict[str, str]:
    """The DKMS-built nvidia module files of ``kernel`` -> their modinfo license, read from the file."""
    paths = node.sh(
        f"find /lib/modules/{kernel}/updates -name 'nvidia-current.ko*' "
        f"-o -name 'nvidia-current-open.ko*' 2>/dev/null || true"
    ).stdout.split()
    return {path: node.sh(f"modinfo -F license {path}").stdout.strip() for path in paths}


def install_second_kernel(node) -> str:
    """Debian's cloud kernel image from the real archive (26 MB), without its headers; returns its release.
    Its initramfs is not generated (update-initramfs diverted to true): no node container boots it, and
    generating it twice cost 40 s here."""
    node.sh(
        "dpkg-divert --local --rename --add /usr/sbin/update-initramfs && ln -s /bin/true /usr/sbin/update-initramfs"
    )
    node.sh(
        "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "
        "linux-image-cloud-amd64"
    )
    depends = node.sh("dpkg-query -W -f '${Depends}' linux-image-cloud-amd64").stdout
    (package,) = [word.split()[0] for word in depends.split(",") if word.strip().startswith("linux-image-")]
    return package.removeprefix("linux-image-")


def verify_steps(node, report) -> tuple[dict, object]:
    """deploy/verify.py's steps (its report on the controller) and the run."""
    run = node.deploy(
        data={"verify_report_path": str(report), **SIGNING}, deploy_file="deploy/verify.py", json_output=False
    )
    return {step["name"]: step for step in json.loads(report.read_text())["nodes"][0]["steps"]}, run


def signatures(node, modules) -> set[tuple[str, str]]:
    """(signer, sig_key) of each module file, as the real modinfo reads them."""
    return {
        (node.sh(f"modinfo -F signer {path}").stdout.strip(), node.sh(f"modinfo -F sig_key {path}").stdout.strip())
        for path in modules
    }


def test_open_module_type_on_bookworm_fails_in_one_line_and_switching_to_proprietary_replaces_the_module_held_signed_standin_mokutil(
    node, tmp_path
):
    seconds = {}
    # An update has brought a second kernel, its image alone (installed first: any apt-get install after
    # the failed open run would configure the half-configured open module again).
    started = time.monotonic()
    second = install_second_kernel(node)
    seconds["second kernel's image"] = time.monotonic() - started
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

    # The way out: the proprietary module type, at the driver's installed version (no upgrade nobody asked
    # for), which its module package has too.
    version = found["nvidia-driver"].split()[0]
    # Secure Boot on, as the stand-in mokutil says (no EFI variables in a container)
    standin_mokutil.install(node)
    started = time.monotonic()
    switch = node.deploy(
        data={**STAGES, **SIGNING, "nvidia_kernel_modules": "proprietary"}, default_mode=True, json_output=False
    )
    seconds["switch to proprietary"] = time.monotonic() - started
    print(" ".join(f"{phase} {value:.0f} s;" for phase, value in seconds.items()))
    assert switch.returncode == 0, switch.explain()
    assert "Traceback" not in switch.output
    assert "NVIDIA kernel modules: proprietary" in switch.output
    changed = switch.changed_operations()
    assert "NVIDIA driver | Install the NVIDIA driver" in changed, changed
    assert "NVIDIA driver | Mark the node for a reboot after the driver change" in changed, changed
    assert "NVIDIA driver | Build the NVIDIA module for every installed kernel" in changed, changed
    assert dpkg_states(node, *DRIVER, OPEN_MODULE, PROPRIETARY_MODULE) == {
        name: f"{version} installed" for name in (*DRIVER, PROPRIETARY_MODULE)
    }
    now_held = held(node)
    assert {*DRIVER, PROPRIETARY_MODULE} <= now_held and OPEN_MODULE not in now_held, now_held
    status = node.sh("dkms status").stdout
    assert f"nvidia-current/{version.split('-')[0]}, {kernel}, x86_64: installed" in status, status
    assert "nvidia-current-open" not in status, status
    # the second kernel: its headers metapackage follows its kernel metapackage, and DKMS built for it
    assert f"nvidia-current/{version.split('-')[0]}, {second}, x86_64: installed" in status, status
    assert "linux-headers-cloud-amd64" in dpkg_states(node, "linux-headers-cloud-amd64")
    assert list(built_nvidia_modules(node, second).values()) == ["NVIDIA"]
    modules = built_nvidia_modules(node, kernel)
    assert list(modules.values()) == ["NVIDIA"], modules  # the proprietary module, and only it
    assert "nvidia-persistenced" in dpkg_states(node, "nvidia-persistenced")
    assert node.sh("systemctl is-enabled nvidia-persistenced.service", check=False).stdout.strip() == "enabled"
    reboot_line = REBOOT_LINE.format(packages=", ".join(sorted((*DRIVER, PROPRIETARY_MODULE))))
    assert reboot_line in switch.output, switch.output[-4000:]
    assert PROPRIETARY_MODULE in node.read("/run/reboot-required.pkgs").split()

    # Signed: both kernels' modules, by the key gpu-node generated on the node (root's alone), the
    # real DKMS signing them with it; its enrollment staged with the password's hash, never the password
    assert node.sh(f"stat -c '%U:%G %a' {KEY} {CERT} $(dirname {KEY})").stdout.split("\n")[:3] == [
        "root:root 600",
        "root:root 600",
        "root:root 700",
    ]
    hostname = node.sh("hostname").stdout.strip()
    serial = node.sh(f"openssl x509 -inform DER -in {CERT} -noout -serial").stdout.strip().removeprefix("serial=")
    all_modules = node.sh(f"find /lib/modules/{kernel} /lib/modules/{second} -name 'nvidia*.ko*'").stdout.split()
    assert len(all_modules) >= 8, all_modules  # nvidia, -modeset, -drm, -uvm ... for each kernel
    [(signer, sig_key)] = signatures(node, all_modules)
    assert signer == f"gpu-node module signing key ({hostname})"
    assert sig_key.replace(":", "").lstrip("0") == serial.lstrip("0")
    assert node.sh(f"cmp {CERT} {standin_mokutil.STATE}/new/signing.der", check=False).returncode == 0
    staged = node.read(f"{standin_mokutil.STATE}/new.hash").strip()
    salt = staged.split("$")[2]
    assert (
        staged == node.sh(f"openssl passwd -6 -salt {salt} '{SIGNING['module_signing_mok_password']}'").stdout.strip()
    )
    assert not node.exists("/var/lib/gpu-node/module-signing/.mok-password.hash")
    assert SIGNING["module_signing_mok_password"] not in switch.output + switch.stderr

    # A -y re-run changes nothing: the key kept, no rebuild, no hold or apt preference touched.
    (module_file,) = modules
    before = node.stat(module_file), node.stat(KEY), preferences(node), now_held
    assert_no_change(node.deploy(data={**STAGES, **SIGNING, "nvidia_kernel_modules": "proprietary"}))
    assert (node.stat(module_file), node.stat(KEY), preferences(node), held(node)) == before

    # Debian's real unattended-upgrades, whose default origins take bookworm-security, which has a newer
    # driver than the pinned one: it moves none of the held, pinned driver packages
    started = time.monotonic()
    node.sh("DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends unattended-upgrades")
    assert "bookworm-security" in node.sh("apt-cache madison nvidia-driver | grep -v ' 535.261.03-1 '").stdout
    updates = node.sh("unattended-upgrade --dry-run --debug 2>&1", timeout=900).stdout
    seconds["unattended-upgrades"] = time.monotonic() - started
    assert "Debian-Security" in updates, updates[-3000:]  # it looked at the security archive
    will = [line for line in updates.splitlines() if "Packages that will be upgraded:" in line]
    assert not any("nvidia" in line for line in will), will
    assert dpkg_states(node, *DRIVER, PROPRIETARY_MODULE) == {
        name: f"{version} installed" for name in (*DRIVER, PROPRIETARY_MODULE)
    }

    # verify: the one installed kernel (the headers' kernel has no image here) has the module
    started = time.monotonic()
    steps, _ = verify_steps(node, tmp_path / "verify.json")
    step = steps["boot_kernels"]
    assert step["status"] == "pass", step
    assert steps["module_signing"] == {
        "name": "module_signing",
        "status": "pass",
        "reason": (
            f"module signed by gpu-node module signing key ({hostname}), enrolled: pending next boot (Secure Boot on)"
        ),
    }
    assert (
        f"1 installed kernel(s) have the nvidia module {version.split('-')[0]}: {second} (DKMS); next boot {second}"
        in step["reason"]
    ), step
    # its module removed: verify fails naming the kernel that would boot with no module
    node.sh(f"rm /lib/modules/{second}/updates/dkms/nvidia-current*.ko*")
    standin_mokutil.boot_confirming(node)  # the MOK manager took the key at that boot
    steps, run = verify_steps(node, tmp_path / "verify.json")
    step = steps["boot_kernels"]
    assert steps["module_signing"]["reason"].startswith(
        f"module signed by gpu-node module signing key ({hostname}), enrolled: yes"
    ), steps["module_signing"]
    seconds["two verify runs"] = time.monotonic() - started
    print(" ".join(f"{phase} {value:.0f} s;" for phase, value in seconds.items()))
    line = (
        f"verify boot_kernels: fail: kernel {second} has no nvidia module of driver {version.split('-')[0]} "
        "(boots next: the newest installed kernel, GRUB's first entry): booted, the node has no GPU; run the "
        f"driver stage, which builds it with DKMS (dkms autoinstall -k {second})"
    )
    assert step["status"] == "fail" and line.endswith(step["reason"]), step
    assert run.returncode != 0 and line in run.output, run.output[-3000:]
    assert "boot_kernels" in run.output.split("--> Fleet report", 1)[1], run.output[-3000:]  # its verify column
