"""Fixtures shared by the unit tests: ``both_modes`` (tests/fake_host.py) runs a plan test as
``pyinfra -y`` and in the CLI's default mode."""

from fake_host import both_modes  # noqa: F401
