# The inference node image: `serval node` (CTranslate2 on an NVIDIA GPU, or the CPU when none is
# visible), which dials the API service's gRPC port and serves Prometheus metrics on 9102.
#
#   docker build -f docker/node.Dockerfile -t ghcr.io/serval-live/node .
#   docker run --gpus all -e SERVAL_NODE__TOKEN=… -e SERVAL_STORE__URL=s3://bucket/prefix \
#       ghcr.io/serval-live/node node --api-address api.example.org:50051
#
# Build from the repository root (the context is filtered by .dockerignore); the build arguments
# VERSION, REVISION and SOURCE_URL fill the org.opencontainers.image.* labels, CUDA_IMAGE picks
# the base. It installs `serval-live[node,smt]` and nothing else (inference_gpu imports ctranslate2,
# sentencepiece, sacremoses, numpy and prometheus_client from `node`; the smt-transfer and statistical
# families import Thot through sil-machine and sil-thot from `smt`). NVML (pynvml) is not
# installed, so the node's memory gauge reports process memory rather than GPU memory.
#
# The node needs nothing inbound except the metrics port: it dials the API service
# (--api-address, or SERVAL_NODE__API_ADDRESSES='["api:50051"]'), authenticates with
# SERVAL_NODE__TOKEN and downloads models from the store (SERVAL_STORE__URL, S3 credentials in
# SERVAL_STORE__S3_*) into SERVAL_HOME/node-cache. Metrics are on by default in this image
# (SERVAL_NODE__METRICS_PORT=9102 on 0.0.0.0) and the health check scrapes them; setting the
# port to 0 turns both off. Runs as UID/GID 10001; SIGTERM drains in-flight work.
#
# CUDA: ctranslate2==4.8.5 (the `node` extra's pin) ships manylinux wheels built against CUDA 12
# (its classifier says 12.4) that bundle no CUDA libraries: at run time they dlopen cuBLAS
# (libcublas.so.12) and the driver's libcuda.so.1. The wheel's library names no cuDNN, and NLLB
# has no convolutions (upstream's "cuDNN 9" requirement is for models such as Whisper), so the
# plain `runtime` flavour suffices: it carries cuBLAS, the `cudnn-runtime` one adds ~1 GB of cuDNN.
# cuBLAS keeps its ABI across CUDA 12.x, so any 12.x runtime >= 12.4 works; 12.8 is chosen for
# cuBLAS kernels for Blackwell GPUs. Its NVIDIA_REQUIRE_CUDA wants a driver with CUDA 12.8
# (>= 570; the image lists exceptions for datacenter driver branches such as R535/R550). For older
# drivers build with --build-arg CUDA_IMAGE=nvidia/cuda:12.4.1-runtime-ubuntu22.04; a CUDA 13
# base would NOT work with this ctranslate2 wheel (it needs libcublas.so.12). Ubuntu 22.04 ships
# Python 3.10 (its universe python3.11 is an early 3.11.0 build), so 3.11 comes from the
# deadsnakes PPA.
ARG CUDA_IMAGE=nvidia/cuda:12.8.1-runtime-ubuntu22.04
# PYTHON_IMAGE: the CPython 3.11 image the wheel is built in; CI builds with a Debian
# bookworm base made locally (scripts/container-smoke.sh), published images keep the default.
ARG PYTHON_IMAGE=python:3.11-slim

# --- builder: the project's wheel (pure Python, so any CPython 3.11 image builds it) ----------
FROM ${PYTHON_IMAGE} AS wheel
WORKDIR /src
COPY pyproject.toml README.md ./
COPY serval/ serval/
COPY serval_common/ serval_common/
COPY serval_api/ serval_api/
COPY inference_gpu/ inference_gpu/
COPY build_jobs/ build_jobs/
COPY serval_cli/ serval_cli/
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

# --- runtime -------------------------------------------------------------------------------
FROM ${CUDA_IMAGE}

ARG CUDA_IMAGE
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG SOURCE_URL=
LABEL org.opencontainers.image.title="serval-live inference node" \
      org.opencontainers.image.description="Serval-live inference node: NLLB translation with CTranslate2 on CUDA (serval node)" \
      org.opencontainers.image.source="${SOURCE_URL}" \
      org.opencontainers.image.licenses="MIT" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.base.name="${CUDA_IMAGE}"

ARG DEBIAN_FRONTEND=noninteractive
# Python 3.11: from the deadsnakes PPA on Ubuntu (the CUDA bases); a Debian bookworm base (CI's,
# scripts/container-smoke.sh) has it in its own archive, and Launchpad may be unreachable there.
RUN . /etc/os-release \
    && if [ "${ID}" = ubuntu ]; then \
         apt-get update \
         && apt-get install -y --no-install-recommends ca-certificates gnupg software-properties-common \
         && add-apt-repository -y ppa:deadsnakes/ppa \
         && apt-get install -y --no-install-recommends python3.11 python3.11-venv \
         && apt-get purge -y --auto-remove software-properties-common gnupg \
         && rm -rf /var/lib/apt/lists/*; \
       elif ! python3.11 -c 'import ensurepip, venv' 2>/dev/null; then \
         apt-get update \
         && apt-get install -y --no-install-recommends ca-certificates python3.11 python3.11-venv \
         && rm -rf /var/lib/apt/lists/*; \
       fi

ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH \
    HOME=/home/serval \
    SERVAL_HOME=/var/lib/serval \
    SERVAL_NODE__DEVICE=auto \
    SERVAL_NODE__METRICS_HOST=0.0.0.0 \
    SERVAL_NODE__METRICS_PORT=9102

RUN groupadd --system --gid 10001 serval \
    && useradd --system --uid 10001 --gid 10001 --home-dir /home/serval --create-home \
       --shell /usr/sbin/nologin serval \
    && install -d -o 10001 -g 10001 -m 0750 /var/lib/serval

COPY --from=wheel /wheels/ /tmp/wheels/
RUN python3.11 -m venv /opt/venv \
    && wheel="$(ls /tmp/wheels/serval_live-*.whl)" \
    && pip install "serval-live[node,smt] @ file://${wheel}" \
    && rm -rf /tmp/wheels

USER 10001:10001
WORKDIR /var/lib/serval
EXPOSE 9102

HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import os, sys, urllib.request; port = os.environ.get('SERVAL_NODE__METRICS_PORT', '0'); sys.exit(0) if port in ('', '0') else urllib.request.urlopen('http://127.0.0.1:%s/metrics' % port, timeout=4)"]

ENTRYPOINT ["serval"]
CMD ["node"]
