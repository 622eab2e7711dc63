"""
Batch sizes as deploy/fleet/rollout.py's ``--batches`` takes them ("1,5,25%": one host, then five, then
a quarter of them, the last size repeating until every one had its turn), for the rollout
over hosts and for deploy/k8s_gpu.py's move of GPU nodes between the device plugin and DRA.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")

ALLOWED = "whole numbers from 1 or percentages above 0 up to 100%, comma-separated (e.g. 1,5,25%)"


class BatchSpecError(ValueError):
    """A size that is none: one line naming it."""


def batch_sizes(spec: str, total: int) -> list[int]:
    """Sizes of successive batches covering ``total`` items; "1,5,25%" -> 1, 5, then 25% repeated
    (a percentage of ``total``, rounded down, at least 1)."""
    sizes = []
    for entry in spec.split(","):
        entry = entry.strip()
        try:
            if entry.endswith("%"):
                percent = float(entry[:-1])
                if not 0 < percent <= 100:
                    raise ValueError
                sizes.append(max(1, int(total * percent / 100)))
            else:
                size = int(entry)
                if size < 1:
                    raise ValueError
                sizes.append(size)
        except ValueError:
            raise BatchSpecError(f"invalid batch size {entry!r} in {spec!r}: allowed: {ALLOWED}") from None
    result: list[int] = []
    covered = 0
    while covered < total:
        size = min(sizes[min(len(result), len(sizes) - 1)], total - covered)
        result.append(size)
        covered += size
    return result


def split_batches(items: Sequence[T], spec: str) -> list[list[T]]:
    """``items`` in successive batches of ``batch_sizes``, in their order."""
    batches, start = [], 0
    for size in batch_sizes(spec, len(items)):
        batches.append(list(items[start : start + size]))
        start += size
    return batches


def checked_spec(spec: str) -> str:
    """``spec`` if every size in it is one (a setting's validator)."""
    try:
        batch_sizes(spec, 1)
    except BatchSpecError:
        raise ValueError(ALLOWED) from None
    return spec
