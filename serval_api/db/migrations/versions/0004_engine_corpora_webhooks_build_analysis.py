"""Engine-scoped corpora, webhooks and their delivery outbox, and builds' deployment version, quote
convention and analysis (created 2026-12-01)."""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "webhooks",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("owner", sa.String(length=200), nullable=False),
        sa.Column("payload_url", sa.String(length=2000), nullable=False),
        sa.Column("secret", sa.String(length=500), nullable=False),
        sa.Column("events", sa.JSON(), nullable=False),
        sa.Column("date_created", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("webhooks", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_webhooks_owner"), ["owner"], unique=False)

    op.create_table(
        "engine_corpora",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("engine_id", sa.String(length=64), nullable=False),
        sa.Column("owner", sa.String(length=200), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=True),
        sa.Column("source_language", sa.String(length=64), nullable=False),
        sa.Column("target_language", sa.String(length=64), nullable=False),
        sa.Column("source_files", sa.JSON(), nullable=False),
        sa.Column("target_files", sa.JSON(), nullable=False),
        sa.Column("date_created", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["engine_id"], ["engines.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("engine_corpora", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_engine_corpora_engine_id"), ["engine_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_engine_corpora_owner"), ["owner"], unique=False)

    op.create_table(
        "webhook_deliveries",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("hook_id", sa.String(length=64), nullable=False),
        sa.Column("owner", sa.String(length=200), nullable=False),
        sa.Column("event", sa.String(length=64), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("claimed_by", sa.String(length=200), nullable=True),
        sa.Column("claimed_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_status", sa.Integer(), nullable=True),
        sa.Column("last_error", sa.String(length=500), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("delivered_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["hook_id"], ["webhooks.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("webhook_deliveries", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_webhook_deliveries_hook_id"), ["hook_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_webhook_deliveries_owner"), ["owner"], unique=False)
        batch_op.create_index("webhook_deliveries_due", ["state", "next_attempt_at"], unique=False)

    with op.batch_alter_table("builds", schema=None) as batch_op:
        batch_op.add_column(sa.Column("deployment_version", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("target_quote_convention", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("analysis", sa.JSON(), nullable=True))
        batch_op.create_index("builds_by_owner_created", ["owner", "date_created"], unique=False)
        batch_op.create_index("builds_by_owner_finished", ["owner", "date_finished"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("builds", schema=None) as batch_op:
        batch_op.drop_index("builds_by_owner_finished")
        batch_op.drop_index("builds_by_owner_created")
        batch_op.drop_column("analysis")
        batch_op.drop_column("target_quote_convention")
        batch_op.drop_column("deployment_version")

    with op.batch_alter_table("webhook_deliveries", schema=None) as batch_op:
        batch_op.drop_index("webhook_deliveries_due")
        batch_op.drop_index(batch_op.f("ix_webhook_deliveries_owner"))
        batch_op.drop_index(batch_op.f("ix_webhook_deliveries_hook_id"))

    op.drop_table("webhook_deliveries")
    with op.batch_alter_table("engine_corpora", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_engine_corpora_owner"))
        batch_op.drop_index(batch_op.f("ix_engine_corpora_engine_id"))

    op.drop_table("engine_corpora")
    with op.batch_alter_table("webhooks", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_webhooks_owner"))

    op.drop_table("webhooks")
