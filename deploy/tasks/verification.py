"""Stage 6 (read-only): the verification ladder and a report per node (deploy/ladder.py,
deploy/operations/verification.py)."""

from __future__ import annotations

from pyinfra.api import deploy

from deploy.ladder import VerifyOptions
from deploy.operations.verification import check_node
from deploy.settings import Settings


@deploy("Verify")
def verify(settings: Settings):
    check_node(
        name="Verify the node can run GPU containers (read-only)",
        options=VerifyOptions.from_settings(settings),
        report_path=settings.verify_report_path,
    )
