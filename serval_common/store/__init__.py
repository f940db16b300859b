"""The model store: base models, model revisions and build files, in a local folder or S3."""

from serval_common.store.base import ModelStore, StoreError, open_store

__all__ = ["ModelStore", "StoreError", "open_store"]
