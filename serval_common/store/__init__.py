"""The model store: base models, model revisions and build files, in a local folder or S3."""

from serval_common.store.base import (
    InvalidKey,
    ModelStore,
    ObjectMissing,
    StoreError,
    StoreUnavailable,
    error_chain,
)
from serval_common.store.factory import open_store, store_from_settings

__all__ = [
    "InvalidKey",
    "ModelStore",
    "ObjectMissing",
    "StoreError",
    "StoreUnavailable",
    "error_chain",
    "open_store",
    "store_from_settings",
]
