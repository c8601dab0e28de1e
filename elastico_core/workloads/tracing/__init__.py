"""Estimates read off the workloads' own code: one training step traced on the CPU with fake tensors.

``trace_training`` runs a zoo workload's real ``batch`` and ``train_step`` on PyTorch fake tensors
(``torch._subclasses.FakeTensorMode``: shapes, dtypes and autograd, no data), records every storage it
allocates and frees, the tensors autograd saves, and the FLOPs of each operator (the formulas of
``torch.utils.flop_counter``); ``allocator.replay`` runs the allocation stream through a model of
PyTorch's CUDA caching allocator. ``trace_inference`` reads weights, KV cache per token and FLOPs per
token off a vLLM model's config, built on the meta device by ``transformers``.
"""
