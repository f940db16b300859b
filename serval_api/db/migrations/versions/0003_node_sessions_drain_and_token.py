"""Nodes: one row per live session (a node dialing several API replicas is connected while it has
any), the token each last connected with, and an admin's drain (created 2026-11-30)."""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "node_sessions",
        sa.Column("session_id", sa.String(length=64), nullable=False),
        sa.Column("node_id", sa.String(length=200), nullable=False),
        sa.Column("api_instance_id", sa.String(length=200), nullable=False),
        sa.Column("opened_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("session_id"),
    )
    with op.batch_alter_table("node_sessions", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_node_sessions_api_instance_id"), ["api_instance_id"], unique=False
        )
        batch_op.create_index(batch_op.f("ix_node_sessions_node_id"), ["node_id"], unique=False)

    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.add_column(sa.Column("token_id", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("drain_reason", sa.String(length=500), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.drop_column("drain_reason")
        batch_op.drop_column("token_id")

    with op.batch_alter_table("node_sessions", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_node_sessions_node_id"))
        batch_op.drop_index(batch_op.f("ix_node_sessions_api_instance_id"))

    op.drop_table("node_sessions")
