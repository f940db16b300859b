"""The store sweep through a real API service and local store: revision and build folders that no
build owns any more go, and so do the old store copies of data files that are gone or whose
contents are in the database; what a Completed, Pending or Active build owns, base models and the
contents of files uploaded before contents moved to the database stay."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from serval_api.auth import ALL_SCOPES
from serval_api.service.store_sweep import sweep_store
from serval_common.store import ModelStore
from tests.api.conftest import RunningApi, create_engine
from tests.api.file_rows import as_uploaded_before


@pytest.fixture
def owner(api: RunningApi) -> Iterator[httpx.Client]:
    with api.client(scopes=ALL_SCOPES) as c:
        yield c


def store_of(api: RunningApi) -> ModelStore:
    assert api.service.services is not None
    return api.service.services.store


def folders(store: ModelStore) -> set[str]:
    """`models/{engine}/{revision}`, `builds/{build}`, `base-models/{name}`, `files/{id}`."""
    depth = {"models": 3, "builds": 2, "base-models": 2, "files": 2}
    return {"/".join(key.split("/")[: depth[top]]) for top in depth for key in store.list_keys(top)}


def test_the_sweep_removes_only_what_no_build_owns(api: RunningApi, owner: httpx.Client) -> None:
    engine = create_engine(owner)
    canceled = owner.post(f"/translation/engines/{engine['id']}/builds", json={}).json()
    assert owner.post(f"/translation/engines/{engine['id']}/current-build/cancel").status_code == 200
    running = owner.post(f"/translation/engines/{engine['id']}/builds", json={}).json()
    assert running["state"] == "Pending"
    given = api.launcher.specs[-1].revision
    store = store_of(api)
    old, new = (
        owner.post("/files", data={"format": "Text"}, files={"file": ("f", b"A line.\n")}).json()["id"]
        for _ in range(2)
    )
    as_uploaded_before(api, old, b"A line.\n")

    kept = {
        f"models/{engine['id']}/{given}",
        f"builds/{running['id']}",
        "base-models/tiny-nllb",
        f"files/{old}",
    }
    orphans = {
        f"models/{engine['id']}/{given + 40}",
        f"models/{engine['id']}/{api.launcher.specs[0].revision}",
        "models/a-deleted-engine/1",
        "builds/a-deleted-build",
        "files/a-deleted-file",
        f"files/{new}",
    }
    for folder in kept | orphans:
        store.write_bytes(f"{folder}/model.bin", b"weights")
    store.write_bytes(f"builds/{canceled['id']}/train.src.txt", b"kept while its build exists\n")
    before = folders(store)
    services = api.service.services
    assert services is not None

    assert api.run(sweep_store(services)) == len(orphans)
    assert folders(store) == before - orphans
    assert kept <= folders(store) and f"builds/{canceled['id']}" in folders(store)
    assert api.run(sweep_store(services)) == 0, "a second sweep finds nothing"
    assert owner.get(f"/files/{old}/contents").content == b"A line.\n"
    assert owner.get(f"/files/{new}/contents").content == b"A line.\n"
