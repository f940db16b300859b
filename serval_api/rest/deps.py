"""FastAPI dependencies shared by the routers."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header, Request

from serval_api.auth import Caller, authenticate, bearer_value
from serval_api.service import Services


def get_services(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


async def get_caller(
    services: Annotated[Services, Depends(get_services)],
    x_api_key: Annotated[str | None, Header(alias="X-API-Key")] = None,
    authorization: Annotated[str | None, Header(alias="Authorization")] = None,
) -> Caller:
    return await authenticate(
        x_api_key,
        services.lookups.caller,
        bearer_value(authorization),
        services.jwt,
    )


async def get_word_alignment_caller(caller: Annotated[Caller, Depends(get_caller)]) -> Caller:
    """The caller on the word-alignment routes, where Serval's word-alignment scopes count."""
    return caller.on_word_alignment()


ServicesDep = Annotated[Services, Depends(get_services)]
CallerDep = Annotated[Caller, Depends(get_caller)]
WordAlignmentCallerDep = Annotated[Caller, Depends(get_word_alignment_caller)]
"""`CallerDep` for the word-alignment routes (`Caller.on_word_alignment`)."""
