"""
NVIDIA's data-center driver branches: each one's kind and end of life, as NVIDIA's support matrix
publishes them, and what a node on a branch past its end of life should move to. Pure: the date is
the caller's.
"""

from __future__ import annotations

import calendar
from dataclasses import dataclass
from datetime import date

LTSB, PRODUCTION, NEW_FEATURE = "LTSB", "production", "new feature"
KIND_NAMES = {LTSB: "long term support branch", PRODUCTION: "production branch", NEW_FEATURE: "new feature branch"}


@dataclass(frozen=True)
class Branch:
    number: int
    kind: str
    # the last month NVIDIA supports it (the matrix gives a month): (year, month)
    end_of_life: tuple[int, int]

    @property
    def last_day(self) -> date:
        year, month = self.end_of_life
        return date(year, month, calendar.monthrange(year, month)[1])

    @property
    def until(self) -> str:
        year, month = self.end_of_life
        return f"{calendar.month_name[month]} {year}"

    def past_end_of_life(self, today: date) -> bool:
        return today > self.last_day


# NVIDIA's "Supported Drivers and CUDA Toolkit Versions" tables, branch designation and end of life:
# https://docs.nvidia.com/datacenter/tesla/drivers/620/supported-drivers-and-cuda-toolkit-versions.html
# (R580, R595, R620), .../drivers/615/... (R535, R610) and the 2021 matrix
# https://docs.nvidia.com/datacenter/tesla/pdf/NVIDIA_CUDA_Drivers_Support.pdf (R418, R440, R450, R460).
# A branch not listed here (R470, R550, R570 ...) has no date gpu-node can cite: it is named unknown.
BRANCHES: tuple[Branch, ...] = (
    Branch(418, LTSB, (2022, 3)),
    Branch(440, NEW_FEATURE, (2020, 11)),
    Branch(450, LTSB, (2023, 7)),
    Branch(460, PRODUCTION, (2022, 1)),
    Branch(535, LTSB, (2026, 6)),
    Branch(580, LTSB, (2028, 6)),
    Branch(595, PRODUCTION, (2027, 3)),
    Branch(610, NEW_FEATURE, (2026, 8)),
    Branch(620, LTSB, (2029, 9)),
)
BY_NUMBER = {branch.number: branch for branch in BRANCHES}


def supported_long_term(today: date) -> list[Branch]:
    """The long term support branches NVIDIA still supports on ``today``, newest first."""
    return sorted(
        (branch for branch in BRANCHES if branch.kind == LTSB and not branch.past_end_of_life(today)),
        key=lambda branch: branch.number,
        reverse=True,
    )


def branch_summary(number: int, today: date) -> str:
    """One phrase on ``number``'s lifecycle: its kind and end of life, or that the table has no date for it."""
    branch = BY_NUMBER.get(number)
    if branch is None:
        return f"driver branch {number}: not in NVIDIA's support matrix as gpu-node has it (deploy/driver/branches.py)"
    tense = "ended" if branch.past_end_of_life(today) else "until"
    return f"driver branch {number} ({KIND_NAMES[branch.kind]}), supported {tense} {branch.until}"


def end_of_life_warning(number: int | None, today: date, where: str) -> str | None:
    """The line naming a branch past its end of life on ``today`` and what to move to; None otherwise.
    ``where``: what has that branch (the node's installed driver, nvidia_driver_branch ...)."""
    branch = BY_NUMBER.get(number) if number is not None else None
    if branch is None or not branch.past_end_of_life(today):
        return None
    successors = [each for each in supported_long_term(today) if each.number > branch.number]
    move = ", ".join(f"R{each.number} (until {each.until})" for each in reversed(successors))
    return (
        f"{where} is driver branch {number}, a {KIND_NAMES[branch.kind]} whose end of life was {branch.until}: "
        "NVIDIA no longer fixes it, security fixes included; "
        + (
            f"move to a long term support branch: {move} (nvidia_driver_branch, where the family packages it)"
            if move
            else "move to a newer branch NVIDIA supports (nvidia_driver_branch)"
        )
    )
