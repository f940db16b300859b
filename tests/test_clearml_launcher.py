"""The ClearML job launcher.

No ClearML server can run here, so (a) the real SDK is pointed at a closed loopback port or given
no credentials, and (b) the calls the launcher makes are checked against stand-ins for the SDK's
`Task` class and its signed-in `APIClient`, injected at exactly the SDK boundary.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import re
import shlex
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from serval_api.builds.clearml_client import MISSING_CREDENTIALS, ClearMLError, find_queue_id, last_log_lines
from serval_api.builds.clearml_launcher import ClearMLJobLauncher
from serval_api.builds.factory import launcher_from_settings
from serval_api.builds.local import LocalJobLauncher
from serval_common.jobs import CANCELED_EXIT_CODE, JobSpec, take_job_token
from serval_common.settings import Settings
from tests.helpers import free_port

TOKEN = "job-token-that-must-stay-secret"


def make_settings(tmp_path: Path, **clearml: Any) -> Settings:
    return Settings(
        home=tmp_path, jobs={"launcher": "clearml", "clearml": {"poll_interval_s": 0.01, **clearml}}
    )


def make_spec(build_id: str = "b1", options: dict[str, Any] | None = None) -> JobSpec:
    return JobSpec(
        build_id=build_id,
        engine_id="e1",
        source_language="eng_Latn",
        target_language="swh_Latn",
        revision=2,
        train=True,
        options_json=json.dumps(options or {"maxSteps": 5, "learningRate": 0.0001}),
        store_url="s3://models/serval",
        api_address="127.0.0.1:50051",
        job_token=TOKEN,
    )


class FakeTask:
    """A task object as `Task.create` / `Task.get_task` return it."""

    def __init__(self, task_id: str, sdk: RecordingTaskApi) -> None:
        self.id = task_id
        self._sdk = sdk

    def mark_stopped(self, force: bool = False, status_message: str | None = None) -> None:
        if self._sdk.fail_stop:
            raise RuntimeError("server error 500")
        self._sdk.calls.append(("mark_stopped", self.id, force))
        self._sdk.server.set(self.id, "stopped", message=status_message or "")

    def mark_failed(self, **kwargs: Any) -> None:
        self._sdk.calls.append(("mark_failed", self.id, kwargs))
        self._sdk.server.set(self.id, "failed")


class RecordingTaskApi:
    """Stands in for `clearml.Task`: records the class-level calls the launcher makes and keeps
    the fake server's task states as the real server would."""

    def __init__(self, server: FakeApi) -> None:
        self.server = server
        self.calls: list[tuple[Any, ...]] = []
        self.created = 0
        self.fail_enqueue = False
        self.fail_dequeue = False
        self.fail_stop = False

    def create(self, **kwargs: Any) -> FakeTask:
        self.created += 1
        self.calls.append(("create", kwargs))
        task = FakeTask(f"task-{self.created}", self)
        self.server.set(task.id, "created")
        return task

    def enqueue(self, task: FakeTask, queue_id: str | None = None) -> None:
        if self.fail_enqueue:
            raise ValueError("enqueue refused: the queue was deleted")
        self.calls.append(("enqueue", task.id, queue_id))
        self.server.set(task.id, "queued", queue=queue_id)
        self.server.queues_entries.setdefault(str(queue_id), []).append(task.id)

    def dequeue(self, task: str) -> None:
        if self.fail_dequeue:
            raise ValueError("task is not queued")
        self.calls.append(("dequeue", task))
        self.server.set(task, "created")

    def get_task(self, task_id: str) -> FakeTask:
        return FakeTask(task_id, self)

    def set_credentials(self, **kwargs: str) -> None:
        self.calls.append(("set_credentials", kwargs))

    def named(self, name: str) -> list[tuple[Any, ...]]:
        return [c for c in self.calls if c[0] == name]


class FakeApi:
    """Stands in for the signed-in `APIClient`: tasks.get_all, queues.get_all / get_by_id,
    events.get_task_log. Queue `name` has the id `q-name`."""

    def __init__(self) -> None:
        self.queue_names = {"default", "gpu-a100", "serval-gpu"}
        self.rows: dict[str, SimpleNamespace] = {}
        self.queues_entries: dict[str, list[str]] = {}
        self.logs: dict[str, list[dict[str, Any]]] = {}
        self.fail = False
        self.tasks = SimpleNamespace(get_all=self._get_all)
        self.queues = SimpleNamespace(get_all=self._find_queues, get_by_id=self._get_queue)
        self.events = SimpleNamespace(get_task_log=self._get_log)

    def set(self, task_id: str, status: str, queue: str | None = None, message: str = "") -> None:
        self.rows[task_id] = SimpleNamespace(
            id=task_id,
            status=status,
            status_reason="",
            status_message=message,
            execution=SimpleNamespace(queue=queue),
        )

    def _get_all(self, id: list[str], only_fields: list[str]) -> list[SimpleNamespace]:
        if self.fail:
            raise ConnectionError("server gone")
        assert "status" in only_fields
        return [self.rows[i] for i in id if i in self.rows]

    def _find_queues(self, name: str, only_fields: list[str]) -> list[SimpleNamespace]:
        if self.fail:
            raise ConnectionError("server gone")
        return [SimpleNamespace(id=f"q-{n}") for n in self.queue_names if re.fullmatch(name, n)]

    def _get_queue(self, queue: str) -> SimpleNamespace:
        return SimpleNamespace(entries=[SimpleNamespace(task=t) for t in self.queues_entries.get(queue, [])])

    def _get_log(self, task: str, batch_size: int) -> SimpleNamespace:
        return SimpleNamespace(events=self.logs.get(task, [])[-batch_size:])


class Recorder:
    def __init__(self) -> None:
        self.exits: dict[str, tuple[int, str]] = {}
        self.positions: list[dict[str, int]] = []
        self.exited = asyncio.Event()

    async def on_exit(self, build_id: str, code: int, tail: str) -> None:
        self.exits[build_id] = (code, tail)
        self.exited.set()

    async def on_queue(self, positions: dict[str, int]) -> None:
        self.positions.append(positions)


def make_launcher(
    tmp_path: Path, **clearml: Any
) -> tuple[ClearMLJobLauncher, RecordingTaskApi, FakeApi, Recorder]:
    api, recorder = FakeApi(), Recorder()
    sdk = RecordingTaskApi(api)
    launcher = ClearMLJobLauncher(
        make_settings(tmp_path, **clearml), task_api=sdk, api_client_factory=lambda: api
    )
    launcher.on_exit, launcher.on_queue = recorder.on_exit, recorder.on_queue
    return launcher, sdk, api, recorder


# --- (a) the real SDK, no server --------------------------------------------------------------


@pytest.fixture
def no_clearml_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Neither a clearml.conf nor CLEARML_* credentials from the machine running the tests."""
    monkeypatch.setenv("CLEARML_CONFIG_FILE", str(tmp_path / "absent-clearml.conf"))
    for name in (
        "CLEARML_API_HOST",
        "CLEARML_API_ACCESS_KEY",
        "CLEARML_API_SECRET_KEY",
        "CLEARML_AUTH_TOKEN",
    ):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.timeout(30)
@pytest.mark.usefixtures("no_clearml_config")
def test_unreachable_server_fails_launch_fast_with_a_clear_message(tmp_path: Path) -> None:
    host = f"http://127.0.0.1:{free_port()}"
    settings = make_settings(
        tmp_path, api_host=host, access_key="fake", secret_key="fake", connect_timeout_s=5
    )
    launcher = ClearMLJobLauncher(settings)

    with pytest.raises(ClearMLError, match="cannot reach the ClearML API server") as raised:
        asyncio.run(launcher.launch(make_spec()))
    assert host in str(raised.value)
    assert "SERVAL_JOBS__CLEARML__API_HOST" in str(raised.value)
    assert launcher.queue_depth() == 0


@pytest.mark.timeout(30)
@pytest.mark.usefixtures("no_clearml_config")
def test_missing_credentials_fail_launch_with_a_clear_message(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, api_host=f"http://127.0.0.1:{free_port()}")
    launcher = ClearMLJobLauncher(settings)

    with pytest.raises(ClearMLError) as raised:
        asyncio.run(launcher.launch(make_spec()))
    assert str(raised.value) == MISSING_CREDENTIALS


def test_half_the_credentials_are_refused(tmp_path: Path) -> None:
    launcher = ClearMLJobLauncher(make_settings(tmp_path, access_key="only-the-key"))
    with pytest.raises(ClearMLError, match=r"both jobs\.clearml\.access_key and jobs\.clearml\.secret_key"):
        asyncio.run(launcher.launch(make_spec()))


# --- (b) the calls the launcher makes ---------------------------------------------------------


def test_launch_creates_a_module_task_and_keeps_the_token_off_the_command_line(tmp_path: Path) -> None:
    launcher, sdk, _api, _ = make_launcher(
        tmp_path, image="registry.example/serval-jobs:7", job_api_address="api.example:50051"
    )
    spec = make_spec(options={"clearmlQueue": "gpu-a100", "maxSteps": 5})

    async def run() -> str:
        try:
            return await launcher.launch(spec)
        finally:
            await launcher.close()

    assert asyncio.run(run()) == "clearml:task-1"
    [(_, kwargs)] = sdk.named("create")
    argv = shlex.split(kwargs["module"])
    assert argv[0] == "build_jobs"
    expected = [a if a != "127.0.0.1:50051" else "api.example:50051" for a in spec.command_args()]
    assert argv[1:] == expected, (
        "the job gets the exact `build_jobs run` arguments, dialing the jobs' address"
    )
    assert kwargs["binary"].startswith("python"), (
        "the agent splits `-m …` entry points only for python binaries"
    )
    assert kwargs["docker"] == "registry.example/serval-jobs:7"
    assert kwargs["project_name"] == "serval"
    assert spec.build_id in kwargs["task_name"] and spec.engine_id in kwargs["task_name"]
    assert kwargs["add_task_init_call"] is False and kwargs["detect_repository"] is False
    assert TOKEN not in repr(kwargs), "the job token is in no field of the task"
    assert "CLEARML_AGENT_SKIP_PYTHON_ENV_INSTALL=1" in kwargs["docker_args"]
    assert sdk.named("enqueue") == [("enqueue", "task-1", "q-gpu-a100")]


def test_the_job_token_is_in_no_task_field_and_waits_in_the_store_until_taken(tmp_path: Path) -> None:
    """Whoever can see a ClearML task sees its name, entry point, container image and arguments,
    hyperparameters and configuration: the token is in none of them. It waits in the model store,
    the job takes it once, and a task that ends without taking it leaves nothing behind."""
    launcher, sdk, api, recorder = make_launcher(tmp_path, poll_interval_s=60)
    store = launcher.store()

    async def launch(build_id: str) -> None:
        await launcher.launch(make_spec(build_id))

    async def run() -> None:
        await launch("b1")
        await launch("b2")
        await launch("b3")
        api.set("task-2", "failed", message="CUDA out of memory")
        await launcher.poll_once()
        await launcher.cancel("b3")
        await launcher.close()

    asyncio.run(run())
    assert sdk.named("create") and TOKEN not in repr(sdk.calls), "no SDK call carries the token"
    [(_, kwargs), *_] = sdk.named("create")
    assert "SERVAL_JOB_TOKEN" not in kwargs["docker_args"] and TOKEN not in kwargs["module"]
    assert take_job_token(store, "b1") == TOKEN, "the job finds its token in the store"
    assert take_job_token(store, "b1") is None, "read once: the job deletes it as it reads it"
    assert store.list_keys("builds/b1") == []
    assert recorder.exits["b2"][0] == 1
    assert store.list_keys("builds/b2") == [], "a task that ended untaken leaves no token behind"
    assert store.list_keys("builds/b3") == [], "nor does a canceled one"


def test_a_failed_launch_leaves_no_token_in_the_store(tmp_path: Path) -> None:
    launcher, sdk, _api, _ = make_launcher(tmp_path)
    sdk.fail_enqueue = True

    with pytest.raises(ClearMLError):
        asyncio.run(launcher.launch(make_spec()))
    assert launcher.store().list_keys("builds/b1") == []


def test_launch_uses_the_default_queue_and_counts_waiting_builds(tmp_path: Path) -> None:
    launcher, sdk, _api, _ = make_launcher(tmp_path, default_queue="serval-gpu", poll_interval_s=60)

    async def run() -> int:
        await launcher.launch(make_spec("b1"))
        await launcher.launch(make_spec("b2"))
        depth = launcher.queue_depth()
        await launcher.close()
        return depth

    assert asyncio.run(run()) == 2
    assert sdk.named("enqueue") == [
        ("enqueue", "task-1", "q-serval-gpu"),
        ("enqueue", "task-2", "q-serval-gpu"),
    ]


def test_configured_credentials_reach_the_sdk(tmp_path: Path) -> None:
    launcher, sdk, _api, _ = make_launcher(
        tmp_path, api_host="https://api.example", access_key="key", secret_key="secret", poll_interval_s=60
    )

    async def run() -> None:
        await launcher.launch(make_spec())
        await launcher.close()

    asyncio.run(run())
    assert sdk.named("set_credentials") == [
        ("set_credentials", {"api_host": "https://api.example", "key": "key", "secret": "secret"})
    ]


def test_a_missing_queue_fails_the_launch_before_a_task_is_created(tmp_path: Path) -> None:
    launcher, sdk, _api, _ = make_launcher(tmp_path)

    with pytest.raises(ClearMLError, match=r"queue 'nope' does not exist.*clearmlQueue"):
        asyncio.run(launcher.launch(make_spec(options={"clearmlQueue": "nope"})))
    assert sdk.named("create") == []
    assert launcher.queue_depth() == 0


def test_a_refused_enqueue_fails_the_launch_and_marks_the_task_failed(tmp_path: Path) -> None:
    launcher, sdk, _api, _ = make_launcher(tmp_path)
    sdk.fail_enqueue = True

    with pytest.raises(ClearMLError, match=r"could not enqueue the ClearML task on queue 'default'"):
        asyncio.run(launcher.launch(make_spec()))
    assert [c[:2] for c in sdk.named("mark_failed")] == [("mark_failed", "task-1")]
    assert launcher.queue_depth() == 0


def test_monitor_maps_task_states_to_queue_positions_and_exit_codes(tmp_path: Path) -> None:
    launcher, _sdk, api, recorder = make_launcher(tmp_path, poll_interval_s=60)

    async def run() -> None:
        for build_id in ("b1", "b2", "b3", "b4", "b5"):
            await launcher.launch(make_spec(build_id))
        api.queues_entries["q-default"] = ["someone-elses-task", "task-1"]
        api.set("task-2", "completed")
        api.set("task-3", "stopped", message="aborted by a user")
        api.set("task-4", "failed", message="CUDA out of memory")
        api.logs["task-4"] = [
            {"timestamp": 2, "msg": "step 3 loss 2.1\nTraceback: RuntimeError"},
            {"timestamp": 1, "msg": "loading the base model"},
        ]
        del api.rows["task-5"]  # deleted from ClearML
        await launcher.poll_once()
        assert recorder.positions == [{"b1": 1}]
        assert launcher.queue_depth() == 1
        await launcher.poll_once()
        assert recorder.positions == [{"b1": 1}], "unchanged positions are not reported again"
        api.set("task-1", "in_progress")
        await launcher.poll_once()
        assert recorder.positions[-1] == {"b1": 0}
        assert launcher.queue_depth() == 0
        await launcher.close()

    asyncio.run(run())
    assert set(recorder.exits) == {"b2", "b3", "b4", "b5"}
    assert recorder.exits["b2"][0] == 0
    assert recorder.exits["b3"][0] == CANCELED_EXIT_CODE
    code, tail = recorder.exits["b4"]
    assert code == 1
    assert "CUDA out of memory" in tail
    assert tail.splitlines()[-3:] == ["loading the base model", "step 3 loss 2.1", "Traceback: RuntimeError"]
    assert recorder.exits["b5"][0] == 1 and "no longer exists" in recorder.exits["b5"][1]


def test_monitor_loop_polls_by_itself_and_survives_server_errors(tmp_path: Path) -> None:
    launcher, _sdk, api, recorder = make_launcher(tmp_path, poll_interval_s=0.01)

    async def run() -> None:
        await launcher.launch(make_spec("b1"))
        api.fail = True
        await asyncio.sleep(0.05)
        api.fail = False
        api.set("task-1", "completed")
        await asyncio.wait_for(recorder.exited.wait(), timeout=5)
        await launcher.close()

    asyncio.run(run())
    assert recorder.exits["b1"][0] == 0


def test_close_stops_the_monitor_even_in_the_middle_of_a_poll(tmp_path: Path) -> None:
    launcher, _sdk, api, _ = make_launcher(tmp_path, poll_interval_s=0.01)
    polling = threading.Event()
    answer = api.tasks.get_all

    def slow_get_all(**kwargs: Any) -> list[SimpleNamespace]:
        polling.set()
        time.sleep(0.2)
        return answer(**kwargs)

    api.tasks.get_all = slow_get_all

    async def run() -> None:
        await launcher.launch(make_spec("b1"))
        await asyncio.to_thread(polling.wait, 5)
        await asyncio.wait_for(launcher.close(), timeout=5)

    asyncio.run(run())
    assert launcher.queue_depth() == 0


def test_a_dequeued_task_ends_its_build_as_canceled(tmp_path: Path) -> None:
    launcher, _sdk, api, recorder = make_launcher(tmp_path, poll_interval_s=60)

    async def run() -> None:
        await launcher.launch(make_spec("b1"))
        api.set("task-1", "created")
        await launcher.poll_once()
        await launcher.close()

    asyncio.run(run())
    assert recorder.exits["b1"][0] == CANCELED_EXIT_CODE


def test_cancel_dequeues_a_waiting_task_and_stops_a_running_one(tmp_path: Path) -> None:
    launcher, sdk, api, recorder = make_launcher(tmp_path, poll_interval_s=60)

    async def run() -> None:
        await launcher.launch(make_spec("waiting"))
        await launcher.launch(make_spec("running"))
        api.set("task-1", "queued", queue="q1")
        api.set("task-2", "in_progress")
        await launcher.poll_once()
        await launcher.cancel("waiting")
        await launcher.cancel("running")
        await launcher.cancel("never-launched")
        await launcher.poll_once()
        await launcher.close()

    asyncio.run(run())
    assert sdk.named("dequeue") == [("dequeue", "task-1")]
    assert sdk.named("mark_stopped") == [("mark_stopped", "task-2", True)]
    assert recorder.exits == {}, "a canceled build is not reported again"


def test_cancel_stops_a_task_that_started_before_it_could_be_dequeued(tmp_path: Path) -> None:
    launcher, sdk, _api, _ = make_launcher(tmp_path, poll_interval_s=60)
    sdk.fail_dequeue = True

    async def run() -> None:
        await launcher.launch(make_spec("b1"))
        await launcher.cancel("b1")
        await launcher.close()

    asyncio.run(run())
    assert sdk.named("mark_stopped") == [("mark_stopped", "task-1", True)]


def test_cancel_never_raises_on_a_server_error(tmp_path: Path) -> None:
    launcher, sdk, api, _ = make_launcher(tmp_path, poll_interval_s=60)

    async def run() -> None:
        await launcher.launch(make_spec("b1"))
        api.set("task-1", "in_progress")
        await launcher.poll_once()
        sdk.fail_stop = True
        await launcher.cancel("b1")
        await launcher.close()

    asyncio.run(run())
    assert sdk.named("mark_stopped") == []


def test_resume_follows_an_unfinished_task_and_refuses_a_finished_one(tmp_path: Path) -> None:
    launcher, sdk, api, recorder = make_launcher(tmp_path, poll_interval_s=60)
    api.set("running-task", "in_progress")
    api.set("waiting-task", "queued", queue="q1")
    api.set("done-task", "completed")
    api.set("failed-task", "failed")

    async def run() -> list[bool]:
        answers = [
            await launcher.resume("b1", "clearml:running-task"),
            await launcher.resume("b2", "clearml:waiting-task"),
            await launcher.resume("b3", "clearml:done-task"),
            await launcher.resume("b4", "clearml:failed-task"),
            await launcher.resume("b5", "clearml:deleted-task"),
            await launcher.resume("b6", "local:api-0"),
        ]
        assert launcher.queue_depth() == 1
        api.set("running-task", "completed")
        await launcher.poll_once()
        await launcher.close()
        return answers

    assert asyncio.run(run()) == [True, True, False, False, False, False]
    assert recorder.exits == {"b1": (0, "the ClearML task running-task completed")}
    assert sdk.named("create") == []


def test_resume_keeps_following_when_clearml_cannot_be_reached(tmp_path: Path) -> None:
    launcher, _sdk, api, _ = make_launcher(tmp_path, poll_interval_s=60)
    api.fail = True

    async def run() -> bool:
        try:
            return await launcher.resume("b1", "clearml:task-9")
        finally:
            await launcher.close()

    assert asyncio.run(run()) is True


def test_the_stand_in_calls_match_the_real_sdk_signatures(tmp_path: Path) -> None:
    """The stand-in records what the launcher calls; each call must also bind to the real `Task`."""
    from clearml import Task

    launcher, sdk, api, _ = make_launcher(
        tmp_path, api_host="https://api.example", access_key="k", secret_key="s"
    )

    async def run() -> None:
        await launcher.launch(make_spec("b1"))
        await launcher.launch(make_spec("b2"))
        api.set("task-2", "in_progress")
        await launcher.poll_once()
        await launcher.cancel("b1")
        await launcher.cancel("b2")
        await launcher.close()

    asyncio.run(run())
    [(_, create)] = sdk.named("create")[:1]
    inspect.signature(Task.create).bind(**create)
    inspect.signature(Task.enqueue).bind("task-1", queue_id="q-default")
    inspect.signature(Task.dequeue).bind("task-1")
    inspect.signature(Task.get_task).bind(task_id="task-2")
    inspect.signature(Task.mark_stopped).bind(None, force=True, status_message="canceled in Serval")
    inspect.signature(Task.mark_failed).bind(None, status_reason="r", status_message="m", force=True)
    [(_, credentials)] = sdk.named("set_credentials")
    inspect.signature(Task.set_credentials).bind(**credentials)
    assert [c[0] for c in sdk.calls if c[0] in ("dequeue", "mark_stopped")] == ["dequeue", "mark_stopped"]


class RecordingSession:
    """An SDK session that answers from canned server responses, so the real `APIClient` builds
    and parses the monitor's requests."""

    def __init__(self) -> None:
        self.requests: list[Any] = []

    def send(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        from clearml.backend_api.services import v2_23

        self.requests.append(request)
        answers = {
            ("tasks", "get_all"): lambda: v2_23.tasks.GetAllResponse(
                tasks=[
                    v2_23.tasks.Task(
                        id="t1",
                        status="queued",
                        status_message="m",
                        execution=v2_23.tasks.Execution(queue="q1"),
                    )
                ]
            ),
            ("queues", "get_by_id"): lambda: v2_23.queues.GetByIdResponse(
                queue=v2_23.queues.Queue(
                    id="q1", entries=[v2_23.queues.Entry(task="x"), v2_23.queues.Entry(task="t1")]
                )
            ),
            ("queues", "get_all"): lambda: v2_23.queues.GetAllResponse(queues=[v2_23.queues.Queue(id="q1")]),
            ("events", "get_task_log"): lambda: v2_23.events.GetTaskLogResponse(
                events=[{"timestamp": 2, "msg": "b\nc"}, {"timestamp": 1, "msg": "a"}]
            ),
        }
        return SimpleNamespace(response=answers[(request._service, request._action)](), ok=lambda: True)


def test_the_monitor_reads_through_the_real_api_client(tmp_path: Path) -> None:
    """Requests built and answers parsed by the SDK's own `APIClient` (statuses are enums there)."""
    from clearml.backend_api.session.client import APIClient

    session = RecordingSession()
    api = APIClient(session=session, api_version="2.23")
    assert last_log_lines(api, "t1", 2) == ["b", "c"]
    assert find_queue_id(api, "gpu.a100") == "q1"
    assert session.requests[-1].to_dict()["name"] == r"^gpu\.a100$"
    launcher = ClearMLJobLauncher(
        make_settings(tmp_path, poll_interval_s=60),
        task_api=RecordingTaskApi(FakeApi()),
        api_client_factory=lambda: api,
    )
    recorder = Recorder()
    launcher.on_exit, launcher.on_queue = recorder.on_exit, recorder.on_queue

    async def run() -> bool:
        resumed = await launcher.resume("b1", "clearml:t1")
        await launcher.poll_once()
        await launcher.close()
        return resumed

    assert asyncio.run(run()) is True
    assert recorder.positions == [{"b1": 1}]
    sent = [request.to_dict() for request in session.requests]
    assert sent[2]["id"] == ["t1"] and "execution.queue" in sent[2]["only_fields"]
    assert sent[-1]["queue"] == "q1"


# --- (c) choosing the launcher ----------------------------------------------------------------


def test_launcher_from_settings_picks_local_or_clearml(tmp_path: Path) -> None:
    local = launcher_from_settings(Settings(home=tmp_path, jobs={"launcher": "local"}))
    assert isinstance(local, LocalJobLauncher)
    clearml = launcher_from_settings(Settings(home=tmp_path, jobs={"launcher": "ClearML"}))
    assert isinstance(clearml, ClearMLJobLauncher)


def test_launcher_from_settings_refuses_unknown_launchers(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"unknown jobs\.launcher 'slurm'.*local, clearml"):
        launcher_from_settings(Settings(home=tmp_path, jobs={"launcher": "slurm"}))


def test_clearml_launcher_without_the_package_says_which_extra_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "clearml", None)
    with pytest.raises(RuntimeError, match="install the `clearml` extra"):
        launcher_from_settings(Settings(home=tmp_path, jobs={"launcher": "clearml"}))
