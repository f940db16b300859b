"""Word alignments (rows a word-alignment build streams back) and builds' `train_segments_through`
(the newest train segment a build's data included; nodes replay the ones after it) (created 2026-12-01)."""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "word_alignments",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("engine_id", sa.String(length=64), nullable=False),
        sa.Column("build_id", sa.String(length=64), nullable=False),
        sa.Column("model_revision", sa.Integer(), nullable=False),
        sa.Column("corpus_id", sa.String(length=64), nullable=False),
        sa.Column("text_id", sa.String(length=200), nullable=False),
        sa.Column("source_refs", sa.JSON(), nullable=False),
        sa.Column("target_refs", sa.JSON(), nullable=False),
        sa.Column("source_tokens", sa.JSON(), nullable=False),
        sa.Column("target_tokens", sa.JSON(), nullable=False),
        sa.Column("alignment", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["build_id"], ["builds.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["engine_id"], ["engines.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("word_alignments", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_word_alignments_build_id"), ["build_id"], unique=False)
        batch_op.create_index(
            "word_alignments_lookup", ["engine_id", "model_revision", "corpus_id", "text_id"], unique=False
        )

    # In place, not in batch mode: SQLite's batch mode would recreate `builds`.
    op.add_column("builds", sa.Column("train_segments_through", sa.Integer(), nullable=True))


def downgrade() -> None:
    op.drop_column("builds", "train_segments_through")

    with op.batch_alter_table("word_alignments", schema=None) as batch_op:
        batch_op.drop_index("word_alignments_lookup")
        batch_op.drop_index(batch_op.f("ix_word_alignments_build_id"))

    op.drop_table("word_alignments")
