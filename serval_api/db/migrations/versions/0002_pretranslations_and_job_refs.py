"""Pretranslations, and builds' job references and restart counts (created 2026-11-30).

`restarts` gets a server default so builds already stored upgrade with 0."""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "pretranslations",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("engine_id", sa.String(length=64), nullable=False),
        sa.Column("build_id", sa.String(length=64), nullable=False),
        sa.Column("model_revision", sa.Integer(), nullable=False),
        sa.Column("corpus_id", sa.String(length=64), nullable=False),
        sa.Column("text_id", sa.String(length=200), nullable=False),
        sa.Column("source_refs", sa.JSON(), nullable=False),
        sa.Column("target_refs", sa.JSON(), nullable=False),
        sa.Column("translation", sa.Text(), nullable=False),
        sa.Column("confidence", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["build_id"], ["builds.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["engine_id"], ["engines.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("pretranslations", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_pretranslations_build_id"), ["build_id"], unique=False)
        batch_op.create_index(
            "pretranslations_lookup", ["engine_id", "model_revision", "corpus_id", "text_id"], unique=False
        )

    with op.batch_alter_table("builds", schema=None) as batch_op:
        batch_op.add_column(sa.Column("job_ref", sa.String(length=200), nullable=True))
        batch_op.add_column(sa.Column("restarts", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("builds", schema=None) as batch_op:
        batch_op.drop_column("restarts")
        batch_op.drop_column("job_ref")

    with op.batch_alter_table("pretranslations", schema=None) as batch_op:
        batch_op.drop_index("pretranslations_lookup")
        batch_op.drop_index(batch_op.f("ix_pretranslations_build_id"))

    op.drop_table("pretranslations")
