"""JSON schemas of the DAGs' ``Param``s: plain data, cheap to import from a DAG file.

A run's ``conf`` is validated against these when the run is created (``airflow dags trigger``, the REST
API, the UI's trigger form, ``airflow dags test -c``): a malformed value or an unknown field is refused
with the schema's message before any task runs. The workload names are the Table-2 zoo; a test checks
they match ``elastico_core.rst.catalog``.
"""

from __future__ import annotations

from typing import Any

from elastico_airflow.allowlist import POD_OVERRIDES_SCHEMA

TRAIN_WORKLOADS = ("resnet50", "bert", "dcgan", "pointnet", "transformer", "lstm", "ncf", "ppo")
INFER_WORKLOADS = ("deepseek-1.5b", "qwen-1.7b", "mistral-7b", "llama-3-7b")
NAME_PATTERN = r"^[a-z0-9]([a-z0-9\-]{0,38}[a-z0-9])?$"

# optional params are nullable with a None default: Airflow's trigger form treats an empty string as a
# missing value and keeps Trigger disabled, while a null default is "not given" (every DAG triggers as is)
LAUNCHER_SCHEMA: dict[str, Any] = {
    "type": ["null", "string"],
    "enum": [None, "local", "kubernetes"],
    "values_display": {None: "the connection's (elastico_default)", "local": "a local process", "kubernetes": "a pod"},
    "description": "how jobs run; the connection's launcher by default (local in the embedded setup)",
}
OUTPUT_ROOT_SCHEMA: dict[str, Any] = {
    "type": ["null", "string"],
    "maxLength": 1024,
    "description": "where outputs go (empty = outputs/ beside the launcher's run folder)",
}

QUEUE_SCHEMA: dict[str, Any] = {
    "type": ["null", "string"],
    "pattern": "^([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)?$",
    "description": "the ElastiCo queue (a team's quota; not Airflow's executor queue or pool); empty = the connection's default",
}

_KNOB_VALUES = {"type": "array", "minItems": 1, "maxItems": 16, "items": {"type": ["integer", "number", "boolean"]}}

TRAIN_KNOBS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {"micro_batch": _KNOB_VALUES, "checkpointing": _KNOB_VALUES, "amp": _KNOB_VALUES, "dp": _KNOB_VALUES},
}

INFER_KNOBS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "max_num_seqs": _KNOB_VALUES,
        "max_model_len": _KNOB_VALUES,
        "prefix_caching": _KNOB_VALUES,
        "gpu_memory_utilization": _KNOB_VALUES,
    },
}

TRAIN_RUN_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name", "workload", "floor"],
    "properties": {
        "name": {"type": "string", "pattern": NAME_PATTERN},
        "workload": {"type": "string", "enum": list(TRAIN_WORKLOADS)},
        "floor": {"type": "number", "minimum": 0},
        "weight": {"type": "number", "exclusiveMinimum": 0, "maximum": 100},
        "gpus": {"type": "integer", "minimum": 1, "maximum": 8},
        "priority": {"type": "integer", "minimum": -100, "maximum": 100},
        "knobs": TRAIN_KNOBS_SCHEMA,
    },
}

__all__ = [
    "INFER_KNOBS_SCHEMA",
    "INFER_WORKLOADS",
    "LAUNCHER_SCHEMA",
    "OUTPUT_ROOT_SCHEMA",
    "POD_OVERRIDES_SCHEMA",
    "QUEUE_SCHEMA",
    "TRAIN_KNOBS_SCHEMA",
    "TRAIN_RUN_SCHEMA",
    "TRAIN_WORKLOADS",
]
