"""Custom workloads' model builders: ``package.module:function`` returning a zoo ``Task``.

A job file may declare a workload of its own (README, "Custom workloads") and name the function that
builds it, ``model: mypkg.models:build``. The function takes ``(scale, seed)`` and returns a
``elastico_core.workloads.zoo.base.Task`` (modules, optimizers, ``batch`` and ``loss`` or
``train_step``), exactly what the zoo's builders return; the tracer then reads its memory and work off
its code as it does for the catalog's. A workload without a builder keeps the parametric estimate.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable

from elastico_core.model.errors import SpecError
from elastico_core.workloads.scale import Scale
from elastico_core.workloads.zoo.base import Task

Builder = Callable[[Scale, int], Task]
SPEC = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


def resolve_builder(spec: str) -> tuple[Builder, str]:
    """(the builder function, its module's name) for ``package.module:function``.

    :raises SpecError: naming the spec, when it is malformed, not importable or not callable.
    """
    if not SPEC.match(spec):
        raise SpecError(f"model builder {spec!r} is not package.module:function", field="model")
    module_name, func_name = spec.split(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise SpecError(f"model builder {spec!r}: module not importable ({exc})", field="model") from None
    func = getattr(module, func_name, None)
    if not callable(func):
        raise SpecError(f"model builder {spec!r}: {module_name} has no function {func_name!r}", field="model")

    def build(scale: Scale, seed: int) -> Task:
        task = func(scale, seed)
        if not isinstance(task, Task):
            raise SpecError(f"model builder {spec!r} returned {type(task).__name__}, not a Task", field="model")
        return task

    return build, module_name
