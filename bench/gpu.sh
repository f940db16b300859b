#!/usr/bin/env bash
# The serving benchmark on an NVIDIA GPU: the nllb-200-distilled-600M shape in int8_float16 on the
# node and the direct/naive baselines, transformers `generate` in fp16, 1 to 64 concurrent clients.
# Needs the project installed (`make .venv/.installed`, or `pip install -e '.[api,node,jobs,dev,bench]'`
# with a CUDA build of torch); prints the table and writes bench/results/serving-gpu.json.
set -euo pipefail
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
exec .venv/bin/python -m bench --models 600m --device cuda --sentences 512 --intra-threads 4 \
    --clients 1 8 32 64 --out bench/results/serving-gpu.json "$@"
