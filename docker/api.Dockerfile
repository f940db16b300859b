# The API service image: `serval api` (gRPC for clients, nodes and build jobs; REST; /metrics).
#
#   docker build -f docker/api.Dockerfile -t ghcr.io/serval-live/api .
#   docker run -p 8080:8080 -p 50051:50051 -v serval-data:/var/lib/serval ghcr.io/serval-live/api
#
# Build from the repository root (the context is filtered by .dockerignore); the build arguments
# VERSION, REVISION and SOURCE_URL fill the org.opencontainers.image.* labels. It installs
# `serval-live[api,clearml]` and nothing else: `api` is the service itself; `clearml` is the
# ClearML job launcher's SDK, the only launcher that works from this image (the `local` launcher
# runs build jobs as child processes, and the training stack is in the build-job image, not here).
#
# Listens on 0.0.0.0 (SERVAL_API__HOST): REST on 8080 (SERVAL_API__REST_PORT), gRPC on 50051
# (SERVAL_API__GRPC_PORT). Embedded-mode data (SQLite database, file model store) lives under
# SERVAL_HOME=/var/lib/serval; in production set SERVAL_DATABASE_URL (PostgreSQL) and
# SERVAL_STORE__URL (s3://…). Runs as UID/GID 10001. Other settings: SERVAL_* variables
# (serval_common/settings.py). The health check pings GET /api/v1/status/ping over plain HTTP;
# with TLS on the REST port (SERVAL_API__TLS_CERT_FILE) override it, or rely on Kubernetes probes
# (which ignore HEALTHCHECK).

# PYTHON_IMAGE: the CPython 3.11 image the wheel is built in and the runtime's base; CI builds with a Debian
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
FROM ${PYTHON_IMAGE}

ARG PYTHON_IMAGE
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG SOURCE_URL=
LABEL org.opencontainers.image.title="serval-live API service" \
      org.opencontainers.image.description="Serval-compatible translation API service (gRPC and REST): serval api" \
      org.opencontainers.image.source="${SOURCE_URL}" \
      org.opencontainers.image.licenses="MIT" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.base.name="${PYTHON_IMAGE}"

ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH \
    HOME=/home/serval \
    SERVAL_HOME=/var/lib/serval \
    SERVAL_API__HOST=0.0.0.0 \
    SERVAL_API__REST_PORT=8080 \
    SERVAL_API__GRPC_PORT=50051

RUN groupadd --system --gid 10001 serval \
    && useradd --system --uid 10001 --gid 10001 --home-dir /home/serval --create-home \
       --shell /usr/sbin/nologin serval \
    && install -d -o 10001 -g 10001 -m 0750 /var/lib/serval

COPY --from=wheel /wheels/ /tmp/wheels/
RUN python -m venv /opt/venv \
    && wheel="$(ls /tmp/wheels/serval_live-*.whl)" \
    && pip install "serval-live[api,clearml] @ file://${wheel}" \
    && rm -rf /tmp/wheels

USER 10001:10001
WORKDIR /var/lib/serval
EXPOSE 8080 50051

HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/api/v1/status/ping' % os.environ.get('SERVAL_API__REST_PORT', '8080'), timeout=4)"]

ENTRYPOINT ["serval"]
CMD ["api"]
