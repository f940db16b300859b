"""The core functions of the API service; REST and gRPC are thin adapters over them."""

from serval_api.service.context import Services

__all__ = ["Services"]
