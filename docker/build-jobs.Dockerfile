# The build-job image: what a clearml-agent runs a Serval build job in (docs/clearml.md). The
# API service's ClearML launcher names it in jobs.clearml.image (default
# ghcr.io/serval-live/build-jobs:latest) and creates each task with the entry point
# `python3 -m build_jobs run …`, `-e SERVAL_JOB_TOKEN=…` and `-e CLEARML_AGENT_SKIP_PYTHON_ENV_INSTALL=1`
# (the agent installs nothing and uses the image's default python3).
#
#   docker build -f docker/build-jobs.Dockerfile -t ghcr.io/serval-live/build-jobs .
#   docker run --rm ghcr.io/serval-live/build-jobs          # prints `python3 -m build_jobs --help`
#
# Build from the repository root (the context is filtered by .dockerignore); the build arguments
# VERSION, REVISION and SOURCE_URL fill the org.opencontainers.image.* labels, CUDA_IMAGE picks
# the base (see docker/node.Dockerfile for why CUDA 12.8 and the plain runtime flavour) and
# TORCH_INDEX_URL the PyTorch build (below). It installs `serval-live[api,jobs,smt,clearml]` and
# nothing else: `jobs` is the training stack (PyTorch, Transformers, CTranslate2, SentencePiece,
# sacrebleu), `smt` the Thot toolkit that smt-transfer and word-alignment builds train with,
# `clearml` the SDK that build_jobs/clearml_task.py reports progress through, and `api` the API
# service, so that one container of this image can also run `serval api` with its build jobs as
# child processes (the local launcher): the single-server deployment, deploy/compose.yaml and
# docs/office-server.md (`docker run … ghcr.io/serval-live/build-jobs serval api`).
#
# No ENTRYPOINT, on purpose: the agent starts `docker run … <image> bash -c '<its bootstrap>;
# python3.N -m clearml_agent execute …'`, and an entry point would swallow that command. The
# bootstrap picks the first `python3.N` on PATH that has pip, i.e. /opt/venv/bin/python3.11, and
# pip-installs clearml-agent into it, so /opt/venv belongs to the non-root user (UID/GID 10001)
# here, unlike the other images. Its apt-get and `chown /root/...` steps fail harmlessly as that
# user (they are `;`-chained). One thing must match, though: the agent bind-mounts the
# configuration it generates (mode 0600, owned by the agent's own user) at /tmp/clearml.conf, and
# UID 10001 can read it only if it owns it. So either run `clearml-agent daemon` as a host user
# with UID 10001 (a dedicated account in the docker group), or, for an agent running as root, add
# "--user=0:0" to its agent.extra_docker_arguments, which gives up the non-root user for these
# containers. Nothing listens, so nothing is exposed.
#
# PyTorch: torch is installed only as torch==2.13.0 (the `jobs` extra's pin), from
# TORCH_INDEX_URL. The default is PyTorch's CPU index (2.13.0+cpu, a few hundred MB): fine-tuning
# (build_jobs/nmt/finetune.py) then runs on the CPU, while pretranslation with CTranslate2 (device
# auto) uses the base image's cuBLAS. Fine-tuning moves to the GPU whenever PyTorch sees one, so
# for GPU training build with --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cu128
# (or https://pypi.org/simple: PyPI's Linux torch wheels are CUDA builds that bring their own
# CUDA libraries as nvidia-* packages, several GB).
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
LABEL org.opencontainers.image.title="serval-live build jobs" \
      org.opencontainers.image.description="Serval-live build job runtime for ClearML agents: python3 -m build_jobs run" \
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
    HF_HOME=/home/serval/.cache/huggingface \
    SERVAL_HOME=/var/lib/serval

RUN groupadd --system --gid 10001 serval \
    && useradd --system --uid 10001 --gid 10001 --home-dir /home/serval --create-home \
       --shell /usr/sbin/nologin serval \
    && install -d -o 10001 -g 10001 -m 0750 /var/lib/serval \
    && install -d -o 10001 -g 10001 /opt/venv

ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
COPY --from=wheel --chown=10001:10001 /wheels/ /tmp/wheels/
USER 10001:10001
RUN python3.11 -m venv /opt/venv \
    && pip install --index-url "${TORCH_INDEX_URL}" --extra-index-url https://pypi.org/simple torch==2.13.0 \
    && wheel="$(ls /tmp/wheels/serval_live-*.whl)" \
    && pip install "serval-live[api,jobs,smt,clearml] @ file://${wheel}" \
    && rm -rf /tmp/wheels

WORKDIR /home/serval

# A task container lives as long as one build and nobody routes traffic to it (the agent follows
# the process, not Docker's health state), so the check only proves that the job's Python
# environment imports: it flags a broken image (a missing or mismatched library) early.
HEALTHCHECK --interval=5m --timeout=2m --start-period=2m --retries=1 \
    CMD ["python3", "-c", "import build_jobs.cli, build_jobs.job, clearml, ctranslate2, sacrebleu, sentencepiece, torch, transformers"]

CMD ["python3", "-m", "build_jobs", "--help"]
