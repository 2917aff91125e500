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
import io
import json
import os
import tempfile
import warnings
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from . import _tofu
from .errors import DataError, Error, ModelError, PlanError, UsageError

__all__ = ["plan", "Plan", "Placement", "Error", "UsageError", "ModelError", "PlanError",
           "DataError", "__version__"]

__version__ = _tofu.version()
_tofu.set_errors(UsageError, ModelError, PlanError)


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

    def __init__(self, handle, workers: int):
        self._handle = handle
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


Model = Any  # a torch.nn.Module, an ONNX file's path, or a zoo model's name


def _export(module, example_inputs, train: bool) -> bytes:
    """A torch.nn.Module as ONNX bytes (opset 17), its parameters as initializers under their
    own names (those placement() takes). A training step's export
    is in training mode (batch norms normalise by the batch's statistics and stay apart from
    the convolutions before them, whose weights keep their names)."""
    import torch  # only for modules
    if example_inputs is None:
        raise UsageError("a torch.nn.Module needs example_inputs: a tensor, or a tuple of "
                         "them, of the shapes one step takes")
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    example_inputs = tuple(example_inputs)
    names = [f"input{i}" if len(example_inputs) > 1 else "input"
             for i in range(len(example_inputs))]
    buffer = io.BytesIO()
    was_training = module.training
    mode = torch.onnx.TrainingMode.TRAINING if train else torch.onnx.TrainingMode.EVAL
    # Tracing runs the module once: what that forward pass updates (a batch norm's running
    # statistics and its count) is put back as it was.
    kept = {n: b.detach().clone() for n, b in module.named_buffers()}
    try:
        with warnings.catch_warnings():
            # Tracing in training mode drops the update of a batch norm's count of batches,
            # which the step does not read; torch says so for every batch norm.
            warnings.filterwarnings("ignore", message="ONNX Preprocess - Removing mutation",
                                    category=UserWarning)
            # Tracing says a Python value (a batch norm's check of its batch) becomes a
            # constant: the plan is for these shapes anyway.
            warnings.filterwarnings("ignore", category=torch.jit.TracerWarning)
            torch.onnx.export(module, example_inputs, buffer, opset_version=17,
                              input_names=names, output_names=["output"],
                              do_constant_folding=False, training=mode)
    except Exception as e:  # the exporter's own errors, whatever their type
        raise ModelError(f"{type(module).__name__}: torch.onnx.export failed: {e}") from e
    finally:
        module.train(was_training)
        with torch.no_grad():
            for n, b in module.named_buffers():
                b.copy_(kept[n])
    return buffer.getvalue()


def _bytes_text(value, what: str) -> str:
    if value is None:
        return ""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise UsageError(f"{what} must be a number of bytes or a text such as '80GB', not "
                         f"{value!r}")
    if isinstance(value, int):
        if value <= 0:
            raise UsageError(f"{what} must be above 0, not {value}")
        return str(value)
    return value


def plan(model: Model, example_inputs: Any = None, *, workers: int, train: bool = True,
         optimizer: str = "adam", precision: str = "fp32",
         memory_per_worker: Union[int, str, None] = None, topology: Optional[str] = None,
         recompute: Optional[str] = None, algorithm: str = "tofu",
         megatron: Optional[str] = None, stages: Union[int, Sequence[int], None] = None,
         microbatches: Optional[int] = None, schedule: Optional[str] = None,
         device: str = "h100", batch: Optional[int] = None,
         ops_dir: Optional[str] = None) -> Plan:
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
    topology:          the machine's levels, "16x8:50GB/s@5us,450GB/s@3us" (sets the
                       objective to the estimated communication time over them).
    algorithm:         the search: "tofu" (default), or a baseline: "data-parallel", "zero3",
                       "megatron" (with megatron="TP,PP,DP" for one configuration),
                       "placement", "spartan", "allrow", "equalchop", "icml18", "dp-flat".
    stages, microbatches, schedule: pipeline stages (a count, or the layers of each stage),
                       microbatches per step, and "gpipe" or "1f1b" (the default).
    device:            what the step is estimated on: "h100" (default), "a100", "cpu" or a
                       device model file.

    Raises UsageError, ModelError or PlanError (tofu.Error's kinds).
    """
    args = _tofu.PlanArgs()
    if isinstance(model, (str, os.PathLike)):
        text = os.fspath(model)
        if text.endswith(".onnx") or os.path.sep in text:
            if not os.path.isfile(text):
                raise UsageError(f"no ONNX model at '{text}'")
            args.onnx_path = text
        else:
            args.model = text
        if example_inputs is not None:
            raise UsageError("example_inputs are a torch.nn.Module's; a zoo or ONNX model "
                             "takes batch=")
    elif hasattr(model, "named_parameters") and hasattr(model, "forward"):
        if batch is not None:
            raise UsageError("a module's batch is its example_inputs'; batch= is for a zoo or "
                             "ONNX model")
        args.onnx_bytes = _export(model, example_inputs, bool(train))
        args.name = type(model).__name__
    else:
        raise UsageError(f"model must be a torch.nn.Module, an ONNX file's path or a zoo "
                         f"model's name, not {type(model).__name__}")
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise UsageError(f"workers must be a count of 1 or more, not {workers!r}")
    args.workers = workers
    if batch is not None:
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            raise UsageError(f"batch must be a count of 1 or more, not {batch!r}")
        args.batch = batch
    args.train = bool(train)
    args.optimizer = optimizer
    args.precision = precision
    args.algorithm = algorithm
    args.megatron = megatron or ""
    if stages is not None:
        args.stages = str(stages) if isinstance(stages, int) else ",".join(str(s) for s in stages)
    if microbatches is not None:
        if isinstance(microbatches, bool) or not isinstance(microbatches, int) or microbatches < 1:
            raise UsageError(f"microbatches must be a count of 1 or more, not {microbatches!r}")
        args.microbatches = microbatches
    args.schedule = schedule or ""
    args.memory_per_worker = _bytes_text(memory_per_worker, "memory_per_worker")
    args.recompute = recompute or ""
    args.topology = topology or ""
    args.device = device
    args.ops_dir = ops_dir or ""
    args.anchor = _tofu.__file__
    return Plan(_tofu.plan(args), workers)
