"""The model store: base models, model revisions and build files, in a local folder or S3."""

from serval_common.store.base import ModelStore, StoreError, open_store, store_from_settings

__all__ = ["ModelStore", "StoreError", "open_store", "store_from_settings"]
