"""The entry files' shared start (deploy/entry.py): what they imported is frozen once per process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# Run in a process of its own: freezing is for the whole interpreter, and this test's own would
# keep the test session's objects.
FREEZE_TWICE = """
import gc, weakref
from deploy.entry import freeze_imported_objects
import deploy.stages
before = gc.get_freeze_count()
freeze_imported_objects()
frozen = gc.get_freeze_count()

class Node:
    pass

later = Node()
later.self = later  # a cycle only the collector frees
gone = weakref.ref(later)
del later
freeze_imported_objects()
again = gc.get_freeze_count()
gc.collect()
print(before, frozen, again, gone() is None)
"""


def test_the_imports_are_frozen_once_and_what_the_run_makes_later_is_still_collected():
    result = subprocess.run([sys.executable, "-c", FREEZE_TWICE], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    before, frozen, again, collected = result.stdout.split()
    assert int(before) == 0
    # pyinfra's, pydantic's and the deploy's objects: tens of thousands
    assert int(frozen) > 10_000
    # a second host's start freezes nothing more, and a cycle made after the first is freed
    assert (int(again), collected) == (int(frozen), "True")
