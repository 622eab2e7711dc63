"""Fixtures shared by the unit tests: ``both_modes`` (tests/plan.py) runs a plan test as
``pyinfra -y`` and in the CLI's default mode."""

from plan import both_modes  # noqa: F401
