"""What tofu.plan and tofu.Trainer share: a model as the native part takes it (a
torch.nn.Module exported to ONNX in memory, an ONNX file or a zoo model), with the plan's
settings checked."""
import io
import os
import warnings
from typing import Any

from . import _tofu
from .errors import ModelError, UsageError

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
    return _with_buffers(buffer.getvalue(), kept)


def _with_buffers(model: bytes, kept) -> bytes:
    """The exported model with its buffers' initializers as they were before the trace: the
    exporter writes their values after its forward pass, which in training mode has updated
    the batch norms' running statistics once already."""
    import onnx
    from onnx import numpy_helper
    proto = onnx.load_from_string(model)
    changed = False
    for i, init in enumerate(proto.graph.initializer):
        if init.name in kept:
            value = kept[init.name].cpu().numpy().astype(numpy_helper.to_array(init).dtype)
            proto.graph.initializer[i].CopyFrom(numpy_helper.from_array(value, init.name))
            changed = True
    return proto.SerializeToString() if changed else model


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


def _count(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UsageError(f"{what} must be a count of 1 or more, not {value!r}")
    return value


def _microbatch(example_inputs, microbatches):
    """The example inputs at the microbatch's batch: each one's first rows."""
    import torch
    inputs = (example_inputs,) if isinstance(example_inputs, torch.Tensor) else \
        tuple(example_inputs)
    out = []
    for x in inputs:
        if x.dim() == 0 or x.shape[0] % microbatches:
            raise UsageError(f"microbatches={microbatches}: an example input of shape "
                             f"{list(x.shape)} has no batch that splits into {microbatches} "
                             f"of one size")
        out.append(x[:x.shape[0] // microbatches])
    return tuple(out)


def _plan_args(model, example_inputs, *, workers, train, optimizer, precision,
               memory_per_worker, topology, recompute, algorithm, megatron, stages,
               microbatches, schedule, device, batch, ops_dir, objective="time"):
    """tofu.plan's settings, checked, as the native part takes them."""
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
    args.workers = _count(workers, "workers")
    if batch is not None:
        args.batch = _count(batch, "batch")
    args.train = bool(train)
    args.optimizer = optimizer
    args.precision = precision
    args.algorithm = algorithm
    args.megatron = megatron or ""
    if stages is not None:
        args.stages = str(stages) if isinstance(stages, int) else ",".join(str(s) for s in stages)
    if microbatches is not None:
        args.microbatches = _count(microbatches, "microbatches")
        if args.microbatches > 1 and args.onnx_bytes:
            args.micro_onnx_bytes = _export(model, _microbatch(example_inputs, args.microbatches),
                                            bool(train))
    args.schedule = schedule or ""
    args.memory_per_worker = _bytes_text(memory_per_worker, "memory_per_worker")
    args.recompute = recompute or ""
    args.topology = topology or ""
    args.device = device
    args.objective = objective
    args.ops_dir = ops_dir or ""
    args.anchor = _tofu.__file__
    return args


