"""Engines' `next_model_revision`: the revision number the next build publishes, so a number a
faulted or canceled build was given is never given again (created 2026-12-09).

Backfilled past every revision an engine's builds were given (a faulted build's partial folder
may be in the model store under its number) and past the engine's current revision.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_engines = sa.table(
    "engines",
    sa.column("id", sa.String()),
    sa.column("model_revision", sa.Integer()),
    sa.column("next_model_revision", sa.Integer()),
)
_builds = sa.table(
    "builds", sa.column("engine_id", sa.String()), sa.column("target_model_revision", sa.Integer())
)


def upgrade() -> None:
    # Added in place with a server default: SQLite's batch mode would recreate `engines`, and
    # dropping the old table there cascades to every build, file of rows and corpus of the engine.
    op.add_column(
        "engines",
        sa.Column("next_model_revision", sa.Integer(), server_default=sa.text("1"), nullable=False),
    )
    highest_built = (
        sa.select(sa.func.coalesce(sa.func.max(_builds.c.target_model_revision), 0))
        .where(_builds.c.engine_id == _engines.c.id)
        .scalar_subquery()
    )
    highest = sa.case(
        (highest_built > _engines.c.model_revision, highest_built), else_=_engines.c.model_revision
    )
    op.execute(sa.update(_engines).values(next_model_revision=highest + 1))


def downgrade() -> None:
    op.drop_column("engines", "next_model_revision")
