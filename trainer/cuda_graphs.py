"""Fixed-shape GPU work replayed as CUDA graphs: the CPU launches one graph instead of a hundred kernels.

On a GPU, a small network's update (the DQN family's Nature CNN at batch 32) takes the GPU a fraction of
the time the CPU takes to launch its kernels one by one through PyTorch; a captured graph is replayed with
one call. The work must have fixed shapes, no CPU synchronisation inside (no `.item()`, `.cpu()`), and read
only tensors that stay where they are (parameters and optimizer state updated in place). Captured once a
run, again after anything the graph has baked in changes (a live learning-rate change).

`RLWEB_CUDA_GRAPHS=0` in the environment turns them off (the benchmark compares both ways).
"""

from __future__ import annotations

import os
import warnings
from typing import Callable

import torch


def wanted(device: torch.device) -> bool:
    return device.type == "cuda" and os.environ.get("RLWEB_CUDA_GRAPHS", "1") != "0"


class GraphedCall:
    """`function(*tensors)` captured as a CUDA graph. A call copies its inputs into the graph's own input
    tensors, replays the graph, and returns the graph's output tensors, which the next call overwrites.

    Capturing runs `function` a few times on a side stream first (as PyTorch requires), which would train
    the networks on those calls: the tensors in `restore` (parameters, optimizer state) are put back as they
    were before the warm-up, so the captured calls change nothing."""

    WARMUP_CALLS = 3

    def __init__(self, function: Callable, example_inputs: list[torch.Tensor], restore: list[torch.Tensor] = ()):
        self.inputs = [tensor.detach().clone() for tensor in example_inputs]
        saved = [tensor.detach().clone() for tensor in restore]
        try:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(self.WARMUP_CALLS):
                    function(*self.inputs)
            torch.cuda.current_stream().wait_stream(side)
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph, capture_error_mode="thread_local"):
                self.outputs = function(*self.inputs)
        finally:
            with torch.no_grad():
                for tensor, value in zip(restore, saved):
                    tensor.copy_(value)

    def __call__(self, *inputs: torch.Tensor):
        for own, value in zip(self.inputs, inputs):
            own.copy_(value, non_blocking=True)
        self.graph.replay()
        return self.outputs


class Graphs:
    """An agent's graphs, by name and input shapes, captured on first use. A capture that fails is warned
    about once and the work runs as plain PyTorch calls for the rest of the run."""

    def __init__(self, device: torch.device):
        self.enabled = wanted(device)
        self.graphs: dict[tuple, GraphedCall] = {}

    def clear(self) -> None:
        """Forget every graph (what they baked in changed); the next calls capture them again."""
        self.graphs.clear()

    def call(self, name: str, function: Callable, inputs: list[torch.Tensor], restore: Callable[[], list] = list):
        """`function(*inputs)`, through its graph when graphs are on; `restore()` lists the tensors that
        capturing must leave as they were."""
        if not self.enabled:
            return function(*inputs)
        key = (name, *(tuple(tensor.shape) for tensor in inputs), *(tensor.dtype for tensor in inputs))
        graph = self.graphs.get(key)
        if graph is None:
            try:
                graph = self.graphs[key] = GraphedCall(function, inputs, restore())
            except Exception as error:  # noqa: BLE001  (any capture failure: fall back, the run goes on)
                self.enabled = False
                self.graphs.clear()
                warnings.warn(f"CUDA graphs are off for this run: capturing {name} failed ({error})", RuntimeWarning)
                return function(*inputs)
        return graph(*inputs)
