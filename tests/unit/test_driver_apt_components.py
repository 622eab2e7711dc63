"""Enabling contrib / non-free / non-free-firmware: deb822 and one-line sources, no duplicates."""

from __future__ import annotations

from deploy.driver.apt_components import add_apt_components

COMPONENTS = ("contrib", "non-free", "non-free-firmware")
BOOKWORM_DEB822 = """\
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
"""
LEGACY = """\
# See /usr/share/doc/apt/examples/sources.list
deb http://deb.debian.org/debian bookworm main # the archive
deb-src http://deb.debian.org/debian bookworm main
deb [arch=amd64] http://security.debian.org/debian-security bookworm-security main contrib
"""


def test_deb822_entries_of_the_release_gain_the_components_and_nothing_else_moves():
    changed, entries = add_apt_components(
        {"/etc/apt/sources.list.d/debian.sources": BOOKWORM_DEB822}, "bookworm", COMPONENTS
    )
    assert entries == 2
    assert changed == {
        "/etc/apt/sources.list.d/debian.sources": BOOKWORM_DEB822.replace(
            "Components: main\n", "Components: main contrib non-free non-free-firmware\n"
        )
    }


def test_enabled_components_are_not_added_again():
    done = BOOKWORM_DEB822.replace("Components: main\n", "Components: main contrib non-free non-free-firmware\n")
    assert add_apt_components({"/etc/apt/sources.list.d/debian.sources": done}, "bookworm", COMPONENTS) == ({}, 2)


def test_one_line_sources_keep_options_and_comments_and_add_only_what_is_missing():
    changed, entries = add_apt_components({"/etc/apt/sources.list": LEGACY}, "bookworm", COMPONENTS)
    assert entries == 2
    assert (
        changed["/etc/apt/sources.list"]
        == """\
# See /usr/share/doc/apt/examples/sources.list
deb http://deb.debian.org/debian bookworm main contrib non-free non-free-firmware # the archive
deb-src http://deb.debian.org/debian bookworm main
deb [arch=amd64] http://security.debian.org/debian-security bookworm-security main contrib non-free non-free-firmware
"""
    )


def test_a_component_another_entry_already_carries_is_not_duplicated():
    sources = {
        "/etc/apt/sources.list": "deb http://deb.debian.org/debian bookworm main\n",
        "/etc/apt/sources.list.d/extra.list": "deb http://deb.debian.org/debian bookworm contrib non-free\n",
    }
    changed, _ = add_apt_components(sources, "bookworm", COMPONENTS)
    assert changed == {"/etc/apt/sources.list": "deb http://deb.debian.org/debian bookworm main non-free-firmware\n"}


def test_third_party_and_other_release_entries_are_left_alone():
    sources = {
        "/etc/apt/sources.list.d/docker.list": "deb [signed-by=/k.gpg] https://download.docker.com/linux/debian bookworm stable\n",
        "/etc/apt/sources.list.d/trixie.sources": "Types: deb\nURIs: http://deb.debian.org/debian\nSuites: trixie\nComponents: main\n",
        "/etc/apt/sources.list.d/off.sources": "Types: deb\nURIs: http://x/debian\nSuites: bookworm\nComponents: main\nEnabled: no\n",
    }
    assert add_apt_components(sources, "bookworm", COMPONENTS) == ({}, 0)


def test_a_components_field_with_continuation_lines_is_rewritten_as_one_line():
    text = "Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm\nComponents: main\n contrib\n# kept\n"
    changed, _ = add_apt_components({"/etc/apt/sources.list.d/d.sources": text}, "bookworm", COMPONENTS)
    assert changed["/etc/apt/sources.list.d/d.sources"] == (
        "Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm\n"
        "Components: main contrib non-free non-free-firmware\n# kept\n"
    )
