"""Convert Gavel's measured throughput tables into the co-location dataset contract.

Gavel (Narayanan et al., OSDI'20) publishes ``physical_cluster_throughputs.json`` and
``simulation_throughputs.json``: ``{gpu: {job: {"null": isolated, other_job: [this, other]}}}`` where a
job key is a Python tuple string ``('<model> (batch size N)', scale_factor)``. ``[0, 0]`` marks a pair
that did not fit on the GPU. Only single-GPU jobs (scale factor 1) carry co-location entries; the
``*_unconsolidated`` GPU keys repeat the single-GPU figures and are skipped.

Every entry is listed under both jobs, so one row is written per unordered pair and GPU (a job paired
with a copy of itself included). All Gavel jobs are training jobs, run in FP32 without activation
checkpointing; hardware counters were not recorded, so the counter columns stay empty (NaN).
Throughputs keep Gavel's unit (training steps per second).

Job types map onto workload families (the CV groups) as in ``GAVEL_FAMILIES``. Parameter counts are
those of the model definitions Gavel runs, rounded; where Gavel's exact hyper-parameters are not
known they are approximate (marked), which moves ``log10(params)`` by well under 0.1.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

import polars as pl

from elastico_core.iac.dataset import LEGACY_GPU_MIB, CoLocationDataset, validate
from elastico_core.model.errors import SpecError


@dataclass(frozen=True, slots=True)
class GavelFamily:
    workload: str  # family name in the contract (the CV group key)
    params: int
    approximate: bool  # parameter count not pinned down by Gavel's published settings
    batch: int | None = None  # fixed batch size where the job type does not name one
    note: str = ""


GAVEL_FAMILIES: Mapping[str, GavelFamily] = MappingProxyType(
    {
        "ResNet-18": GavelFamily("resnet18", 11_173_962, False, note="CIFAR-10 ResNet-18"),
        "ResNet-50": GavelFamily("resnet50", 25_557_032, False, note="ImageNet ResNet-50 (torchvision)"),
        "Transformer": GavelFamily("transformer", 50_000_000, True, note="Transformer translation, Multi30k"),
        "LM": GavelFamily("lstm", 14_000_000, True, note="2-layer LSTM language model, Wikitext-2"),
        "Recommendation": GavelFamily("recommendation", 11_000_000, True, note="autoencoder collaborative filtering, ML-20M"),
        "A3C": GavelFamily("a3c", 800_000, True, note="A3C on Atari Pong (no batch size)"),
        "CycleGAN": GavelFamily("cyclegan", 28_286_000, False, batch=1, note="CycleGAN, 2 ResNet generators + 2 PatchGANs"),
    }
)
GAVEL_GPUS = tuple(LEGACY_GPU_MIB)  # k80, p100, v100
_JOB = re.compile(r"^(?P<family>.+?)(?: \(batch size (?P<batch>\d+)\))?$")


@dataclass(frozen=True, slots=True)
class GavelJob:
    family: GavelFamily
    batch: int | None

    def knobs(self) -> str:
        knobs: dict[str, object] = {"amp": False, "checkpointing": False}
        if self.batch is not None:
            knobs["micro_batch"] = self.batch
        return json.dumps(knobs, sort_keys=True, separators=(",", ":"))


def parse_job(key: str, *, where: str) -> tuple[GavelJob, int]:
    """``"('ResNet-50 (batch size 64)', 1)"`` -> (job, scale factor)."""
    try:
        name, scale = ast.literal_eval(key)
    except (ValueError, SyntaxError, TypeError):
        raise SpecError(f"job key {key!r} is not a (name, scale_factor) tuple", where=where) from None
    m = _JOB.match(str(name))
    family = GAVEL_FAMILIES.get(m.group("family")) if m else None
    if m is None or family is None:
        raise SpecError(f"unknown Gavel job type {name!r} (known: {sorted(GAVEL_FAMILIES)})", where=where)
    batch = int(m.group("batch")) if m.group("batch") else family.batch
    return GavelJob(family, batch), int(scale)


@dataclass(frozen=True, slots=True)
class GavelConversion:
    dataset: CoLocationDataset
    skipped: tuple[str, ...]  # "gpu: job" that cannot run even alone there (isolated throughput 0)


def convert_gavel(path: str | Path) -> GavelConversion:
    """Read one Gavel throughput JSON and return it as a validated co-location dataset."""
    p = Path(path)
    try:
        raw = json.loads(p.read_text())
    except FileNotFoundError:
        raise SpecError("no such file", where=str(p)) from None
    except json.JSONDecodeError as exc:
        raise SpecError(f"not valid JSON ({exc.msg}, line {exc.lineno})", where=str(p)) from None
    if not isinstance(raw, dict) or not any(g in raw for g in GAVEL_GPUS):
        raise SpecError(f"not a Gavel throughput table (no GPU key among {list(GAVEL_GPUS)})", where=str(p))
    rows: list[dict[str, object]] = []
    skipped: list[str] = []
    for gpu in GAVEL_GPUS:
        table = raw.get(gpu)
        if not isinstance(table, dict):
            continue
        rows.extend(_gpu_rows(gpu, table, skipped, where=f"{p}: {gpu}"))
    if not rows:
        raise SpecError("no single-GPU co-location entries found", where=str(p))
    return GavelConversion(validate(pl.DataFrame(rows), origin=str(p)), tuple(skipped))


def _gpu_rows(
    gpu: str, table: dict[str, dict[str, object]], skipped: list[str], *, where: str
) -> list[dict[str, object]]:
    jobs = {}
    for key in table:
        job, scale = parse_job(key, where=where)
        solo = table[key].get("null")
        if scale != 1:
            continue
        if not isinstance(solo, (int, float)) or solo <= 0:
            skipped.append(f"{gpu}: {ast.literal_eval(key)[0]}")  # does not fit alone: no pair can run
            continue
        jobs[key] = job
    out: list[dict[str, object]] = []
    for ka in sorted(jobs):
        entry = table[ka]
        solo_a = entry.get("null")
        for kb, value in entry.items():
            if kb == "null" or kb not in jobs or kb < ka:
                continue  # each pair is listed under both jobs: keep one
            solo_b = table[kb].get("null")
            if not (isinstance(value, list) and len(value) == 2):
                raise SpecError(f"entry for {kb} is not [this, other]", where=f"{where}: {ka}")
            a, b = jobs[ka], jobs[kb]
            out.append(
                {
                    "gpu": gpu,
                    "workload_a": a.family.workload,
                    "kind_a": "train",
                    "knobs_a": a.knobs(),
                    "params_a": a.family.params,
                    "solo_tput_a": solo_a,
                    "colo_tput_a": float(value[0]),
                    "workload_b": b.family.workload,
                    "kind_b": "train",
                    "knobs_b": b.knobs(),
                    "params_b": b.family.params,
                    "solo_tput_b": solo_b,
                    "colo_tput_b": float(value[1]),
                    "source": "measured",
                }
            )
    return out
