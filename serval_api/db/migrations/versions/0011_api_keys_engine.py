"""API keys' `engine_id`: the engine a key is bound to, which the SIL Converters and LibreTranslate
dialects translate with (their clients name no engine); keys made before are unbound and translate
with the public base model (created 2026-12-02)."""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | Sequence[str] | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Added in place, as 0010's columns: no batch recreation of a table others reference.
    op.add_column("api_keys", sa.Column("engine_id", sa.String(length=64), nullable=True))


def downgrade() -> None:
    op.drop_column("api_keys", "engine_id")
