"""One tenant cannot stall or flood the others (created 2026-12-02).

- `rate_windows` and `long_poll_counts`: the per-key limits' counters, shared by every replica;
- `api_keys.limits`: an administrator's overrides of them for one key;
- `webhook_deliveries.build_id`: one build's events go to a hook in order, other builds' beside
  them; `last_attempt_at`: when a settled record is pruned (backfilled for settled rows: a
  delivered row's delivery, a given-up row's last scheduled attempt).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | Sequence[str] | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "long_poll_counts",
        sa.Column("subject", sa.String(length=250), nullable=False),
        sa.Column("replica", sa.String(length=200), nullable=False),
        sa.Column("held", sa.Integer(), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("subject", "replica"),
    )
    op.create_table(
        "rate_windows",
        sa.Column("subject", sa.String(length=250), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("window_start", sa.BigInteger(), nullable=False),
        sa.Column("used", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("subject", "kind", "window_start"),
    )
    # Added in place, as 0010's and 0011's columns: no batch recreation of a table others reference.
    op.add_column("api_keys", sa.Column("limits", sa.JSON(), nullable=True))
    op.add_column("webhook_deliveries", sa.Column("build_id", sa.String(length=64), nullable=True))
    op.add_column(
        "webhook_deliveries", sa.Column("last_attempt_at", sa.DateTime(timezone=True), nullable=True)
    )
    op.execute(
        "UPDATE webhook_deliveries SET last_attempt_at = COALESCE(delivered_at, next_attempt_at) "
        "WHERE state <> 'Pending'"
    )
    op.create_index(
        "webhook_deliveries_settled", "webhook_deliveries", ["state", "last_attempt_at"], unique=False
    )


def downgrade() -> None:
    op.drop_index("webhook_deliveries_settled", table_name="webhook_deliveries")
    op.drop_column("webhook_deliveries", "last_attempt_at")
    op.drop_column("webhook_deliveries", "build_id")
    op.drop_column("api_keys", "limits")
    op.drop_table("rate_windows")
    op.drop_table("long_poll_counts")
