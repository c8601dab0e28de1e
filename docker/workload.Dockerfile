# The workload image: what the pods the operator launches run, on NVIDIA GPUs (the training zoo and
# vLLM batch inference). The Airflow/controller/MLflow image is docker/Dockerfile.
#
#   docker build -f docker/workload.Dockerfile -t elastico-workload:latest .
#
# `elastico-workload:latest` is the connection's default "image" (docs/airflow.md). The operator runs
# `python -c <wrapper> elastico_core.workloads.train|infer <args>` in it as uid 1000. Models are local:
# the hub is off (HF_HUB_OFFLINE=1); mount a volume with the Hugging Face cache at /models/hf (HF_HOME),
# or bake Table 2's models in at build time with --build-arg MODELS="Qwen/Qwen3-1.7B ...".
ARG CUDA_IMAGE=nvidia/cuda:12.9.1-cudnn-runtime-ubuntu24.04
FROM ${CUDA_IMAGE}

ARG VLLM_VERSION=0.32.0
ARG MODELS=""

ENV DEBIAN_FRONTEND=noninteractive \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH \
    HF_HOME=/models/hf \
    HF_HUB_OFFLINE=1

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# Ubuntu's python3 (3.12) in a venv; versions follow the CUDA base image's release.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && python3 -m venv /opt/venv \
    && useradd --uid 1000 --create-home --shell /bin/bash elastico \
    && mkdir -p /models/hf /run/elastico \
    && chown -R 1000:1000 /models /run/elastico

WORKDIR /opt/elastico
COPY pyproject.toml README.md ./
COPY elastico_core ./elastico_core

# vLLM first (it pins its CUDA torch); then this package with the training and inference extras.
# constraints.txt pins the CPU venv's torch, so it does not apply to this image; DL3013 flags the local
# package path, whose dependency ranges are in pyproject.toml.
# hadolint ignore=DL3013
RUN pip install "vllm==${VLLM_VERSION}" \
    && pip install ".[ml,infer]" \
    && python -c "import vllm, torch, elastico_core.workloads.train, elastico_core.workloads.infer"

# Optional: Table 2's models in the image's Hugging Face cache (the pods stay offline either way).
RUN if [ -n "${MODELS}" ]; then \
        for m in ${MODELS}; do HF_HUB_OFFLINE=0 hf download "$m"; done; \
        chown -R 1000:1000 /models; \
    fi

USER 1000
WORKDIR /run/elastico
CMD ["python", "-m", "elastico_core.workloads.infer", "--help"]
