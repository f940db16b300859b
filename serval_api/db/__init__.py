from serval_api.db.database import Database
from serval_api.db.nodes import mark_node_gone, upsert_node

__all__ = ["Database", "mark_node_gone", "upsert_node"]
