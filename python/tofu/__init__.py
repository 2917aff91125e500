"""Tofu from Python: partition a model's training step across workers.

    import tofu
    plan = tofu.plan(model, (images,), workers=8)        # a torch.nn.Module and its inputs
    print(plan.summary())
    plan.placement("fc1.weight")                         # each worker's slice, by its name

`model` may also be an ONNX file's path or a zoo model's name ("gpt-2-256-4-64"; tofu-plan
--help lists them). The plan is the one `tofu-plan` makes with the same settings, from the
same libraries: no tool is run. Errors raise tofu.UsageError (a setting that cannot work),
tofu.ModelError (a model that does not import or check) or tofu.PlanError (no plan, or none
that fits), with the tools' messages.
"""
import json
import os
import tempfile
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from . import _tofu
from ._model import Model, _plan_args
from .errors import DataError, Error, ModelError, PlanError, UsageError
from .training import Trainer

__all__ = ["plan", "infer", "Plan", "Placement", "Trainer", "Error", "UsageError", "ModelError", "PlanError",
           "DataError", "__version__"]

__version__ = _tofu.version()
_tofu.set_errors(UsageError, ModelError, PlanError, DataError, Error)


class Placement:
    """How a plan places one tensor.

    cuts:  per recursion step, the dimension it cuts into that step's parts (None: every
           group of the step holds the whole tensor);
    tiles: per worker, the slice it holds, as a tuple of slice objects (one per dimension),
           ready to index the tensor with: `weight[placement.tiles[w]]`.
    """

    def __init__(self, name: str, shape: List[int], cuts: List[Optional[int]],
                 tiles: List[Tuple[slice, ...]]):
        self.name = name
        self.shape = shape
        self.cuts = cuts
        self.tiles = tiles

    def __repr__(self) -> str:
        def text(tile):
            return "[" + ", ".join(":" if (s.start, s.stop) == (0, n) else f"{s.start}:{s.stop}"
                                   for s, n in zip(tile, self.shape)) + "]"
        cuts = ", ".join("whole" if c is None else f"dim {c}" for c in self.cuts) or "whole"
        return (f"<tofu.Placement {self.name} {list(self.shape)}: cut per step {cuts}; "
                + ", ".join(f"worker {w} {text(t)}" for w, t in enumerate(self.tiles)) + ">")


class Plan:
    """A partition plan of a model's step (tofu.plan makes it).

    summary() and text() are tofu-plan's report (with --summary, and whole), to_json() its
    --format=json document; placement(name) gives a tensor's cut and each worker's slice.
    """

    def __init__(self, handle, workers: int, args=None, module=None):
        self._handle = handle
        self._args = args  # what made it: tofu.infer runs a forward plan's model so
        self._module = module
        self._json: Optional[Dict[str, Any]] = None
        self._peaks: Optional[List[int]] = None
        self.workers = workers

    # The documents.
    def summary(self) -> str:
        """tofu-plan --summary's report: the plan's lines without its per-tensor and per-op
        tables, the machine's levels, the estimated step."""
        return self._handle.text(json=False, summary=True)

    def text(self) -> str:
        """tofu-plan's whole report, its tables included."""
        return self._handle.text(json=False, summary=False)

    def explain(self) -> str:
        """tofu-plan --explain's section: the step split into compute, communication and
        bubble, each stage's heaviest ops and their cuts, and the runner-ups (Megatron-LM,
        ZeRO-3, with or without stages), each planned on the first call, with what it costs
        more."""
        return self._handle.explain(json=False)

    def explanation(self) -> Dict[str, Any]:
        """explain() as tofu-plan --format=json gives it (its "explain")."""
        return json.loads(self._handle.explain(json=True))

    def to_json(self) -> str:
        """tofu-plan --format=json's document, as text."""
        return self._handle.text(json=True, summary=False)

    def json(self) -> Dict[str, Any]:
        """to_json(), parsed (kept after the first call)."""
        if self._json is None:
            self._json = json.loads(self.to_json())
        return self._json

    def svg(self, path: Union[str, os.PathLike]) -> None:
        """Draws the weights' and activations' tiles (tofu-plan --svg) into `path`, written
        whole and then renamed into place."""
        drawing = self._handle.svg()
        path = os.fspath(path)
        folder = os.path.dirname(os.path.abspath(path))
        fd, temporary = tempfile.mkstemp(dir=folder, prefix=".tofu-svg-")
        try:
            with os.fdopen(fd, "w") as f:
                f.write(drawing)
            os.replace(temporary, path)
        except BaseException:
            os.unlink(temporary)
            raise

    # The figures.
    @property
    def graph(self) -> str:
        return self.json()["graph"]

    @property
    def algorithm(self) -> str:
        return self.json()["algorithm"]

    @property
    def estimated_step_seconds(self) -> float:
        """The training step's estimated time on the device (tofu-plan's "estimated step
        time": the slowest worker's compute plus its communication, no overlap)."""
        return self.json()["step_time"]["seconds"]

    @property
    def peak_bytes_per_worker(self) -> int:
        """The largest worker's planned peak: the memory planner's arena (tiles, fetched
        inputs, partial results, with their lifetimes)."""
        if self._peaks is None:
            self._peaks = list(self._handle.peaks())
        return max(self._peaks)

    @property
    def peak_bytes(self) -> List[int]:
        """Each worker's planned peak."""
        self.peak_bytes_per_worker
        return list(self._peaks)

    @property
    def communication(self) -> Dict[str, int]:
        """Bytes moved per step, summed over workers: "total", and on a topology each level's
        bytes received ("node", "gpu", ...)."""
        j = self.json()
        out = {"total": j["communication_bytes"]}
        for level in j.get("topology", {}).get("levels", []):
            out[level["name"]] = level["bytes"]
        return out

    @property
    def recomputed(self) -> List[str]:
        """The forward tensors the step drops and recomputes for its backward pass."""
        return list(self._handle.recomputed)

    @property
    def notes(self) -> List[str]:
        """What tofu-plan says of the plan on its standard error: how a loss was added to a
        model whose output is not one, and under algorithm="megatron" without a
        configuration, the step of each configuration of the grid and the one chosen."""
        out = [self._handle.loss_note] if self._handle.loss_note else []
        if self._handle.megatron_grid:
            out.append(self._handle.megatron_grid.rstrip("\n"))
        return out

    def placement(self, name: str) -> Placement:
        """The cut per recursion step and each worker's slice of the tensor `name`: a
        module's parameter name ("layer1.0.conv1.weight") or a tensor of the planned graph
        (the optimiser's state, "adam_m_<weight>", included). KeyError for another name."""
        entry = next((t for t in self.json().get("tensors", []) if t["name"] == name), None)
        if entry is None:
            raise KeyError(f"no tensor '{name}' in the plan of {self.graph}")
        cuts = [None if d < 0 else d for d in entry["split_dims"]]
        tiles = [tuple(slice(lo, hi) for lo, hi in box) for box in self._handle.tiles(name)]
        return Placement(name, entry["shape"], cuts, tiles)

    def __repr__(self) -> str:
        j = self.json()
        return (f"<tofu.Plan {j['graph']} on {j['workers']} workers ({j['algorithm']}): "
                f"{j['communication_bytes']} bytes moved a step, estimated step "
                f"{1e3 * self.estimated_step_seconds:.3f} ms on {j['step_time']['device']['name']}>")


def plan(model: Model, example_inputs: Any = None, *, workers: int, train: bool = True,
         optimizer: str = "adam", precision: str = "fp32",
         memory_per_worker: Union[int, str, None] = None, topology: Optional[str] = None,
         recompute: Optional[str] = None, algorithm: str = "tofu",
         megatron: Optional[str] = None, stages: Union[int, Sequence[int], None] = None,
         microbatches: Optional[int] = None, schedule: Optional[str] = None,
         device: str = "h100", batch: Optional[int] = None,
         ops_dir: Optional[str] = None, objective: str = "time") -> Plan:
    """Plans `model`'s training step (train=False: the model as given) on `workers` workers.

    model:             a torch.nn.Module (exported to ONNX in memory, with example_inputs),
                       an ONNX file's path, or a zoo model's name ("mlp", "gpt-2-256-4-64").
    example_inputs:    for a module, a tensor or a tuple of them, of one step's shapes.
    batch:             a zoo model's or an ONNX model's batch (default: 32 for a zoo model,
                       the ONNX model's own); a module's is its example's.
    optimizer:         sgd, momentum, nesterov, adam (default) or adamw.
    precision:         fp32 or bf16 (torch.autocast's policy).
    memory_per_worker: bytes (an int, or text such as "80GB"): the plan of least
                       communication whose planned peak fits, recomputing what it must.
    recompute:         "auto" (with a budget, the default then), "sqrt" or "none".
    topology:          the machine's levels, "16x8:50GB/s@5us,450GB/s@3us" (the
                       objective's communication then crosses them).
    algorithm:         the search: "tofu" (default), or a baseline: "data-parallel", "zero3",
                       "megatron" (with megatron="TP,PP,DP" for one configuration),
                       "placement", "spartan", "allrow", "equalchop", "icml18", "dp-flat".
    stages, microbatches, schedule: pipeline stages (a count, or the layers of each stage),
                       microbatches per step, and "gpipe" or "1f1b" (the default).
    device:            what the step is estimated on: "h100" (default), "a100", "cpu" or a
                       device model file.
    objective:         what the search minimises: "time" (default), the step estimated on
                       the device, or "bytes", the bytes moved (the paper's objective).

    Raises UsageError, ModelError or PlanError (tofu.Error's kinds).
    """
    args = _plan_args(model, example_inputs, workers=workers, train=train, optimizer=optimizer,
                      precision=precision, memory_per_worker=memory_per_worker,
                      topology=topology, recompute=recompute, algorithm=algorithm,
                      megatron=megatron, stages=stages, microbatches=microbatches,
                      schedule=schedule, device=device, batch=batch, ops_dir=ops_dir,
                      objective=objective)
    return Plan(_tofu.plan(args), workers, args, model if args.onnx_bytes else None)


def infer(model: Model, inputs: Any, *, workers: int = 1, precision: str = "fp32",
          algorithm: str = "tofu", seed: int = 1, ops_dir: Optional[str] = None) -> Any:
    """Runs `model`'s forward graph once on `inputs`, partitioned across `workers` threads,
    on Tofu's CPU engine, from the model's own values (a module's weights and buffers, in
    evaluation mode), as tofu-run --infer does.

    model:  a torch.nn.Module with inputs a tensor or a tuple of them (the shapes it is
            planned for); or an ONNX file's path or a zoo model's name with inputs a dict of
            input name -> array; or a Plan of tofu.plan(..., train=False): its model and
            settings, the same plan made again (plans are deterministic), and its workers.
    Returns, for a module, its output as a torch tensor (a tuple of them for several
    outputs); else a dict of output name -> numpy array (float32: the engine's type).
    Raises UsageError, ModelError, PlanError, or DataError for inputs that do not fit.
    """
    import numpy as np
    if isinstance(model, Plan):
        if model._args is None or model._args.train:
            raise UsageError("tofu.infer runs a forward plan: tofu.plan(..., train=False)")
        if model._module is not None:  # a module's plan: its example's shapes
            model, workers, precision, algorithm = (model._module, model._args.workers,
                                                    model._args.precision,
                                                    model._args.algorithm)
        else:
            args = model._args
            given = {str(k): np.ascontiguousarray(np.asarray(v)) for k, v in inputs.items()} \
                if isinstance(inputs, dict) else None
            if given is None:
                raise UsageError("a zoo or ONNX model's inputs are a dict of input name -> "
                                 "array")
            return {name: value for name, value in _tofu.infer(args, given, int(seed))}
    is_module = hasattr(model, "named_parameters") and hasattr(model, "forward")
    if is_module:
        import torch
        tensors = (inputs,) if isinstance(inputs, torch.Tensor) else tuple(inputs)
        args = _plan_args(model, tensors, workers=workers, train=False, optimizer="sgd",
                          precision=precision, memory_per_worker=None, topology=None,
                          recompute=None, algorithm=algorithm, megatron=None, stages=None,
                          microbatches=None, schedule=None, device="h100", batch=None,
                          ops_dir=ops_dir)
        names = ["input"] if len(tensors) == 1 else [f"input{i}" for i in range(len(tensors))]
        given = {n: np.ascontiguousarray(t.detach().cpu().numpy()) for n, t in zip(names, tensors)}
    else:
        if not isinstance(inputs, dict):
            raise UsageError("a zoo or ONNX model's inputs are a dict of input name -> array")
        args = _plan_args(model, None, workers=workers, train=False, optimizer="sgd",
                          precision=precision, memory_per_worker=None, topology=None,
                          recompute=None, algorithm=algorithm, megatron=None, stages=None,
                          microbatches=None, schedule=None, device="h100", batch=None,
                          ops_dir=ops_dir)
        given = {str(k): np.ascontiguousarray(np.asarray(v)) for k, v in inputs.items()}
    outputs = _tofu.infer(args, given, int(seed))
    if not is_module:
        return {name: value for name, value in outputs}
    import torch
    values = tuple(torch.from_numpy(value) for _, value in outputs)
    return values[0] if len(values) == 1 else values
