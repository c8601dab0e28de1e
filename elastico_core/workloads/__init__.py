"""What runs inside a pod: the training zoo and the batch-inference entrypoint, both honouring injected knobs.

Entrypoints: ``python -m elastico_core.workloads.train`` and ``python -m elastico_core.workloads.infer``;
``python -m elastico_core.workloads.build_lm`` builds the CPU engine's byte-level language model.
The launch contract they read is ``elastico_core.model.launch``.
"""
