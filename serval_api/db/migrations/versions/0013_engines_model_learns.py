"""Engines that learn confirmed verses (created 2026-12-06).

- `model_learns`: whether the current revision learns trained pairs. An nmt revision that reads
  fuzzy matches learns each confirmed pair, as smt-transfer models do; the API service pushes
  pairs to the nodes holding it. Existing revisions are plain (false).
- `pretranslated_revision`: the revision whose build made the engine's pretranslations; a
  micro-build makes none and leaves it. Null (existing engines): the current revision.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | Sequence[str] | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "engines", sa.Column("model_learns", sa.Boolean(), server_default=sa.false(), nullable=False)
    )
    op.add_column("engines", sa.Column("pretranslated_revision", sa.Integer(), nullable=True))


def downgrade() -> None:
    op.drop_column("engines", "pretranslated_revision")
    op.drop_column("engines", "model_learns")
