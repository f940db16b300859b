"""API keys' `name` and `expires_at`, for Serval 1.20's key management (`/api/v1/api-keys`): what a
key is for, and when it stops authenticating. Keys made before have neither (they read their
visible prefix as their name, and never expire) (created 2026-12-02)."""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | Sequence[str] | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Added in place: nullable columns need no table rebuild, on SQLite either.
    op.add_column("api_keys", sa.Column("name", sa.String(length=200), nullable=True))
    op.add_column("api_keys", sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    op.drop_column("api_keys", "expires_at")
    op.drop_column("api_keys", "name")
