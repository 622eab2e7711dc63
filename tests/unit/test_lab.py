"""The test lab's one setting (GPU_NODE_LAB) and its SHA256SUMS check (tests/lab.py), and the real
toolkit repository refusing a lab it cannot trust (tests/toolkit_repo.py)."""

from __future__ import annotations

import hashlib

import lab
import pytest
import toolkit_repo


def test_a_missing_lab_names_the_setting_and_what_to_provide(tmp_path, monkeypatch):
    monkeypatch.setenv(lab.LAB_ENV, str(tmp_path / "nowhere"))
    with pytest.raises(lab.LabMissing) as missing:
        toolkit_repo.lab_debs()
    message = str(missing.value)
    assert f"GPU_NODE_LAB={tmp_path / 'nowhere'}" in message
    assert "nvidia-container-toolkit/1.20.0/" in message


def fake_lab(root, content: bytes, listed: bytes | None = None):
    folder = root.joinpath(*toolkit_repo.LAB_FOLDER)
    folder.mkdir(parents=True)
    sums = []
    for name in toolkit_repo.REAL_PACKAGES:
        deb = f"{name}_{toolkit_repo.VERSION}_amd64.deb"
        (folder / deb).write_bytes(content)
        sums.append(f"{hashlib.sha256(listed if listed is not None else content).hexdigest()}  {deb}")
    (folder / "SHA256SUMS").write_text("\n".join(sums) + "\n")
    return folder


def test_a_lab_without_the_toolkit_folder_names_the_folder(tmp_path, monkeypatch):
    monkeypatch.setenv(lab.LAB_ENV, str(tmp_path))
    with pytest.raises(lab.LabMissing, match="nvidia-container-toolkit/1.20.0 is missing from the test lab"):
        toolkit_repo.lab_debs()


def test_a_deb_that_does_not_match_sha256sums_is_refused_naming_both_sums(tmp_path, monkeypatch):
    monkeypatch.setenv(lab.LAB_ENV, str(tmp_path))
    fake_lab(tmp_path, b"altered", listed=b"original")
    with pytest.raises(lab.LabMissing) as refused:
        toolkit_repo.lab_debs()
    assert "does not match SHA256SUMS" in str(refused.value)
    assert hashlib.sha256(b"original").hexdigest() in str(refused.value)


def test_debs_matching_sha256sums_are_returned(tmp_path, monkeypatch):
    monkeypatch.setenv(lab.LAB_ENV, str(tmp_path))
    folder = fake_lab(tmp_path, b"deb")
    assert toolkit_repo.lab_debs() == [folder / f"{name}_{toolkit_repo.VERSION}_amd64.deb"
                                       for name in toolkit_repo.REAL_PACKAGES]


def test_the_default_lab_is_shared_lab_beside_the_repository(monkeypatch):
    monkeypatch.delenv(lab.LAB_ENV, raising=False)
    assert lab.DEFAULT_LAB == lab.REPO.parent / "shared" / "lab"
    if lab.DEFAULT_LAB.is_dir():
        assert lab.lab_root() == lab.DEFAULT_LAB
    else:
        with pytest.raises(lab.LabMissing, match="GPU_NODE_LAB is unset"):
            lab.lab_root()
