"""From build start to the first translation served by the new revision, through the real API
service, build job and inference node, side by side with two baselines: an inference-only build
(no training: the path's fixed cost) and the fine-tuning loop called directly (no API service,
no job process: the training cost alone).

A translation counts as served by the new revision when its `X-Model-Revision` header names it
(during the hot swap the previous revision answers while the node loads the new one).

Run by hand (never as a timed test):  .venv/bin/python bench/build_to_translation.py [--steps 300]
It reuses the tiny base model of `serval demo` (building it first if needed) and starts its own
API service and node on free loopback ports. Results are printed and written as JSON.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from build_jobs.nmt.finetune import finetune
from serval_cli import processes
from serval_cli.bootstrap import create_credentials
from serval_cli.build_watch import engine_path
from serval_cli.demo import BASE_MODEL, ensure_base_model, fine_tune_pairs, upload_corpus
from serval_common.manifest import fetch_folder
from serval_common.settings import Settings, StoreSettings
from serval_common.store import store_from_settings

POLL_S = 0.05


def direct_steps_per_s(settings: Settings, pairs: list[tuple[str, str]], steps: int, lr: float) -> float:
    """The fine-tuning loop alone, on the same checkpoint, pairs and batch size as the job."""
    with tempfile.TemporaryDirectory() as tmp:
        _, base = fetch_folder(store_from_settings(settings), f"base-models/{BASE_MODEL}", Path(tmp))
        result = finetune(
            base / "hf",
            Path(tmp) / "out",
            pairs,
            "eng_Latn",
            "swh_Latn",
            max_steps=steps,
            time_budget_s=3600,
            lr=lr,
            batch_size=16,
        )
    return result.steps / result.seconds


def served_revision(rest: processes.RestClient, path: str, probe: str) -> int | None:
    status, _ = rest.call("POST", f"{path}/translate", probe)
    return int(rest.last_headers["x-model-revision"]) if status == 200 else None


def timed_build(
    rest: processes.RestClient, engine_id: str, config: dict[str, Any], probe: str
) -> dict[str, float]:
    """Seconds from the build's start to Completed and to the first translation by its revision."""
    path = engine_path(engine_id)
    started = time.monotonic()
    build = rest.expect(201, "POST", f"{path}/builds", config)
    while build["state"] in ("Pending", "Active"):
        status, polled = rest.call(
            "GET", f"{path}/builds/{build['id']}?min-revision={build['revision'] + 1}", timeout_s=60
        )
        build = polled if status == 200 else build
    completed = time.monotonic() - started
    if build["state"] != "Completed":
        raise RuntimeError(f"build {build['id']} ended {build['state']}: {build.get('message')}")
    revision = rest.expect(200, "GET", path)["modelRevision"]
    while served_revision(rest, path, probe) != revision:
        if time.monotonic() - started > completed + 120:
            raise RuntimeError("the new revision never served a translation")
        time.sleep(POLL_S)
    served = time.monotonic() - started
    return {"to_completed_s": completed, "to_first_translation_s": served, "swap_s": served - completed}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--learning-rate", type=float, default=3e-4)
    parser.add_argument("--home", type=Path, default=Path(".serval"))
    parser.add_argument("--out", type=Path, default=Path("bench/results/build_to_translation.json"))
    args = parser.parse_args()

    shared = Settings(home=args.home)
    ensure_base_model(shared, steps=1000, rebuild=False)
    uploaded, kept = fine_tune_pairs()
    probe = kept[0].source
    pairs = [(p.source, p.target) for p in uploaded]
    direct = direct_steps_per_s(shared, pairs, args.steps, args.learning_rate)

    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        settings = Settings(home=home, store=StoreSettings(url=shared.resolved_store_url))
        api_key, node_token = create_credentials(settings, "bench")
        grpc_port, rest_port = processes.free_port(), processes.free_port()
        env = {"SERVAL_STORE__URL": settings.resolved_store_url}
        api = processes.start(
            ["api", "--home", str(home), "--grpc-port", str(grpc_port), "--rest-port", str(rest_port)],
            home / "api.log",
            env,
        )
        node = processes.start(
            ["node", "--home", str(home), "--api-address", f"127.0.0.1:{grpc_port}"],
            home / "node.log",
            {**env, "SERVAL_NODE__TOKEN": node_token},
        )
        try:
            rest = processes.RestClient(f"http://127.0.0.1:{rest_port}", api_key)
            rest.wait_until_up(api)
            rest.wait_for_node(node)
            engine = rest.expect(
                201,
                "POST",
                "/api/v1/translation/engines",
                {"sourceLanguage": "en", "targetLanguage": "sw", "type": "nmt"},
            )
            corpus_id = upload_corpus(rest, engine_path(engine["id"]), uploaded)
            inference_only = timed_build(rest, engine["id"], {"trainOn": []}, probe)
            options = {"maxSteps": args.steps, "timeBudgetS": 3600, "learningRate": args.learning_rate}
            training = timed_build(
                rest,
                engine["id"],
                {"trainOn": [{"parallelCorpusId": corpus_id}], "options": options},
                probe,
            )
            store = store_from_settings(settings)
            manifest = json.loads(store.read_bytes(f"models/{engine['id']}/2/manifest.json"))
        finally:
            processes.stop(node)
            processes.stop(api)

    job_rate = manifest["training"]["steps_per_second"]
    print(f"{'':44}{'inference-only':>16}{'training build':>16}")
    for key, label in (
        ("to_completed_s", "build start → Completed (s)"),
        ("to_first_translation_s", "build start → first translation (s)"),
        ("swap_s", "Completed → new revision serving (s)"),
    ):
        print(f"{label:44}{inference_only[key]:>16.2f}{training[key]:>16.2f}")
    print(f"\n{'fine-tuning steps/s':44}{'direct loop':>16}{'build job':>16}")
    print(f"{f'({args.steps} steps, batch 16)':44}{direct:>16.2f}{job_rate:>16.2f}")
    print(
        f"\nbuild chrF before → after: {manifest['scores']['chrf_before']:.1f} → {manifest['scores']['chrf_after']:.1f}"
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "steps": args.steps,
                "inference_only": inference_only,
                "training": training,
                "steps_per_s": {"direct": direct, "job": job_rate},
                "scores": manifest["scores"],
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
