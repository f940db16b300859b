from __future__ import annotations

from fastapi import APIRouter, Response, status

from serval_api.rest.deps import CallerDep, ServicesDep
from serval_api.rest.protocol import Webhook, WebhookConfig, webhook_dto
from serval_api.service import webhooks

router = APIRouter(prefix="/api/v1/hooks", tags=["Webhooks"])


@router.get("", response_model=list[Webhook])
async def list_hooks(services: ServicesDep, caller: CallerDep) -> list[Webhook]:
    base = services.settings.api_base_url
    return [webhook_dto(base, h) for h in await webhooks.list_hooks(services, caller)]


@router.post("", status_code=status.HTTP_201_CREATED, response_model=Webhook)
async def create_hook(
    config: WebhookConfig, services: ServicesDep, caller: CallerDep, response: Response
) -> Webhook:
    hook = await webhooks.create_hook(
        services,
        caller,
        payload_url=config.payload_url,
        secret=config.secret,
        events=[e.value for e in config.events],
    )
    dto = webhook_dto(services.settings.api_base_url, hook)
    response.headers["Location"] = dto.url
    return dto


@router.get("/{hook_id}", response_model=Webhook)
async def get_hook(hook_id: str, services: ServicesDep, caller: CallerDep) -> Webhook:
    return webhook_dto(services.settings.api_base_url, await webhooks.get_hook(services, caller, hook_id))


@router.delete("/{hook_id}", status_code=status.HTTP_200_OK)
async def delete_hook(hook_id: str, services: ServicesDep, caller: CallerDep) -> None:
    await webhooks.delete_hook(services, caller, hook_id)
