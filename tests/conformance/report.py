"""Calling the service as the generated client does, one operation of `serval_client` at a time,
and recording what each call answered against what the client of each release accepts: a call of
an operation both releases have is checked twice, against each release's statuses and shapes."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from tests.conformance.serval_client import (
    BASE_PATH,
    ENGINE_EXPECTATIONS,
    ENGINE_TYPES,
    NEWER,
    OLDER,
    OPERATIONS_BY_KEY_OF,
    OPERATIONS_OF,
    RELEASES,
    Operation,
    expected_statuses,
)
from tests.conformance.shapes import check

REPORT_ENV = "SERVAL_CONFORMANCE_REPORT"

BodyCheck = Callable[[Any], list[str]]


@dataclass
class Call:
    release: str
    operation: str
    engine_type: str
    status: int
    problems: list[str]
    body_checked: bool


TITLES = {
    NEWER: "Serval.Client 1.20 (Serval main e4c5c1ea)",
    OLDER: "The client of Serval's last gRPC release (spring 2026)",
}


@dataclass
class Report:
    calls: list[Call] = field(default_factory=list)

    def of(self, engine_type: str, release: str | None = None) -> list[Call]:
        return [
            c
            for c in self.calls
            if c.engine_type == engine_type and (release is None or c.release == release)
        ]

    def failures(self, engine_type: str, release: str | None = None) -> list[str]:
        return [
            f"[{c.release}] {c.operation} → {c.status}: {p}"
            for c in self.of(engine_type, release)
            for p in c.problems
        ]

    def markdown(self) -> str:
        lines: list[str] = []
        for release in RELEASES:
            operations = OPERATIONS_OF[release]
            lines += [
                f"## {TITLES[release]}: {len(operations)} operations",
                "",
                "| operation | " + " | ".join(f"{t} status | {t} body ok" for t in ENGINE_TYPES) + " |",
                "|---|" + "---|---|" * len(ENGINE_TYPES),
            ]
            for op in operations:
                cells = [op.key]
                for engine_type in ENGINE_TYPES:
                    cells.extend(self._cells(release, op, engine_type))
                lines.append("| " + " | ".join(cells) + " |")
            lines.append("")
        notes = [
            f"- {engine_type} {key}: {expectation.reason}"
            for (engine_type, key), expectation in ENGINE_EXPECTATIONS.items()
        ]
        problems = [
            f"- {engine_type} {failure}"
            for engine_type in ENGINE_TYPES
            for failure in self.failures(engine_type)
        ]
        return "\n".join(
            [
                *lines,
                "Status: ✓ one the client accepts (or the engine type's expected answer, marked *), "
                "✗ anything else. Body ok: every required property present, non-null and of its "
                "type; — where the operation has no body to check or the status was wrong.",
                "",
                "Expected answers other than the success status (*):",
                *notes,
                "",
                "Problems:" if problems else "No problems.",
                *problems,
                "",
            ]
        )

    def _cells(self, release: str, op: Operation, engine_type: str) -> list[str]:
        calls = [c for c in self.of(engine_type, release) if c.operation == op.key]
        if not calls:
            return ["not called", "—"]
        expected = expected_statuses(engine_type, op)
        statuses = []
        for status in dict.fromkeys(c.status for c in calls):
            mark = "✓" if status in expected else "✗"
            starred = "*" if status in expected and status not in op.success else ""
            statuses.append(f"{status}{starred} {mark}")
        checked = [c for c in calls if c.body_checked]
        if not checked:
            body = "—"
        else:
            count = sum(len(c.problems) for c in checked)
            body = "yes" if count == 0 else f"no ({count})"
        return [", ".join(statuses), body]


class Walker:
    """One engine type's walk: every call goes through `call`, which records it in the report once
    for each client release that has the operation."""

    def __init__(self, client: httpx.Client, engine_type: str, report: Report) -> None:
        self.client = client
        self.engine_type = engine_type
        self.report = report

    def call(
        self,
        key: str,
        path_params: dict[str, str] | None = None,
        *,
        query: dict[str, str] | None = None,
        json_body: Any = None,
        send_json: bool = False,
        files: dict[str, Any] | None = None,
        data: dict[str, str] | None = None,
        extra_check: BodyCheck | None = None,
        timeout_s: float = 30,
        client: httpx.Client | None = None,
    ) -> httpx.Response:
        """Send operation `key` as the client does and record the outcome. `path_params` fill
        the client's `{name}`s; `send_json` sends `json_body` even when it is a bare string.
        `extra_check` adds problems a shape check cannot see (a filter the query asked for); it
        gets the JSON body, or the response where the operation's answer is no JSON shape.
        `client`: who calls, where not the walk's own client (an administrator, for `ApiKeys`)."""
        ops = {r: OPERATIONS_BY_KEY_OF[r][key] for r in RELEASES if key in OPERATIONS_BY_KEY_OF[r]}
        assert ops, f"{key}: no client release has this operation"
        op = next(iter(ops.values()))  # the same verb, path and query in every release that has it
        params = path_params or {}
        names = set(re.findall(r"{(\w+)}", op.path))
        assert names == set(params), f"{key}: path parameters {sorted(names)}, given {sorted(params)}"
        assert set(query or {}) <= set(op.query), f"{key}: the client sends no query {set(query or {})}"
        url = f"{BASE_PATH}/{op.path.format(**params)}"
        kwargs: dict[str, Any] = {"params": query, "files": files, "data": data, "timeout": timeout_s}
        if send_json or json_body is not None:
            kwargs["content"] = json.dumps(json_body).encode()
            kwargs["headers"] = {"Content-Type": "application/json"}
        response = (client or self.client).request(op.verb, url, **kwargs)
        for release, release_op in ops.items():
            problems: list[str] = []
            body_checked = False
            expected = expected_statuses(self.engine_type, release_op)
            if response.status_code not in expected:
                problems.append(
                    f"status {response.status_code}, the client accepts {'/'.join(map(str, expected))}: "
                    f"{response.text[:300]}"
                )
            elif response.status_code in release_op.success:
                body_checked = release_op.response is not None or extra_check is not None
                problems.extend(self._body_problems(release, release_op.response, response, extra_check))
            self.report.calls.append(
                Call(release, key, self.engine_type, response.status_code, problems, body_checked)
            )
        return response

    @staticmethod
    def _body_problems(
        release: str, response_type: str | None, response: httpx.Response, extra: BodyCheck | None
    ) -> list[str]:
        if response_type in (None, "FileResponse"):
            return extra(response) if extra else []
        try:
            body = response.json()
        except ValueError:
            return [f"$: not JSON: {response.text[:200]!r}"]
        problems = check(body, response_type, release=release)
        if response_type.endswith("[]") and body == []:
            problems.append(
                "$: an empty list where the scenario made items: nothing the client reads was checked"
            )
        if extra:
            problems.extend(extra(body))
        return problems

    def called(self, release: str | None = None) -> set[str]:
        """The operations called, of `release`'s client (None: of either)."""
        return {c.operation for c in self.report.of(self.engine_type, release)}

    def id_of(self, response: httpx.Response, placeholder: str) -> str:
        """The created resource's id, or a placeholder when the create failed, so the walk goes on
        and every later operation is still called (and fails with its own status)."""
        if response.is_success:
            try:
                value = response.json().get("id")
            except (ValueError, AttributeError):
                value = None
            if isinstance(value, str):
                return value
        return f"missing-{placeholder}"
