"""Engines' `model_weights`: the weights identity their current revision serves
(`serval_common.model_revision`), recorded when a build completes so the dispatcher can send an
engine's work to a node holding those weights under any revision. Engines built before read None
(nodes report the weights of what they load) (created 2026-12-02)."""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | Sequence[str] | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Added in place: SQLite's batch mode would recreate `engines`, and dropping it cascades to
    # every table that references it.
    op.add_column("engines", sa.Column("model_weights", sa.String(length=200), nullable=True))


def downgrade() -> None:
    op.drop_column("engines", "model_weights")
