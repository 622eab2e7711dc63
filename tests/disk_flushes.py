"""
What a program flushes to disk and renames, in order: os.fsync and os.replace recorded (each still
done), so a test can say a file's bytes reach the disk before the rename that puts it in place, and
its folder after (deploy/node/root_files.py's write_json_durably). No test cuts power: the order of
the calls is what a power loss depends on.
"""

from __future__ import annotations

import os


def record_flushes(monkeypatch) -> list[tuple[str, ...]]:
    """Each os.fsync as ("fsync", the path its descriptor is open on) and each os.replace as
    ("replace", source, target), real paths, in the order made."""
    calls: list[tuple[str, ...]] = []
    fsync, replace = os.fsync, os.replace

    def recorded_fsync(descriptor):
        calls.append(("fsync", os.readlink(f"/proc/self/fd/{descriptor}")))
        fsync(descriptor)

    def recorded_replace(source, target, **kwargs):
        calls.append(("replace", os.path.realpath(source), os.path.realpath(target)))
        replace(source, target, **kwargs)

    monkeypatch.setattr(os, "fsync", recorded_fsync)
    monkeypatch.setattr(os, "replace", recorded_replace)
    return calls


def flushes_around_its_rename(calls: list[tuple[str, ...]], path: str) -> list[str]:
    """What came of ``path``'s last rename into place, in order: "file flushed" (the file renamed, an
    fsync of it before), "renamed", "folder flushed" (an fsync of its folder after the rename and
    before the next one); [] where nothing was renamed to ``path``."""
    path = os.path.realpath(path)
    renames = [index for index, call in enumerate(calls) if call[0] == "replace" and call[2] == path]
    if not renames:
        return []
    rename = renames[-1]
    following = [index for index, call in enumerate(calls) if index > rename and call[0] == "replace"]
    end = following[0] if following else len(calls)
    source = calls[rename][1]
    said = []
    for index, call in enumerate(calls[:end]):
        if call == ("fsync", source):
            said.append("file flushed")
        elif index == rename:
            said.append("renamed")
        elif index > rename and call == ("fsync", os.path.dirname(path)):
            said.append("folder flushed")
    return said
