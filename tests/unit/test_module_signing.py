"""
Signed NVIDIA kernel modules (docs/datacenter.md, "Secure Boot: signed modules"): the plan per family
(plan tests: the whole entry file against pyinfra's @fake connector, facts stated, each family's
package manager as its stand-in), the key's checks, the MOK password's hash, the settings.
"""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
from plan import DEFAULT, PCI_WITH_GPU, SITE_DRIVER_KEY, every, gpu_node, node_lines, run_deploy
from pyinfra.facts.files import Directory
from test_driver_plans import DEBIAN_FILES, install_lines, ok, single

from deploy.distros.families import FAMILIES, detect_platform
from deploy.driver.signing import GENERATED_CERT, GENERATED_KEY
from deploy.facts.module_signing import ModuleSigningState
from deploy.facts.nvidia import NodeSurvey
from deploy.operations.module_signing import password_hash
from deploy.planning.driver_names import DriverPlanError
from deploy.planning.driver_plan import driver_plan
from deploy.planning.module_signing import SigningPlan, dkms_config_text, kernels_to_sign, key_refusal, signing_plan
from deploy.settings import SettingsError, parse_settings

pytestmark = pytest.mark.usefixtures("both_modes")

PASSWORD = "correct horse battery staple"
ENROLL = '--hash-file "$hash_file"'  # the enrollment's script (deploy/shell/module_signing_enroll.sh)
SECURE_BOOT = node_lines("6.1.0-18-amd64", pci=PCI_WITH_GPU, secure_boot=True)
DKMS_CONFIG = "/etc/dkms/framework.conf.d/gpu-node-module-signing.conf"
SERIAL = "9095417DBF2B971F9EB7B1FC93678B209EC93EA"


def state_lines(
    key="root:root 600", cert="root:root 600", cert_format=f"der {SERIAL}", test_key="is not enrolled", modules=()
):
    """ModuleSigningState's output: the key's and certificate's stat (None: missing), the certificate's
    format and serial, mokutil --test-key's answer, and ``modules`` as (kernel, sig_key or "-", signer)."""
    lines = [
        f"file {key} {GENERATED_KEY}" if key else f"file missing - {GENERATED_KEY}",
        f"file {cert} {GENERATED_CERT}" if cert else f"file missing - {GENERATED_CERT}",
    ]
    if cert and cert_format:
        lines += [f"cert {cert_format}", "subject CN=gpu-node module signing key (gpu1)"]
    if test_key is not None:
        lines.append(f"mokutil {GENERATED_CERT} {test_key}" if test_key else "mokutil ")
    lines += [
        f"module {kernel} {sig_key} /lib/modules/{kernel}/updates/dkms/nvidia-current.ko {signer}"
        for kernel, sig_key, signer in modules
    ]
    return lines


def debian(node_survey=SECURE_BOOT, state=None, **data):
    facts = [*DEBIAN_FILES]
    if state is not None:
        facts.append((every(ModuleSigningState), state))
    return run_deploy(gpu_node("debian-12", node_survey=node_survey, facts=facts, unstated=DEFAULT), data=data)


def order(run, *fragments: str) -> list[int]:
    """The index of the first command holding each fragment."""
    return [next(i for i, command in enumerate(run.commands) if fragment in command) for fragment in fragments]


# --- the driver stage on Debian: DKMS signs with a key generated on the node -----------------------


def test_secure_boot_node_gets_a_generated_key_and_dkms_config_before_the_driver_install_and_its_enrollment_staged():
    run = ok(debian(module_signing_mok_password=PASSWORD))
    openssl, key_made, config, driver, mokutil, staged = order(
        run,
        "--allow-downgrades openssl",
        "openssl req -new -x509",
        f"mv -f {DKMS_CONFIG}.gpu-node-candidate",
        "--allow-downgrades nvidia-driver nvidia-smi nvidia-kernel-dkms",
        "--allow-downgrades mokutil",
        ENROLL,
    )
    # DKMS builds at the driver's install: the key is named first; mokutil comes after it (an install
    # before it would configure a half-configured module package on its own)
    assert openssl < key_made < config < driver < mokutil < staged
    generate = run.commands[key_made]
    assert "umask 077" in generate and generate.index("umask 077") < generate.index("openssl req")
    assert f"key={GENERATED_KEY}" in generate and f"cert={GENERATED_CERT}" in generate
    # the password never reaches a command (its hash goes as an upload, root's alone)
    assert not any(PASSWORD in command for command in run.commands)
    assert "hash_file=/var/lib/gpu-node/module-signing/.mok-password.hash" in run.commands[staged]
    assert "NVIDIA driver | Stage the module signing key's enrollment (mokutil --import)" in run.op_names()


def test_the_dkms_config_names_the_key_as_dkms_sources_it():
    plan = SigningPlan(
        "Secure Boot is on",
        "dkms",
        True,
        key=GENERATED_KEY,
        cert=GENERATED_CERT,
        generated=True,
        dkms_config=DKMS_CONFIG,
    )
    assert dkms_config_text(plan).splitlines()[1:] == [
        f'mok_signing_key="{GENERATED_KEY}"',
        f'mok_certificate="{GENERATED_CERT}"',
    ]


def test_without_a_password_the_steps_are_printed_and_no_enrollment_is_staged(caplog):
    run = ok(debian())
    assert not run.ran(ENROLL)
    [line] = {
        record.getMessage() for record in caplog.records if "enroll the module signing key" in record.getMessage()
    }
    assert f"mokutil --import {GENERATED_CERT} (it asks for a one-time password), reboot" in line


def test_a_second_run_keeps_the_key_stages_nothing_and_rebuilds_nothing():
    signed = [("6.1.0-18-amd64", ":".join(SERIAL[i : i + 2] for i in range(0, len(SERIAL), 2)), "gpu-node key")]
    run = ok(
        debian(
            state=state_lines(test_key="is already in the enrollment request", modules=signed),
            module_signing_mok_password=PASSWORD,
        )
    )
    assert not run.ran("openssl req") and not run.ran(ENROLL) and not run.ran("dkms build")


def stat_line(mode: str) -> list[str]:
    """What pyinfra's Directory fact reads of DKMS's drop-in folder (``stat -c``), of ``mode``."""
    return [f"user=root group=root mode={mode} atime=1 mtime=1 ctime=1 size=4096 '{DKMS_CONFIG.rpartition('/')[0]}'"]


def test_the_drop_in_folder_is_made_and_recorded_where_absent_kept_where_there_and_refused_where_no_folder():
    """DKMS's drop-in folder is made where absent, each folder made recorded for the undo
    (deploy/node/records.py gn_make_folder); one there already is kept as it is, unrecorded; a file
    in its place fails the run in one line, before the driver's install."""
    make = f"gn_make_folder {DKMS_CONFIG.rpartition('/')[0]}"
    absent = ok(debian())
    (made,) = absent.matching(make)
    assert made.endswith(make)
    there = ok(
        run_deploy(
            gpu_node(
                "debian-12",
                node_survey=SECURE_BOOT,
                facts=[*DEBIAN_FILES, (every(Directory), stat_line("drwxr-xr-x"))],
                unstated=DEFAULT,
            )
        )
    )
    assert not there.matching(make) and there.ran(DKMS_CONFIG)
    refused = run_deploy(
        gpu_node(
            "debian-12",
            node_survey=SECURE_BOOT,
            facts=[*DEBIAN_FILES, (every(Directory), stat_line("-rw-r--r--"))],
            unstated=DEFAULT,
        )
    )
    assert refused.failed and not refused.ran("apt-get install")
    assert f"{DKMS_CONFIG.rpartition('/')[0]} is there but is not a folder: move it away" in refused.refusal


def test_modules_dkms_built_before_the_key_are_rebuilt_for_their_kernels():
    old = [("6.1.0-18-amd64", "-", ""), ("6.1.0-17-amd64", "AB:CD", "DKMS module signing key")]
    run = ok(debian(state=state_lines(test_key="is already enrolled", modules=old)))
    [rebuild] = run.ran("dkms build --force")
    assert "set -- 6.1.0-17-amd64 6.1.0-18-amd64" in rebuild


def test_secure_boot_off_and_module_signing_auto_signs_nothing():
    run = ok(debian(node_survey=node_lines("6.1.0-18-amd64", pci=PCI_WITH_GPU, secure_boot=False)))
    assert not run.ran("openssl req") and not run.ran(DKMS_CONFIG)


def test_module_signing_true_signs_without_secure_boot_and_stages_no_enrollment():
    run = ok(
        debian(
            node_survey=node_lines("6.1.0-18-amd64", pci=PCI_WITH_GPU, secure_boot=False),
            module_signing="true",
            module_signing_mok_password=PASSWORD,
        )
    )
    assert run.ran("openssl req -new -x509") and run.ran(DKMS_CONFIG)
    assert not run.ran(ENROLL)


def test_secure_boot_with_module_signing_false_is_refused_before_any_change_unless_unsigned_modules_are_allowed():
    refused = debian(module_signing="false")
    assert (
        "Secure Boot is on and module_signing=false: the kernel would not load the unsigned NVIDIA modules"
        in refused.refusal
    )
    assert not refused.ran("apt-get -y") and not refused.ran("apt-get update")
    allowed = ok(debian(module_signing="false", allow_unsigned_modules="true"))
    assert allowed.ran("nvidia-kernel-dkms") and not allowed.ran("openssl req")


@pytest.mark.parametrize(
    "state, line",
    [
        (
            state_lines(key="root:root 644"),
            f"the module signing key {GENERATED_KEY} is root:root mode 644: it must be root's",
        ),
        (state_lines(key="gpu:gpu 600"), f"the module signing key {GENERATED_KEY} is gpu:gpu mode 600"),
        (state_lines(cert=None), f"{GENERATED_KEY} exists without {GENERATED_CERT}: remove it"),
        (
            [f"file link {GENERATED_KEY}", f"file missing - {GENERATED_CERT}"],
            f"the module signing key {GENERATED_KEY} is a symbolic link",
        ),
        (
            state_lines(cert_format="pem"),
            f"the module signing certificate {GENERATED_CERT} is PEM: mokutil --import takes DER",
        ),
    ],
)
def test_a_key_others_could_read_or_misshapen_is_refused_before_any_change(state, line):
    run = debian(state=state)
    assert line in run.refusal
    assert not run.ran("apt-get -y") and not run.ran("openssl req")


def test_the_sites_key_is_used_where_it_is_and_refused_where_it_is_not():
    site = {"module_signing_key": "/etc/site/mok.key", "module_signing_cert": "/etc/site/mok.der"}
    present = [
        line.replace(GENERATED_KEY, site["module_signing_key"]).replace(GENERATED_CERT, site["module_signing_cert"])
        for line in state_lines()
    ]
    run = ok(debian(state=present, **site))
    assert not run.ran("openssl req")
    assert 'mok_signing_key="/etc/site/mok.key"' in "\n".join(run.commands) or run.ran(DKMS_CONFIG)
    missing = debian(
        state=[f"file missing - {site['module_signing_key']}", f"file missing - {site['module_signing_cert']}"], **site
    )
    assert "module_signing_key: /etc/site/mok.key is not on the node" in missing.refusal


# --- the other families (plan tests; each package manager is the family's stand-in there) ----------


def platform(distro: str):
    distro_id = {
        "rocky-9": "rocky",
        "fedora-40": "fedora",
        "amzn-2023": "amzn",
        "ubuntu-22.04": "ubuntu",
        "opensuse-leap-15.5": "opensuse-leap",
        "debian-12": "debian",
    }.get(distro, distro)
    return detect_platform({"name": distro_id, "major": None, "release_meta": {"ID": distro_id}}, "x86_64")


@pytest.mark.parametrize(
    "distro, module_type, signer, dkms",
    [
        ("debian-12", "proprietary", "dkms", True),
        ("debian-12", "open", "dkms", True),
        ("rocky-9", "proprietary", "dkms", True),
        ("fedora-40", "open", "dkms", True),
        ("amzn-2023", "open", "dkms", True),
        ("arch", "proprietary", "dkms", True),
        ("ubuntu-22.04", "proprietary", "Canonical", False),
        ("ubuntu-22.04", "open", "Canonical", False),
        ("opensuse-leap-15.5", "open", "SUSE", False),
    ],
)
def test_each_family_signs_by_dkms_or_by_its_vendors_packages(distro, module_type, signer, dkms):
    plan = signing_plan(parse_settings({}), platform(distro), module_type, True)
    assert (plan.signer, plan.by_dkms, plan.key is not None) == (signer, dkms, dkms)


@pytest.mark.parametrize(
    "distro, dkms_module_packages, others",
    [
        (
            "debian-12",
            ["nvidia-kernel-dkms", "nvidia-tesla-535-kernel-dkms", "nvidia-open-kernel-dkms"],
            ["nvidia-driver", "nvidia-kernel-support", "dkms"],
        ),
        (
            "ubuntu-22.04",
            ["nvidia-dkms-535-server", "nvidia-dkms-535-server-open"],
            ["nvidia-headless-no-dkms-535-server", "linux-modules-nvidia-535-server-generic", "dkms"],
        ),
        ("rocky-9", ["kmod-nvidia-latest-dkms", "kmod-nvidia-open-dkms"], ["nvidia-driver", "nvidia-driver-cuda"]),
        ("arch", ["nvidia-dkms", "nvidia-open-dkms"], ["nvidia-utils", "linux-headers", "dkms"]),
    ],
)
def test_the_undo_knows_each_familys_dkms_driver_packages_by_name(distro, dkms_module_packages, others):
    """The undo keeps DKMS's signing drop-in unless gpu-node installed the driver's DKMS module
    package (deploy/tasks/undo.py): the family's pattern names each such package of its driver
    records (deploy/distros/families.py), and none of the driver's other packages."""
    pattern = platform(distro).family.module_signing.dkms_driver_packages
    assert [name for name in dkms_module_packages + others if re.fullmatch(pattern, name)] == dkms_module_packages


def test_suse_proprietary_kmp_cannot_be_signed_and_a_site_key_has_no_dkms_to_use_there():
    with pytest.raises(
        DriverPlanError,
        match="gpu-node cannot sign the proprietary NVIDIA kernel modules on "
        "opensuse-leap: set nvidia_kernel_modules=open \\(SUSE signs them\\)",
    ):
        signing_plan(parse_settings({}), platform("opensuse-leap-15.5"), "proprietary", True)
    site = parse_settings({"module_signing_key": "/k.pem", "module_signing_cert": "/k.der"})
    with pytest.raises(DriverPlanError, match="come built and signed by SUSE"):
        signing_plan(site, platform("opensuse-leap-15.5"), "open", True)


def ubuntu(**data):
    site = [line.replace(GENERATED_KEY, "/k.pem").replace(GENERATED_CERT, "/k.der") for line in state_lines()]
    return ok(
        run_deploy(
            gpu_node(
                "ubuntu-22.04",
                node_survey=node_lines("5.15.0-91-generic", pci=PCI_WITH_GPU, secure_boot=True),
                facts=[(every(ModuleSigningState), site)],
                unstated=DEFAULT,
            ),
            data={"nvidia_driver_branch": "550", **data},
        )
    )


def test_ubuntu_installs_canonicals_signed_module_packages_instead_of_dkms_and_removes_the_dkms_ones():
    run = ubuntu()
    driver = single([c for c in install_lines(run, "apt-get") if "nvidia-headless" in c])
    assert driver.split(" ")[-3:] == [
        "nvidia-headless-no-dkms-550-server",
        "nvidia-utils-550-server",
        "linux-modules-nvidia-550-server-generic",
    ], driver
    # the DKMS ones go in the same transaction where installed (the plan's removals)
    node = NodeSurvey().process(node_lines("5.15.0-91-generic", pci=PCI_WITH_GPU, secure_boot=True))
    plan = driver_plan(parse_settings({"nvidia_driver_branch": "550"}), platform("ubuntu-22.04"), node)
    assert {"nvidia-dkms-550-server", "nvidia-headless-550-server"} <= set(plan.remove), plan.remove
    assert not run.ran("openssl req") and not run.ran(ENROLL)
    # with the site's key, DKMS signs instead
    site = ubuntu(module_signing_key="/k.pem", module_signing_cert="/k.der")
    assert "nvidia-dkms-550-server" in single([c for c in install_lines(site, "apt-get") if "nvidia-headless" in c])
    assert site.ran('mok_signing_key="/k.pem"') or site.ran(DKMS_CONFIG)


def test_arch_builds_with_dkms_to_sign_instead_of_its_unsigned_prebuilt_module():
    run = ok(
        run_deploy(
            gpu_node(
                "arch", node_survey=node_lines("6.9.7-arch1-1", pkgbases=["linux"], secure_boot=True), unstated=DEFAULT
            )
        )
    )
    assert single(run.ran("pacman --noconfirm -Syu --needed nvidia")).endswith(
        "--needed nvidia-utils nvidia-dkms linux-headers"
    )
    assert run.ran("openssl req -new -x509") and run.ran(DKMS_CONFIG)


def test_rocky_signs_what_nvidias_dkms_stream_builds():
    run = ok(
        run_deploy(
            gpu_node(
                "rocky-9", node_survey=node_lines("5.14.0-362.8.1.el9_3.x86_64", secure_boot=True), unstated=DEFAULT
            )
        )
    )
    assert "dnf module enable -y nvidia-driver:latest-dkms" in run.commands
    config, driver = order(run, f"mv -f {DKMS_CONFIG}.gpu-node-candidate", "dnf install -y nvidia-driver")
    assert config < driver


def test_suse_open_modules_come_signed_by_suse_and_need_no_key():
    run = ok(
        run_deploy(
            gpu_node(
                "opensuse-leap-15.5",
                node_survey=node_lines("5.14.21-150500.55.39-default", secure_boot=True),
                unstated=DEFAULT,
            ),
            data={"nvidia_kernel_modules": "open", **SITE_DRIVER_KEY},
        )
    )
    assert "nvidia-open-driver-G06-signed-kmp-default" in single(run.ran("zypper --non-interactive install -y"))
    assert not run.ran("openssl req")


def test_every_family_has_a_way_to_sign_open_modules():
    assert all("open" in family.module_signing.signers for family in FAMILIES)


# --- the pieces -------------------------------------------------------------------------------------


def test_kernels_to_sign_are_those_with_a_module_the_key_did_not_sign():
    plan = SigningPlan("why", "dkms", True, key=GENERATED_KEY, cert=GENERATED_CERT, generated=True)
    state = ModuleSigningState().process(
        state_lines(
            modules=[
                ("6.1.0-18-amd64", ":".join(SERIAL[i : i + 2] for i in range(0, len(SERIAL), 2)), "gpu-node"),
                ("6.1.0-17-amd64", "-", ""),
                ("6.1.0-16-amd64", "0A:BC", "other"),
            ]
        )
    )
    assert kernels_to_sign(plan, state) == ["6.1.0-16-amd64", "6.1.0-17-amd64"]
    assert key_refusal(plan, state) is None


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl, the hash's independent oracle")
def test_the_mok_password_hash_is_sha512_crypt_as_openssl_makes_it():
    made = password_hash(PASSWORD)
    method, salt, _ = made.split("$")[1:]
    assert method == "6"
    expected = subprocess.run(
        ["openssl", "passwd", "-6", "-salt", salt, "-stdin"], input=PASSWORD, text=True, capture_output=True, check=True
    ).stdout.strip()
    assert made == expected


def test_the_mok_password_is_never_shown_by_the_settings():
    with pytest.raises(SettingsError) as error:
        parse_settings({"module_signing_mok_password": "x" * 300})
    assert "x" * 10 not in str(error.value) and "(not shown: a secret)" in str(error.value)
    assert PASSWORD not in repr(parse_settings({"module_signing_mok_password": PASSWORD}))


def test_a_key_without_its_certificate_is_an_invalid_setting():
    with pytest.raises(SettingsError, match="module_signing_key='/k.pem': allowed: with module_signing_cert"):
        parse_settings({"module_signing_key": "/k.pem"})
    with pytest.raises(SettingsError, match="module_signing_cert='/k der': allowed: an absolute path"):
        parse_settings({"module_signing_key": "/k.pem", "module_signing_cert": "/k der"})


# --- verify's step: "module signed by <key>, enrolled: yes / pending next boot / no" ----------------


def verify_step(secure_boot, state, module_signing="auto"):
    from deploy.verification.module_signing import module_signing_step
    from deploy.verification.options import VerifyOptions

    readout = {
        "signing": ModuleSigningState().process(state),
        "node": NodeSurvey().process(node_lines("6.1.0-18-amd64", secure_boot=secure_boot)),
    }
    step = module_signing_step(readout, VerifyOptions.from_settings(parse_settings({"module_signing": module_signing})))
    return step.status, step.reason


OURS = [
    (
        "6.1.0-18-amd64",
        ":".join(SERIAL[i : i + 2] for i in range(0, len(SERIAL), 2)),
        "gpu-node module signing key (gpu1)",
    )
]


@pytest.mark.parametrize(
    "test_key, status, enrolled",
    [
        ("is already enrolled", "pass", "yes"),
        ("is already in the enrollment request", "pass", "pending next boot"),
        ("is not enrolled", "fail", "no"),
    ],
)
def test_verify_names_the_signer_and_whether_its_key_is_enrolled(test_key, status, enrolled):
    found, reason = verify_step(True, state_lines(test_key=test_key, modules=OURS))
    assert (found, reason.split(": the kernel")[0]) == (
        status,
        f"module signed by gpu-node module signing key (gpu1), enrolled: {enrolled} (Secure Boot on)",
    )


def test_verify_fails_an_unsigned_module_where_secure_boot_is_on_and_skips_it_where_signing_is_not_asked():
    unsigned = state_lines(key=None, cert=None, test_key=None, modules=[("6.1.0-18-amd64", "-", "")])
    status, reason = verify_step(True, unsigned)
    assert status == "fail" and reason.startswith(
        "NVIDIA modules of kernel(s) 6.1.0-18-amd64 are unsigned and Secure Boot is on: the kernel will not load them"
    )
    assert verify_step(False, unsigned)[0] == "skip"


def test_verify_names_a_vendors_signature_it_cannot_judge():
    canonical = state_lines(
        key=None,
        cert=None,
        test_key=None,
        modules=[("6.8.0-45-generic", "1A:2B", "Canonical Ltd. Kernel Module Signing")],
    )
    status, reason = verify_step(True, canonical)
    assert status == "pass" and reason.startswith(
        "module signed by Canonical Ltd. Kernel Module Signing, not a key gpu-node manages"
    )


def test_a_dkms_plan_hands_over_its_key_cert_and_config_and_a_vendor_signed_plan_has_none():
    plan = SigningPlan("Secure Boot is on", "dkms", True, key="/k.key", cert="/k.der", dkms_config="/etc/dkms/x.conf")
    assert plan.dkms_files == ("/k.key", "/k.der", "/etc/dkms/x.conf")
    with pytest.raises(ValueError, match="a plan signed by Canonical has no DKMS key"):
        _ = SigningPlan("Secure Boot is on", "Canonical", True).dkms_files
