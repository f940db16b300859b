"""Data file contents in the database: `data_file_chunks`, 1 MiB pieces of each file uploaded from
now on. Files uploaded before keep their contents in the model store (`files/{id}/contents`), read
from there while a file has no chunk. A downgrade drops the table, and with it the contents of
every file uploaded since (created 2026-12-02)."""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "data_file_chunks",
        sa.Column("file_id", sa.String(length=64), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(["file_id"], ["data_files.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("file_id", "seq"),
    )


def downgrade() -> None:
    op.drop_table("data_file_chunks")
