"""
The SUSE family's node image (``LEAP156_ZYPPER``), a FamilyImage of tests/family_images.py: the
systemd bookworm node image with the REAL zypper 1.14 and libzypp 17 as Debian bookworm packages
them, rpm 4.18 (its database where Leap keeps it, /usr/lib/sysimage/rpm) and gpg, openSUSE
Leap 15.6's os-release (tests/fixtures/nvidia/os-release/opensuse-leap-15.6), /etc/zypp/repos.d and
Leap's multiversion lines of /etc/zypp/zypp.conf. No openSUSE repository is configured on it (the
image has none of openSUSE's packages to update); every rpm it installs is a STAND-IN of
tests/suse_repo.py. Build it by hand with ``python tests/family_zypper.py``.
"""

from __future__ import annotations

from family_images import FamilyImage, family_image

# openSUSE's zypp.conf is libzypp's commented template with these lines set (kernels kept side by side)
LEAP_ZYPP_CONF = """\
[main]
multiversion = provides:multiversion(kernel)
multiversion.kernels = latest,latest-1,running
"""

LEAP156_ZYPPER = FamilyImage(
    name="leap15.6-zypper",
    packages=("zypper", "rpm", "gnupg"),
    os_release="opensuse-leap-15.6",
    files={
        "/etc/zypp/zypp.conf": LEAP_ZYPP_CONF,
        # Debian's rpm keeps a database per user (~/.rpmdb); Leap 15.6's is /usr/lib/sysimage/rpm
        "/etc/rpm/macros.dbpath": "%_dbpath /usr/lib/sysimage/rpm\n",
    },
    setup="\n".join(
        [
            "mkdir -p /etc/zypp/repos.d /usr/lib/sysimage/rpm",
            "rm -rf /var/lib/rpm && ln -s ../../usr/lib/sysimage/rpm /var/lib/rpm",
            "rpm --initdb",
            "zypper --version",
        ]
    ),
)

if __name__ == "__main__":
    print(family_image(LEAP156_ZYPPER))
