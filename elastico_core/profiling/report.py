"""``report.md`` of a gpucheck run: measured against the estimators, knob effects, pairs, the memory cap.

Written again after every measurement, so a run cut short still leaves a report of what it measured.
Ratios compare measured with estimated figures as ``max(m/e, e/m)``; a set of them is summarised by
its geometric mean (``exp(mean |ln(m/e)|)``), so ×2 too high and ×2 too low count the same.
Each row is also compared with the estimate traced from the workload's code (``<profiles>/traced``, read
with the standard library). Standard library and the project's plain-Python estimators only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from elastico_core.model.errors import SpecError
from elastico_core.model.hardware import GpuModel, HardwareSignature, gpu_model
from elastico_core.model.knobs import Knobs
from elastico_core.rst.catalog import PAPER_WORKLOADS
from elastico_core.rst.estimators import estimate
from elastico_core.rst.traced_estimator import TracedEstimator, train_trace_for

# What the workloads must show on an H200 (the GPU-use targets of the issue that introduced gpucheck).
RESNET_AMP_MIN = 2500.0  # samples/s, ResNet-50, AMP, micro-batch 256
RESNET_SM_MIN = 0.6
AMP_SPEEDUP_MIN = 1.4  # ResNet-50 and BERT


def geo_ratio(pairs: Sequence[tuple[float, float]]) -> float:
    """exp(mean |ln(measured / estimated)|) over the pairs with both figures positive (NaN if none)."""
    logs = [abs(math.log(m / e)) for m, e in pairs if m > 0 and e > 0 and math.isfinite(m) and math.isfinite(e)]
    return math.exp(sum(logs) / len(logs)) if logs else math.nan


def _f(x: object, spec: str = ",.1f") -> str:
    return format(x, spec) if isinstance(x, (int, float)) and math.isfinite(x) else "–"


def _model(signature: HardwareSignature) -> GpuModel | None:
    try:
        return gpu_model(signature.gpu)
    except SpecError:
        return None


def _knobs(rec: Mapping[str, Any]) -> Knobs:
    return Knobs.of(rec.get("knobs") or {})


def _find(solos: Sequence[Mapping[str, Any]], workload: str, **knobs: object) -> Mapping[str, Any] | None:
    for rec in solos:
        if rec.get("workload") == workload and all(_knobs(rec).get(k) == v for k, v in knobs.items()):
            return rec
    return None


def _ratio(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None, key: str = "throughput") -> float:
    if a is None or b is None:
        return math.nan
    x, y = a.get(key), b.get(key)
    return float(x) / float(y) if isinstance(x, (int, float)) and isinstance(y, (int, float)) and y else math.nan


def _estimates(rec: Mapping[str, Any], gpu: GpuModel | None) -> tuple[float, float]:
    wl = PAPER_WORKLOADS.get(str(rec.get("workload")))
    if gpu is None or wl is None:
        return math.nan, math.nan
    p = estimate(wl, _knobs(rec), gpu)
    return (p.throughput, p.resources.gpu_mem_mib) if p is not None else (math.nan, math.nan)


def _traced(rec: Mapping[str, Any], gpu: GpuModel | None, traced: TracedEstimator | None) -> tuple[float, float]:
    """(throughput, memory MiB) of the traced estimate, NaN where the configuration has no current trace."""
    wl = PAPER_WORKLOADS.get(str(rec.get("workload")))
    if gpu is None or wl is None or traced is None or train_trace_for(traced.cache, wl, _knobs(rec)) is None:
        return math.nan, math.nan
    p = traced(wl, _knobs(rec), gpu)
    return (p.throughput, p.resources.gpu_mem_mib) if p is not None else (math.nan, math.nan)


def traced_section(solos: Sequence[Mapping[str, Any]], gpu: GpuModel | None, traced: TracedEstimator | None) -> list[str]:
    """Every measured row next to the estimate traced from the workload's code (``elastico profiles trace``)."""
    lines = ["## Configurations alone: measured against the traced estimates", ""]
    if gpu is None or traced is None:
        return [*lines, "(No GPU datasheet or no traced cache: nothing to compare with.)", ""]
    lines += ["| workload | knobs | samples/s | traced | ratio | memory MiB | traced MiB | ratio | under-estimated |",
              "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    tput, mem, under = [], [], 0
    for rec in solos:
        est_t, est_m = _traced(rec, gpu, traced)
        t, m = float(rec.get("throughput") or math.nan), float(rec.get("gpu_mem_mib") or math.nan)
        tput.append((t, est_t))
        mem.append((m, est_m))
        low = est_m < 0.9 * m
        under += int(low)
        lines.append(
            f"| {rec.get('workload')} | {_knobs(rec).short()} | {_f(t)} | {_f(est_t)} | {_f(geo_ratio([(t, est_t)]), '.2f')}× | "
            f"{_f(m, ',.0f')} | {_f(est_m, ',.0f')} | {_f(est_m / m if m else math.nan, '.2f')} | {'YES' if low else 'no'} |"
        )
    lines += [
        "",
        f"Geometric-mean ratio over {len(solos)} rows: throughput **{_f(geo_ratio(tput), '.2f')}×**, memory "
        f"**{_f(geo_ratio(mem), '.2f')}×**; {under} configurations under-estimated by more than 10 % "
        f"(traced memory below 0.9× measured). Throughput at {_efficiency_note(traced, gpu)}.",
        "",
    ]
    return lines


def _efficiency_note(traced: TracedEstimator, gpu: GpuModel) -> str:
    fitted = traced.efficiencies().get(gpu.name)
    return f"the efficiencies calibrated on {fitted.rows} rows" if fitted else "the prior efficiency (not calibrated)"


def solo_section(solos: Sequence[Mapping[str, Any]], gpu: GpuModel | None) -> list[str]:
    lines = ["## Configurations alone: measured against the estimators", ""]
    if gpu is None:
        lines += ["(The estimators model GPUs only: a CPU run is compared with nothing.)", ""]
    lines += [
        "| workload | knobs | measured | estimated | ratio | memory MiB | estimated MiB | ratio | SM active | tensor active | iterations |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    tput, mem = [], []
    for rec in solos:
        est_t, est_m = _estimates(rec, gpu)
        t, m = float(rec.get("throughput") or math.nan), float(rec.get("gpu_mem_mib") or math.nan)
        tput.append((t, est_t))
        mem.append((m, est_m))
        c = rec.get("counters") or {}
        lines.append(
            f"| {rec.get('workload')} | {_knobs(rec).short()} | {_f(t)} {rec.get('unit', '')} | {_f(est_t)} | "
            f"{_f(geo_ratio([(t, est_t)]), '.2f')}× | {_f(m, ',.0f')} | {_f(est_m, ',.0f')} | "
            f"{_f(geo_ratio([(m, est_m)]), '.2f')}× | {_f(c.get('sm_active'), '.2f')} | "
            f"{_f(c.get('tensor_active'), '.2f')} | {rec.get('iterations', '–')} |"
        )
    lines += [
        "",
        f"Geometric-mean ratio over {len(solos)} rows: throughput **{_f(geo_ratio(tput), '.2f')}×**, "
        f"memory **{_f(geo_ratio(mem), '.2f')}×** (1.00× = the estimators are exact).",
        "",
    ]
    return lines


def effects_section(
    solos: Sequence[Mapping[str, Any]], gpu: GpuModel | None, traced: TracedEstimator | None = None
) -> list[str]:
    """What each knob is worth, measured and as the estimators see it."""
    cases = [
        ("ResNet-50 AMP (micro-batch 256)", "resnet50", {"micro_batch": 256, "amp": True}, {"micro_batch": 256, "amp": False}),
        ("BERT AMP (micro-batch 128)", "bert", {"micro_batch": 128, "amp": True, "checkpointing": False},
         {"micro_batch": 128, "amp": False, "checkpointing": False}),
        ("BERT checkpointing (micro-batch 128)", "bert", {"micro_batch": 128, "checkpointing": True, "amp": False},
         {"micro_batch": 128, "checkpointing": False, "amp": False}),
        ("ResNet-50 micro-batch 512 vs 256", "resnet50", {"micro_batch": 512, "amp": False}, {"micro_batch": 256, "amp": False}),
        ("BERT micro-batch 128 vs 32", "bert", {"micro_batch": 128, "amp": False, "checkpointing": False},
         {"micro_batch": 32, "amp": False, "checkpointing": False}),
    ]  # fmt: skip
    lines = [
        "## Knob effects",
        "",
        "| effect | throughput × measured | × estimated | × traced | memory × measured | × estimated | × traced |",
        "|---|---|---|---|---|---|---|",
    ]
    for title, wl, on, off in cases:
        a, b = _find(solos, wl, **on), _find(solos, wl, **off)
        if a is None or b is None:
            continue
        (ta, ma), (tb, mb) = _estimates(a, gpu), _estimates(b, gpu)
        (xa, ya), (xb, yb) = _traced(a, gpu, traced), _traced(b, gpu, traced)
        lines.append(
            f"| {title} | {_f(_ratio(a, b), '.2f')} | {_f(ta / tb if tb else math.nan, '.2f')} | "
            f"{_f(xa / xb if xb else math.nan, '.2f')} | {_f(_ratio(a, b, 'gpu_mem_mib'), '.2f')} | "
            f"{_f(ma / mb if mb else math.nan, '.2f')} | {_f(ya / yb if yb else math.nan, '.2f')} |"
        )
    return [*lines, ""]


def targets_section(solos: Sequence[Mapping[str, Any]], on_gpu: bool) -> list[str]:
    lines = ["## Does the workload code use the GPU?", ""]
    if not on_gpu:
        return [*lines, "Not checked: this run was on a CPU.", ""]
    amp = _find(solos, "resnet50", micro_batch=256, amp=True)
    fp32 = _find(solos, "resnet50", micro_batch=256, amp=False)
    bert_amp = _find(solos, "bert", micro_batch=128, amp=True, checkpointing=False)
    bert = _find(solos, "bert", micro_batch=128, amp=False, checkpointing=False)
    t = float(amp["throughput"]) if amp else math.nan
    sm = float((amp or {}).get("counters", {}).get("sm_active") or math.nan) if amp else math.nan
    checks = [
        (f"ResNet-50 AMP, micro-batch 256: ≥ {RESNET_AMP_MIN:,.0f} samples/s", _f(t), t >= RESNET_AMP_MIN),
        (f"ResNet-50 AMP, micro-batch 256: SM active ≥ {RESNET_SM_MIN}", _f(sm, ".2f"), sm >= RESNET_SM_MIN),
        (f"ResNet-50: AMP ≥ {AMP_SPEEDUP_MIN}× FP32", _f(_ratio(amp, fp32), ".2f") + "×", _ratio(amp, fp32) >= AMP_SPEEDUP_MIN),
        (f"BERT: AMP ≥ {AMP_SPEEDUP_MIN}× FP32", _f(_ratio(bert_amp, bert), ".2f") + "×", _ratio(bert_amp, bert) >= AMP_SPEEDUP_MIN),
    ]  # fmt: skip
    lines += ["| check | measured | holds |", "|---|---|---|"]
    lines += [f"| {name} | {value} | {'yes' if ok else 'NO'} |" for name, value, ok in checks]
    return [*lines, ""]


def pairs_section(pairs: Sequence[Mapping[str, Any]]) -> list[str]:
    lines = [
        "## Co-located pairs (interleaved: A alone, B alone, A+B, repeated)",
        "",
        "| a | b | slowdown a: median [min–max] | slowdown b: median [min–max] | repeats | SM active together | shared by | row |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for rec in pairs:
        row = rec.get("row") or {}
        if rec.get("did_not_fit"):
            lines.append(f"| {row.get('workload_a')} | {row.get('workload_b')} | did not fit | did not fit | – | – | – | measured |")
            continue

        def spread(x: str, row: Mapping[str, Any] = row) -> str:
            solo, colo = row.get(f"solo_tput_{x}"), row.get(f"colo_tput_{x}")
            med = float(solo) / float(colo) if isinstance(solo, (int, float)) and isinstance(colo, (int, float)) and colo else math.nan
            return f"{_f(med, '.2f')} [{_f(row.get(f'slowdown_min_{x}'), '.2f')}–{_f(row.get(f'slowdown_max_{x}'), '.2f')}]"

        colo_gpu = rec.get("colo_gpu") or {}
        lines.append(
            f"| {row.get('workload_a')} {Knobs.from_json(str(row.get('knobs_a'))).short()} | "
            f"{row.get('workload_b')} {Knobs.from_json(str(row.get('knobs_b'))).short()} | {spread('a')} | {spread('b')} | "
            f"{row.get('repeats_a')}/{row.get('repeats_b')} | {_f(colo_gpu.get('sm_active'), '.2f')} | "
            f"{'MPS' if rec.get('mps') else 'time-slicing'} | {row.get('source')} |"
        )
    lines += [
        "",
        "A median slowdown below 0.97 is a measurement error, not a label: such a pair is measured again, and a row "
        "that stays below is written with `source=suspect`, which interference-model training skips.",
        "",
    ]
    return lines


def memcap_section(caps: Sequence[Mapping[str, Any]]) -> list[str]:
    lines = ["## Memory cap", "", "| configuration | case | budget MiB | outcome | exit code | peak MiB | as expected |",
             "|---|---|---|---|---|---|---|"]  # fmt: skip
    for rec in caps:
        outcome = "out of memory" if rec.get("oom") else ("ran" if rec.get("ran") else "stopped early")
        lines.append(
            f"| {rec.get('workload')} {_knobs(rec).short()} | {rec.get('case')} | {rec.get('budget_mib')} | {outcome} | "
            f"{rec.get('exit_code')} | {_f(rec.get('peak_mib'), ',.0f')} | {'yes' if rec.get('passed') else 'NO'} |"
        )
    return [*lines, ""]


def render(
    records: Sequence[Mapping[str, Any]],
    signature: HardwareSignature,
    skipped: Sequence[str] = (),
    traced: TracedEstimator | None = None,
) -> str:
    by: dict[str, list[Mapping[str, Any]]] = {}
    for rec in records:
        by.setdefault(str(rec.get("record")), []).append(rec)
    run = (by.get("run") or [{}])[0]
    solos = by.get("solo", [])
    gpu = _model(signature)
    on_gpu = str(run.get("device", "")).startswith("gpu")
    lines = [
        f"# gpucheck: {signature.gpu} ({signature.key})",
        "",
        f"Started {run.get('started_at', '?')} on {run.get('host', '?')}: {run.get('gpu_name') or 'CPU'}, "
        f"torch {run.get('torch', '?')} (CUDA {run.get('cuda') or '–'}), Python {run.get('python', '?')}, "
        f"{run.get('scale', '?')} scale. Figures: `measurements.jsonl`; pairs: `colocation.csv`.",
        "",
        *solo_section(solos, gpu),
        *traced_section(solos, gpu, traced),
        *effects_section(solos, gpu, traced),
        *targets_section(solos, on_gpu),
        *pairs_section(by.get("pair", [])),
        *memcap_section(by.get("memcap", [])),
    ]
    errors = by.get("error", [])
    if errors or skipped:
        lines += ["## Not measured", ""]
        lines += [f"- {e.get('what')}: {e.get('message')}" for e in errors]
        lines += [f"- {what}: skipped (time budget)" for what in skipped]
        lines.append("")
    return "\n".join(lines)


def write(
    path: Path,
    records: Sequence[Mapping[str, Any]],
    signature: HardwareSignature,
    skipped: Sequence[str] = (),
    traced: TracedEstimator | None = None,
) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(render(records, signature, skipped, traced), encoding="utf-8")
    tmp.replace(path)
