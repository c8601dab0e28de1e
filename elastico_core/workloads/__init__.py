"""What runs inside a pod: the training zoo and the batch-inference entrypoint, both honouring injected knobs.

Entrypoints: ``python -m elastico_core.workloads.train`` and ``python -m elastico_core.workloads.infer``;
inference runs vLLM on every device, and ``python -m elastico_core.workloads.tiny_model`` builds the tiny
local model it serves on a CPU.
The launch contract they read is ``elastico_core.model.launch``.
"""
