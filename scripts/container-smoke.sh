#!/usr/bin/env bash
# Builds the three container images (docker/*.Dockerfile) with podman and smoke-runs them on
# loopback: the API image answers REST and gRPC health; a server container (the build-jobs image
# running `serval api`, as deploy/compose.yaml does) runs a real build job as its child process;
# an inference-node container registers with it, serves /metrics and answers a translation of
# the engine that build published. Between the two, the Helm chart's own API pod spec (rendered
# offline by scripts/render_api_pod.py with the Helm SDK the chart's tests use) runs on the API
# image under `podman kube play` and answers REST and gRPC health. CI runs it after `make test`
# (`make containers`). `scripts/container-smoke.sh --kube-play-only` runs only that kube play step,
# on the localhost/serval-live/api:ci an earlier run built (it builds nothing).
#
# Run as root on Debian (it apt-installs podman, runc and mmdebstrap when they are missing) with
# Debian's archive and PyPI reachable; no container registry is needed. Nothing under /etc is
# changed: podman reads the containers.conf this script writes (CONTAINERS_CONF). The bases are
# Debian bookworm made with mmdebstrap and the host's extra CA certificates
# (/usr/local/share/ca-certificates), passed as the Dockerfiles' PYTHON_IMAGE / CUDA_IMAGE
# arguments; PyTorch's CPU wheel is served from 127.0.0.1 as TORCH_INDEX_URL. Every step that
# cannot run says what failed and exits non-zero: nothing is skipped.
#
# Cache: bases and images are tagged with a hash of what they are built from (the base's package
# list and CA certificates; each Dockerfile, the build context and the build arguments) and kept
# in podman's storage, so a rerun with nothing changed builds nothing. Work files live under
# SERVAL_CONTAINER_CACHE (default /var/tmp/serval-containers), outside the clone.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
ONLY=""
case "${1:-}" in
    "") ;;
    --kube-play-only) ONLY=kube-play ;;
    *)
        echo "usage: $0 [--kube-play-only]" >&2
        exit 2
        ;;
esac

CACHE="${SERVAL_CONTAINER_CACHE:-/var/tmp/serval-containers}"
SUITE=bookworm
BASE_PACKAGES="python3,python3-venv,python3-pip,python-is-python3,ca-certificates,passwd"
TORCH_VERSION="2.13.0"
PREFIX="container-smoke:"
START=$(date +%s)
STEP="starting"
RESULTS=()

say() { echo "$PREFIX $*"; }
fail() {
    echo "$PREFIX FAILED at '$STEP': $*" >&2
    exit 1
}
on_exit() {
    local code=$?
    trap - EXIT
    cleanup
    if [ "$code" -ne 0 ]; then
        echo "$PREFIX FAILED (exit $code) at '$STEP'; see the output above" >&2
    fi
    exit "$code"
}
step() {
    STEP="$*"
    say "--- $* ($(($(date +%s) - START)) s)"
}

CONTAINERS=()
PIDS=()
# What kube_play_api made: `podman kube down` leaves its secrets and the claims' volumes (podman 4.3).
KUBE_FILES=()
KUBE_CONTAINERS=()
KUBE_SECRETS=()
KUBE_VOLUMES=()
kube_cleanup() {  # [dump]: show the pod's last log lines first
    local name
    for name in "${KUBE_CONTAINERS[@]}"; do
        if [ "${1:-}" = dump ]; then
            echo "$PREFIX last lines of the kube play pod's container $name:" >&2
            podman logs --tail 40 "$name" >&2 2>&1 || true
        fi
    done
    for name in "${KUBE_FILES[@]}"; do podman kube down "$name" >/dev/null 2>&1 || true; done
    for name in "${KUBE_SECRETS[@]}"; do podman secret rm "$name" >/dev/null 2>&1 || true; done
    for name in "${KUBE_VOLUMES[@]}"; do podman volume rm -f "$name" >/dev/null 2>&1 || true; done
    KUBE_FILES=() KUBE_CONTAINERS=() KUBE_SECRETS=() KUBE_VOLUMES=()
}
cleanup() {
    local name pid
    for name in "${CONTAINERS[@]}"; do
        if [ "$code_dump" = 1 ]; then
            echo "$PREFIX last lines of container $name:" >&2
            podman logs --tail 40 "$name" >&2 2>&1 || true
        fi
        podman rm -f -t 5 "$name" >/dev/null 2>&1 || true
    done
    if [ "$code_dump" = 1 ]; then kube_cleanup dump; else kube_cleanup; fi
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    if [ -n "${WORK:-}" ] && [ -d "$WORK" ]; then rm -rf "$WORK"; fi
}
code_dump=1
trap on_exit EXIT

# --- the tools -------------------------------------------------------------------------------
step "tools: podman, runc, mmdebstrap"
[ "$(id -u)" = 0 ] || fail "run as root: mmdebstrap and rootful podman need it (this is $(id -un))"
missing=()
for tool in podman runc mmdebstrap; do command -v "$tool" >/dev/null || missing+=("$tool"); done
if [ "${#missing[@]}" -gt 0 ]; then
    say "installing ${missing[*]} from Debian"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman runc mmdebstrap) \
        >"/tmp/container-smoke-apt.log" 2>&1 ||
        fail "apt-get install podman runc mmdebstrap failed: $(tail -3 /tmp/container-smoke-apt.log)"
fi
mkdir -p "$CACHE"
# runc, not crun ("cgroups in hybrid mode not supported"); limits above these fail with
# "setrlimit … Operation not permitted" on such machines.
cat >"$CACHE/containers.conf" <<'EOF'
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
EOF
export CONTAINERS_CONF="$CACHE/containers.conf"
podman info >/dev/null 2>"$CACHE/podman-info.err" || fail "podman cannot run here: $(tail -3 "$CACHE/podman-info.err")"
say "$(podman --version), runtime $(podman info --format '{{.Host.OCIRuntime.Name}}'), storage $(podman info --format '{{.Store.GraphDriverName}}')"

PY="$ROOT/.venv/bin/python"
[ -x "$PY" ] || fail "$PY is missing: run \`make test\` (or \`make .venv/.installed\`) first"

free_port() { "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
hash_of() { sha256sum | cut -c1-16; }
elapsed_since() { echo $(($(date +%s) - $1)); }
size_of() { podman image inspect --format '{{.Size}}' "$1" | awk '{printf "%.0f MB", $1 / 1000000}'; }
now_ms() { date +%s%3N; }
seconds_since_ms() { awk -v t0="$1" -v t1="$(now_ms)" 'BEGIN { printf "%.1f", (t1 - t0) / 1000 }'; }

# `podman run -d` and `podman kube play` report on stderr that they cannot add systemd timers for
# the images' health checks (no systemd here); this script runs them itself (`podman healthcheck run`).
wait_for() {  # what url container
    local what=$1 url=$2 container=$3
    for _ in $(seq 120); do
        curl -fsS -o /dev/null "$url" 2>/dev/null && return 0
        [ "$(podman inspect --format '{{.State.Running}}' "$container" 2>/dev/null)" = true ] ||
            fail "$what: container $container stopped: $(podman logs --tail 20 "$container" 2>&1)"
        sleep 0.5
    done
    fail "$what: $url did not answer within 60 s"
}
grpc_serving() {  # what port: the gRPC health service on 127.0.0.1:port answers SERVING
    "$PY" - "$1" "$2" <<'EOF' || fail "the $1's gRPC health check did not answer SERVING"
import sys
import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
with grpc.insecure_channel(f"127.0.0.1:{sys.argv[2]}") as channel:
    status = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10).status
print(f"container-smoke: {sys.argv[1]} gRPC health:", health_pb2.HealthCheckResponse.ServingStatus.Name(status))
sys.exit(status != health_pb2.HealthCheckResponse.SERVING)
EOF
}

# --- the Helm chart's API pod under `podman kube play` ---------------------------------------
# Run after the API image's smoke (or alone: --kube-play-only), on localhost/serval-live/api:ci.
# scripts/render_api_pod.py renders helm/serval-live offline with helm-python-sdk (Helm's Go SDK,
# as tests/test_helm_chart.py; no helm or kubectl binary, no kubeconfig): api.kind=Deployment, one
# replica, pull policy Never, no inference nodes, SQLite on the pod's `data` emptyDir (through
# database.url: the chart has no SQLite switch), the model store on the chart's claim; each
# container port published as a hostPort on 127.0.0.1 (the pod is on podman's bridge network).
# kube play gets the Deployment and the PersistentVolumeClaim. Dropped: the two Services (kube
# play makes none; the host ports stand in for them) and the ServiceAccount (no API server; the
# pod mounts no token). The chart's Secret (the database URL) is made a podman secret beforehand,
# not kept in the kube YAML: podman 4.3 stores a Secret from there but its secretKeyRef lookup
# refuses it ("not valid JSON"). The chart's probes are not run: podman 4.3 makes them a health
# check `curl -f HTTP://localhost:0/…` (no named ports; the image has no curl), so the step asks
# what they ask itself: GET /api/v1/status/ping (200) on the REST port, then gRPC health.
KUBE_TIMES=""
kube_play_api() {
    local image=localhost/serval-live/api:ci dir="$WORK/kube" t0 t1 render_s ready_s rest grpc kind name file line ctr code
    t0=$(now_ms)
    rest=$(free_port)
    grpc=$(free_port)
    "$PY" "$ROOT/scripts/render_api_pod.py" --image "$image" --pull-policy Never \
        --host-port "http=$rest" --host-port "grpc=$grpc" --out "$dir" >"$WORK/kube-render.log" 2>&1 ||
        fail "rendering the chart's API pod (scripts/render_api_pod.py) failed: $(tail -15 "$WORK/kube-render.log")"
    while IFS= read -r line; do say "  $line"; done <"$WORK/kube-render.log"
    render_s=$(seconds_since_ms "$t0")
    # podman 4.3 names the pod's emptyDir volumes after the spec's (tmp, data, home) and mounts a
    # volume of that name if there is one: refuse rather than run on someone's (or stale) data.
    while read -r kind name; do
        ! podman volume exists "$name" ||
            fail "a podman volume named $name exists: kube play would mount it as the pod's $kind $name; remove it (podman volume rm $name) if an interrupted run of this script left it"
    done <"$dir/volumes"
    for file in "$dir"/secrets/*.json; do
        [ -e "$file" ] || continue
        name=$(basename "$file" .json)
        ! podman secret inspect "$name" >/dev/null 2>&1 ||
            fail "a podman secret named $name exists; remove it (podman secret rm $name) if an interrupted run of this script left it"
        podman secret create "$name" "$file" >/dev/null 2>"$WORK/kube-secret.err" ||
            fail "podman secret create $name (the chart's Secret) failed: $(tail -3 "$WORK/kube-secret.err")"
        KUBE_SECRETS+=("$name")
    done
    while read -r kind name; do KUBE_VOLUMES+=("$name"); done <"$dir/volumes"
    t1=$(now_ms)
    KUBE_FILES+=("$dir/pod.yaml")
    podman kube play "$dir/pod.yaml" >"$WORK/kube-play.out" 2>"$WORK/kube-play.err" ||
        fail "podman kube play of the chart's API pod failed: $(tail -5 "$WORK/kube-play.err")"
    ctr=$(awk '/^Containers?:$/ { getline; print; exit }' "$WORK/kube-play.out")
    [ -n "$ctr" ] || fail "podman kube play started no container: $(cat "$WORK/kube-play.out" "$WORK/kube-play.err")"
    KUBE_CONTAINERS+=("$ctr")
    wait_for "the chart's API pod" "http://127.0.0.1:$rest/api/v1/status/ping" "$ctr"
    code=$(curl -sS -o /dev/null -w '%{http_code}' "http://127.0.0.1:$rest/api/v1/status/ping") || code="no answer"
    [ "$code" = 200 ] || fail "the chart's API pod: GET /api/v1/status/ping answered $code, not 200"
    say "the chart's API pod $(podman inspect --format '{{.Name}}' "$ctr"): GET /api/v1/status/ping 200 on 127.0.0.1:$rest"
    grpc_serving "kube play API pod" "$grpc"
    ready_s=$(seconds_since_ms "$t1")
    t1=$(now_ms)
    podman kube down "$dir/pod.yaml" >/dev/null 2>"$WORK/kube-down.err" ||
        fail "podman kube down of the chart's API pod failed: $(tail -5 "$WORK/kube-down.err")"
    KUBE_FILES=() KUBE_CONTAINERS=()
    kube_cleanup
    KUBE_TIMES="render $render_s s, play to answering $ready_s s, down $(seconds_since_ms "$t1") s; $(seconds_since_ms "$t0") s in all"
    say "kube play of the chart's API pod: $KUBE_TIMES"
}

if [ "$ONLY" = kube-play ]; then
    step "smoke: the Helm chart's API pod on the API image (podman kube play; --kube-play-only)"
    say "--kube-play-only: no image is built; the step runs on localhost/serval-live/api:ci as it is"
    podman image exists localhost/serval-live/api:ci ||
        fail "there is no localhost/serval-live/api:ci: run scripts/container-smoke.sh without --kube-play-only first"
    WORK=$(mktemp -d /var/tmp/serval-smoke.XXXXXX)
    kube_play_api
    code_dump=0
    STEP="done"
    say "passed in $(elapsed_since "$START") s: the chart's API pod under podman kube play (REST ping, gRPC health)"
    exit 0
fi

# --- the base: Debian bookworm with Python 3.11 and this machine's CA certificates ----------
step "base image (mmdebstrap $SUITE)"
CA_DIR=/usr/local/share/ca-certificates
base_key=$({
    echo "$SUITE $BASE_PACKAGES v1"
    if [ -d "$CA_DIR" ]; then find "$CA_DIR" -type f -name '*.crt' -print0 | sort -z | xargs -0 -r sha256sum; fi
} | hash_of)
BASE="localhost/serval-ci/python-base:$base_key"
if podman image exists "$BASE"; then
    say "reusing $BASE"
    RESULTS+=("base       reused            $(size_of "$BASE")")
else
    t0=$(date +%s)
    tarball="$CACHE/base-$base_key.tar"
    hooks=()
    if [ -d "$CA_DIR" ] && [ -n "$(ls -A "$CA_DIR")" ]; then
        # The host's extra CAs (a TLS-inspecting proxy's) go into the CI base only; published
        # images keep the public bases. Bind-mounting the host's bundle instead breaks apt's
        # ca-certificates.
        hooks=(--customize-hook="sync-in $CA_DIR $CA_DIR" --customize-hook='chroot "$1" update-ca-certificates')
    fi
    mmdebstrap --variant=minbase --include="$BASE_PACKAGES" "${hooks[@]}" "$SUITE" "$tarball" \
        >"$CACHE/mmdebstrap.log" 2>&1 || fail "mmdebstrap failed: $(tail -5 "$CACHE/mmdebstrap.log")"
    podman import --change 'CMD ["/bin/bash"]' "$tarball" "$BASE" >/dev/null ||
        fail "podman import $tarball failed"
    rm -f "$tarball"
    RESULTS+=("base       $(elapsed_since "$t0") s built        $(size_of "$BASE")")
fi

# --- PyTorch's CPU wheel as a one-package index on 127.0.0.1 ---------------------------------
step "torch $TORCH_VERSION CPU wheel index"
INDEX="$CACHE/torch-index"
mkdir -p "$INDEX/simple/torch" "$INDEX/files"
wheel=$(find "$INDEX/files" -name "torch-$TORCH_VERSION+cpu-cp311-*.whl" | head -1)
if [ -z "$wheel" ]; then
    # pip's own sources as this machine configures them (its find-links, indexes, proxy).
    "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.11 \
        --platform manylinux_2_28_x86_64 -d "$INDEX/files" "torch==$TORCH_VERSION+cpu" \
        >"$CACHE/torch-download.log" 2>&1 ||
        fail "pip could not get torch==$TORCH_VERSION+cpu: $(tail -3 "$CACHE/torch-download.log")"
    wheel=$(find "$INDEX/files" -name "torch-$TORCH_VERSION+cpu-cp311-*.whl" | head -1)
    [ -n "$wheel" ] || fail "pip downloaded no torch-$TORCH_VERSION+cpu cp311 wheel into $INDEX/files"
fi
name=$(basename "$wheel")
printf '<!DOCTYPE html><html><body><a href="../../files/%s#sha256=%s">%s</a></body></html>\n' \
    "$name" "$(sha256sum "$wheel" | cut -d' ' -f1)" "$name" >"$INDEX/simple/torch/index.html"
INDEX_PORT=$(free_port)
"$PY" -m http.server --bind 127.0.0.1 --directory "$INDEX" "$INDEX_PORT" >/dev/null 2>&1 &
PIDS+=($!)
TORCH_INDEX_URL="http://127.0.0.1:$INDEX_PORT/simple"
for _ in $(seq 50); do curl -fsS -o /dev/null "$TORCH_INDEX_URL/torch/" 2>/dev/null && break || sleep 0.1; done
curl -fsS -o /dev/null "$TORCH_INDEX_URL/torch/" || fail "the torch index on 127.0.0.1:$INDEX_PORT does not answer"

# --- the images ------------------------------------------------------------------------------
# What each image is built from: its Dockerfile, the build context (.dockerignore lets in only
# these) and the arguments that change its content (TORCH_INDEX_URL's port does not).
context_key=$(find pyproject.toml README.md serval serval_common serval_api inference_gpu build_jobs serval_cli \
    -type f ! -path '*/__pycache__/*' ! -name '*.py[cod]' ! -path '*.egg-info/*' -print0 |
    sort -z | xargs -0 sha256sum | cat - .dockerignore | hash_of)

build_image() {  # name dockerfile [--build-arg …]
    local name=$1 dockerfile=$2
    shift 2
    local key tag t0
    key=$( (cat "$dockerfile"; echo "$context_key $BASE $*" | sed "s/:$INDEX_PORT\\b//g") | hash_of)
    tag="localhost/serval-live/$name:$key"
    if podman image exists "$tag"; then
        say "reusing $tag"
        RESULTS+=("$(printf '%-10s reused            %s' "$name" "$(size_of "$tag")")")
    else
        t0=$(date +%s)
        podman build --pull=never --format docker --network host -f "$dockerfile" \
            --build-arg "PYTHON_IMAGE=$BASE" "$@" -t "$tag" . >"$CACHE/build-$name.log" 2>&1 ||
            fail "podman build -f $dockerfile failed: $(tail -15 "$CACHE/build-$name.log")"
        RESULTS+=("$(printf '%-10s %4d s built      %s' "$name" "$(elapsed_since "$t0")" "$(size_of "$tag")")")
    fi
    podman tag "$tag" "localhost/serval-live/$name:ci"
    local check
    check=$(podman image inspect --format '{{if .Config.Healthcheck}}{{.Config.Healthcheck.Test}}{{end}}' "$tag")
    [ -n "$check" ] || fail "$tag has no HEALTHCHECK (built without --format docker?)"
}

step "image: api"
build_image api docker/api.Dockerfile
step "image: node"
build_image node docker/node.Dockerfile --build-arg "CUDA_IMAGE=$BASE"
step "image: build-jobs"
build_image build-jobs docker/build-jobs.Dockerfile --build-arg "CUDA_IMAGE=$BASE" \
    --build-arg "TORCH_INDEX_URL=$TORCH_INDEX_URL"
kill "${PIDS[0]}" 2>/dev/null || true

# --- smoke: the API image alone ----------------------------------------------------------------
WORK=$(mktemp -d /var/tmp/serval-smoke.XXXXXX)
mkdir -p "$WORK/api" "$WORK/server"
chown 10001:10001 "$WORK/api" "$WORK/server"
chmod 0750 "$WORK/api" "$WORK/server"

step "smoke: API image (REST ping, gRPC health, health check)"
API_REST=$(free_port)
API_GRPC=$(free_port)
CONTAINERS+=(serval-smoke-api)
podman run -d --name serval-smoke-api --network host -v "$WORK/api:/var/lib/serval" \
    -e SERVAL_API__HOST=127.0.0.1 -e SERVAL_API__REST_PORT="$API_REST" -e SERVAL_API__GRPC_PORT="$API_GRPC" \
    localhost/serval-live/api:ci >/dev/null 2>"$WORK/run-api.err" ||
    fail "podman run of the API image failed: $(tail -5 "$WORK/run-api.err")"
wait_for "API container" "http://127.0.0.1:$API_REST/api/v1/status/ping" serval-smoke-api
grpc_serving "API container" "$API_GRPC"
podman healthcheck run serval-smoke-api || fail "the API image's HEALTHCHECK failed on a running container"

step "smoke: the Helm chart's API pod on the API image (podman kube play)"
kube_play_api

# --- smoke: server (build-jobs image running `serval api`) + node + a build job --------------
step "smoke: tiny base model into the server's store (build-jobs image)"
podman run --rm --network none -v "$WORK/server:/var/lib/serval" localhost/serval-live/build-jobs:ci \
    serval admin base-model make-tiny --steps 20 >"$WORK/make-tiny.log" 2>&1 ||
    fail "serval admin base-model make-tiny in the build-jobs image failed: $(tail -10 "$WORK/make-tiny.log")"

step "smoke: server container (serval api with local build jobs)"
REST=$(free_port)
GRPC=$(free_port)
METRICS=$(free_port)
URL="http://127.0.0.1:$REST"
CONTAINERS+=(serval-smoke-server)
podman run -d --name serval-smoke-server --network host -v "$WORK/server:/var/lib/serval" \
    -e SERVAL_API__HOST=127.0.0.1 -e SERVAL_API__REST_PORT="$REST" -e SERVAL_API__GRPC_PORT="$GRPC" \
    localhost/serval-live/build-jobs:ci serval api >/dev/null 2>"$WORK/run-server.err" ||
    fail "podman run of the server container failed: $(tail -5 "$WORK/run-server.err")"
wait_for "server container" "$URL/api/v1/status/ping" serval-smoke-server
NODE_TOKEN=$(podman exec serval-smoke-server serval admin node-token create | grep -Eo 'node_[A-Za-z0-9_-]+' | tail -1) ||
    fail "serval admin node-token create in the server container failed"
API_KEY=$(podman exec serval-smoke-server serval admin api-key create --owner smoke | grep -Eo 'serval_[A-Za-z0-9_-]+' | tail -1) ||
    fail "serval admin api-key create in the server container failed"

step "smoke: node container registers and serves /metrics"
CONTAINERS+=(serval-smoke-node)
podman run -d --name serval-smoke-node --network host -v "$WORK/server:/var/lib/serval" \
    -e SERVAL_NODE__TOKEN="$NODE_TOKEN" -e SERVAL_NODE__METRICS_HOST=127.0.0.1 \
    -e SERVAL_NODE__METRICS_PORT="$METRICS" -e SERVAL_NODE__DEVICE=cpu \
    localhost/serval-live/node:ci node --api-address "127.0.0.1:$GRPC" --node-id smoke-node >/dev/null 2>"$WORK/run-node.err" ||
    fail "podman run of the node image failed: $(tail -5 "$WORK/run-node.err")"
wait_for "node metrics" "http://127.0.0.1:$METRICS/metrics" serval-smoke-node
# (read whole first: `grep -q` stops reading early, and under pipefail curl's SIGPIPE would fail)
node_metrics() { curl -fsS "http://127.0.0.1:$METRICS/metrics"; }
api_metrics() { curl -fsS "$URL/metrics"; }
grep -q '^# TYPE serval_node_' <<<"$(node_metrics)" ||
    fail "the node's /metrics has no serval_node_* metric"
for _ in $(seq 60); do
    grep -Eq '^serval_api_connected_inference_nodes(\{[^}]*\})? [1-9]' <<<"$(api_metrics)" && break
    sleep 0.5
done
grep -Eq '^serval_api_connected_inference_nodes(\{[^}]*\})? [1-9]' <<<"$(api_metrics)" ||
    fail "the node container never registered with the server container (serval_api_connected_inference_nodes)"
podman healthcheck run serval-smoke-node || fail "the node image's HEALTHCHECK failed on a running container"

step "smoke: engine, build (a build job in the server container), translation by the node"
ENGINE=$(curl -fsS -H "X-API-Key: $API_KEY" -H 'Content-Type: application/json' \
    -d '{"name":"smoke","sourceLanguage":"en","targetLanguage":"sw","type":"nmt"}' \
    "$URL/api/v1/translation/engines" | "$PY" -c 'import json, sys; print(json.load(sys.stdin)["id"])') ||
    fail "creating an engine over REST failed"
SERVAL_URL="$URL" SERVAL_API_KEY="$API_KEY" timeout 300 "$ROOT/.venv/bin/serval" build start "$ENGINE" --no-train --watch ||
    fail "the build did not complete: $(podman exec serval-smoke-server sh -c 'tail -20 /var/lib/serval/logs/build-*.log' 2>&1)"
TRANSLATION=$(curl -fsS -H "X-API-Key: $API_KEY" -H 'Content-Type: application/json' \
    -d '"In the beginning was the Word."' "$URL/api/v1/translation/engines/$ENGINE/translate") ||
    fail "translating with the built engine failed"
# The tiny model of 20 steps may well answer an empty string: what counts is a Serval
# TranslationResult for the tokens sent, and that the node did the work.
echo "$TRANSLATION" | "$PY" -c 'import json, sys; r = json.load(sys.stdin); assert isinstance(r["translation"], str) and r["sourceTokens"], r; print("container-smoke: translation:", repr(r["translation"][:80]), "for", len(r["sourceTokens"]), "source tokens")' ||
    fail "the translation answer is not a TranslationResult: $TRANSLATION"
grep -Eq '^serval_node_work_seconds_count(\{[^}]*\})? [1-9]' <<<"$(node_metrics)" ||
    fail "the node's /metrics counts no work: the translation was not served by the node container"
podman healthcheck run serval-smoke-server || fail "the build-jobs image's HEALTHCHECK failed on a running container"

code_dump=0
step "cache: dropping images of earlier inputs"
# Only the images just used stay (keyed tags and :ci); older keys and untagged layers go, so
# the cache does not grow with every change.
keep=" $BASE $(for name in api node build-jobs; do podman image inspect --format '{{.Id}}' "localhost/serval-live/$name:ci"; done | tr '\n' ' ')"
podman images --format '{{.Repository}}:{{.Tag}} {{.Id}}' |
    while read -r ref id; do
        case "$ref" in
            localhost/serval-live/*:ci) ;;
            localhost/serval-live/* | localhost/serval-ci/*)
                case "$keep" in *" $ref "* | *"$id"*) ;; *) podman rmi "$ref" >/dev/null || true ;; esac ;;
        esac
    done
podman image prune -f >/dev/null || true
STEP="done"
say "images (podman, $SUITE bases):"
for line in "${RESULTS[@]}"; do say "  $line"; done
say "kube play of the chart's API pod: $KUBE_TIMES"
say "passed in $(elapsed_since "$START") s: API image (REST, gRPC health), the chart's API pod under kube play (REST, gRPC health), server + build job, node (registered, /metrics, translation)"
