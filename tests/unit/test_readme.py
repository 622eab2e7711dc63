"""The README documents every setting users can set (the data keys are a contract)."""

from pathlib import Path

from deploy.settings import DEFAULTS

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


def test_every_setting_is_in_the_readme():
    missing = [key for key in DEFAULTS if f"`{key}`" not in README]
    assert missing == []
