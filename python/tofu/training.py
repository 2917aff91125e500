"""tofu.Trainer: trains a torch.nn.Module's step, partitioned across workers, on Tofu's CPU
engine, fed from a DataLoader, a Dataset or arrays."""
import math
import os
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

from . import _tofu
from ._model import _count, _plan_args
from .errors import DataError, UsageError


def _numpy(value, what: str):
    """A batch's tensor (torch or numpy) as a C-contiguous numpy array, without a copy where
    it is one already."""
    import numpy as np
    if hasattr(value, "detach"):  # a torch.Tensor
        value = value.detach().cpu().contiguous().numpy()
    array = np.asarray(value)
    if array.ndim == 0:
        raise DataError(f"{what} is a scalar: a batch's first dimension counts its samples")
    return np.ascontiguousarray(array)


class _Batches:
    """The batches of `data`, epoch after epoch: (inputs, labels) pairs from a DataLoader as
    it orders them, from a Dataset in order, or from a pair of arrays in order. An epoch's
    last batch, when short, is left out: the plan is for one batch size (drop_last)."""

    def __init__(self, data, batch_size: Optional[int]):
        import torch
        from torch.utils.data import DataLoader, Dataset
        if isinstance(data, DataLoader):
            if batch_size is not None and batch_size != data.batch_size:
                raise UsageError(f"batch_size={batch_size}, but the DataLoader's is "
                                 f"{data.batch_size}")
            self.loader = data
        elif isinstance(data, Dataset):
            if batch_size is None:
                raise UsageError("a Dataset needs batch_size= (or give a DataLoader)")
            self.loader = DataLoader(data, batch_size=_count(batch_size, "batch_size"))
        elif isinstance(data, (tuple, list)) and len(data) == 2:
            if batch_size is None:
                raise UsageError("arrays need batch_size=")
            x, y = (torch.as_tensor(_numpy(a, w)) for a, w in zip(data, ("inputs", "labels")))
            if len(x) != len(y):
                raise DataError(f"{len(x)} inputs but {len(y)} labels")
            self.loader = DataLoader(torch.utils.data.TensorDataset(x, y),
                                     batch_size=_count(batch_size, "batch_size"))
        else:
            raise UsageError(f"data must be a DataLoader, a Dataset or (inputs, labels) arrays, "
                             f"not {type(data).__name__}")
        self.batch = self.loader.batch_size
        if self.batch is None:
            raise UsageError("the DataLoader has no batch_size (a batch_sampler): tofu plans "
                             "one batch size")
        samples = len(self.loader.dataset)
        if samples < self.batch:
            raise DataError(f"the data holds {samples} samples, fewer than a batch of "
                            f"{self.batch}")
        self.per_epoch = samples // self.batch
        self._it = None

    def next(self):
        """The next full batch, as (inputs, labels) numpy arrays."""
        while True:
            if self._it is None:
                self._it = iter(self.loader)
            try:
                pair = next(self._it)
            except StopIteration:
                self._it = None
                continue
            if not isinstance(pair, (tuple, list)) or len(pair) != 2:
                raise DataError("each batch must be (inputs, labels), as a DataLoader over a "
                                "classification Dataset gives them")
            x, y = _numpy(pair[0], "a batch's inputs"), _numpy(pair[1], "a batch's labels")
            if len(x) == self.batch and len(y) == self.batch:
                return x, y
            self._it = None  # an epoch's short last batch: the next epoch


class Trainer:
    """Trains a torch.nn.Module (a classifier: its output, logits, gets a softmax
    cross-entropy against the labels) partitioned across `workers` workers, on the plan
    tofu.plan would make with the same settings. backend="cpu" (default) runs them as threads
    of this process; backend="mpi" as the processes of `mpirun -np K python3 script.py`, each
    running the whole script: every rank gets the same losses and state, and `rank` says
    which process this is (let rank 0 print and save; save() itself is collective). The module's weights are the
    starting point; state_dict() gives the trained ones back.

        trainer = tofu.Trainer(model, workers=2, optimizer="sgd", lr=0.1)
        trainer.fit(loader, epochs=1)
        model.load_state_dict(trainer.state_dict())

    optimizer: sgd (default), momentum, nesterov, adam or adamw; lr, momentum, weight_decay,
    lr_schedule ("constant", "step:30:0.1", "cosine:1000") and warmup as tofu-run's flags.
    precision, memory_per_worker, recompute, algorithm, megatron, stages, microbatches and
    schedule as tofu.plan's: a pipeline (stages=2, microbatches=4) trains the full batch's
    step, each weight updated once with the microbatches' summed gradients. seed draws what
    the step draws (dropout). threads_per_worker: OpenMP threads per worker (default: the
    cores over the workers). load: a folder save() (or tofu-run --save) wrote, to go on
    from: its weights, optimiser state and step count (its settings are checked against
    these, as tofu-run --load checks them).
    """

    def __init__(self, module, *, workers: int = 1, backend: str = "cpu", optimizer: str = "sgd",
                 lr: Optional[float] = None, momentum: Optional[float] = None,
                 weight_decay: Optional[float] = None, lr_schedule: Optional[str] = None,
                 warmup: Optional[int] = None, precision: str = "fp32",
                 memory_per_worker: Union[int, str, None] = None,
                 recompute: Optional[str] = None, algorithm: str = "tofu",
                 megatron: Optional[str] = None, stages: Union[int, Sequence[int], None] = None,
                 microbatches: Optional[int] = None, schedule: Optional[str] = None, seed: int = 1,
                 threads_per_worker: Optional[int] = None,
                 load: Optional[Union[str, os.PathLike]] = None, ops_dir: Optional[str] = None):
        if not (hasattr(module, "named_parameters") and hasattr(module, "forward")):
            raise UsageError(f"Trainer trains a torch.nn.Module, not {type(module).__name__}")
        self.module = module
        self.workers = _count(workers, "workers")
        if backend not in ("cpu", "mpi"):
            raise UsageError(f"backend '{backend}': not cpu (threads of this process) or mpi "
                             f"(one process per worker, under mpirun)")
        self.backend = backend
        self._settings = dict(optimizer=optimizer, precision=precision,
                              memory_per_worker=memory_per_worker, recompute=recompute,
                              algorithm=algorithm, megatron=megatron, stages=stages,
                              microbatches=microbatches, schedule=schedule, ops_dir=ops_dir)
        self._hyper = dict(lr=lr, momentum=momentum, weight_decay=weight_decay,
                           lr_schedule=lr_schedule, warmup=warmup, seed=seed,
                           threads_per_worker=threads_per_worker)
        self._load = "" if load is None else os.fspath(load)
        if self._load and not os.path.isdir(self._load):
            raise UsageError(f"load: no checkpoint folder at '{self._load}' (save() writes one)")
        self._handle = None
        #: Per step: its loss and seconds; per evaluation during fit(): its score.
        self.history: Dict[str, List[Any]] = {"loss": [], "seconds": [], "eval": []}

    def fit(self, data, *, epochs: int = 1, steps: Optional[int] = None,
            batch_size: Optional[int] = None, eval_data=None, progress: bool = True,
            callbacks: Sequence[Callable[[Dict[str, Any]], Any]] = (),
            checkpoint: Optional[Union[str, os.PathLike]] = None) -> Dict[str, List[Any]]:
        """Trains `epochs` passes over `data` (or `steps` steps): a DataLoader, a Dataset (with
        batch_size) or (inputs, labels) arrays (with batch_size), in their order.

        With `eval_data` (what evaluate() takes), the state is scored after each epoch and
        after the last step, into history["eval"].

        Each step's loss and time go to `history`, to a progress bar (tqdm; progress=False
        turns it off) and to each callback, as {"step", "loss", "seconds", "samples_per_second"}.
        A callback returning True stops after that step. Ctrl-C stops between steps: the
        state is that of the steps done, saved to `checkpoint` if given (save()'s files, which
        tofu-run --load resumes), and KeyboardInterrupt is raised again.
        """
        if self._handle is not None:
            raise UsageError("fit() runs once per Trainer; a new Trainer can go on from what "
                             "save() wrote (tofu-run --load)")
        batches = _Batches(data, batch_size)
        total = _count(steps, "steps") if steps is not None else \
            _count(epochs, "epochs") * batches.per_epoch
        first = batches.next()
        args = _tofu.TrainArgs()
        args.plan = _plan_args(self.module, (_torch_tensor(first[0]),), workers=self.workers,
                               train=True, topology=None, device="h100", batch=None,
                               **self._settings)
        h = self._hyper
        args.lr = math.nan if h["lr"] is None else float(h["lr"])
        args.momentum = math.nan if h["momentum"] is None else float(h["momentum"])
        args.weight_decay = math.nan if h["weight_decay"] is None else float(h["weight_decay"])
        args.lr_schedule = h["lr_schedule"] or ""
        args.warmup = -1 if h["warmup"] is None else int(h["warmup"])
        args.steps = total
        args.seed = int(h["seed"])
        args.threads_per_worker = int(h["threads_per_worker"] or 0)
        args.load = self._load
        args.backend = self.backend
        pending = [first]

        def next_batch(step):
            x, y = pending.pop() if pending else batches.next()
            return {"input": x, "labels": y}

        self._handle = _tofu.make_trainer(args, {"input": first[0], "labels": first[1]},
                                          next_batch)
        held = None if eval_data is None else _held_out(eval_data)
        bar = _progress(total, progress and self._handle.rank == 0)
        started = time.monotonic()

        def on_step(index, done, loss, seconds):
            self.history["loss"].append(loss)
            self.history["seconds"].append(seconds)
            record = {"step": done, "loss": loss, "seconds": seconds,
                      "samples_per_second": batches.batch / seconds if seconds > 0 else 0.0}
            if held is not None and (done % batches.per_epoch == 0 or done == total):
                score = self._handle.evaluate(held)
                self.history["eval"].append(score)
                record["eval"] = score
            if bar is not None:
                shown = dict(loss=f"{loss:.4f}", samples_s=f"{record['samples_per_second']:.0f}")
                if self.history["eval"]:
                    shown["accuracy"] = f"{self.history['eval'][-1]['accuracy']:.4f}"
                bar.set_postfix(**shown)
                bar.update(1)
            return any(bool(c(record)) for c in callbacks)

        try:
            self._handle.train(on_step)
        except KeyboardInterrupt:
            if bar is not None:
                bar.close()
            if checkpoint is not None:
                self.save(checkpoint)
            raise
        if bar is not None:
            bar.close()
        self.seconds = time.monotonic() - started
        return self.history

    def evaluate(self, data, *, batch_size: int = 256) -> Dict[str, float]:
        """The trained state scored on held-out `data` (a DataLoader, a Dataset or (inputs,
        labels) arrays, every sample counted): {"loss", "accuracy", "samples", "seconds"}.
        It runs the module's forward graph on the engine, partitioned as training is, in
        evaluation mode (batch norms normalise with their running statistics, as PyTorch's
        model.eval())."""
        return dict(self._trained().evaluate(_held_out(data, batch_size)))

    def _trained(self):
        if self._handle is None:
            raise UsageError("nothing trained yet: call fit() first")
        return self._handle

    def state_dict(self) -> Dict[str, Any]:
        """The module's state_dict with the trained values: every parameter, and the batch
        norms' running statistics (their counts of batches advanced by the steps trained),
        as torch tensors that module.load_state_dict takes."""
        import torch
        trained = self._trained().state()
        out = {}
        steps = len(self.history["loss"])
        for name, value in self.module.state_dict().items():
            if name in trained:
                out[name] = torch.from_numpy(trained[name]).to(value.dtype).reshape(value.shape)
            elif name.endswith("num_batches_tracked"):
                out[name] = value + steps
            else:
                out[name] = value.clone()
        return out

    def save(self, path: Union[str, os.PathLike]) -> Dict[str, Any]:
        """Writes every weight and optimiser state into the folder `path` (tofu-run --save's
        safetensors files, which load= and tofu-run --load resume). Returns what was written.
        Under mpi every process calls it: each writes its tiles, the first the index."""
        return dict(self._trained().save(os.fspath(path)))

    def save_onnx(self, path: Union[str, os.PathLike]) -> Dict[str, Any]:
        """Writes the module's ONNX export with its trained values (tofu-run --save-onnx):
        every initializer the step trained or carried, in its own element type; written whole
        and then renamed into place."""
        return dict(self._trained().save_onnx(os.fspath(path)))

    @property
    def rank(self) -> int:
        """This process among mpirun's (0 under backend="cpu"); known once fit() starts."""
        return self._trained().rank

    @property
    def steps_before(self) -> int:
        """The steps the checkpoint given as load= had trained (0 without one)."""
        return self._trained().steps_before

    @property
    def losses(self) -> List[float]:
        return list(self.history["loss"])


def _held_out(data, batch_size: int = 256) -> Dict[str, Any]:
    """Held-out data as two arrays, every sample kept ("input", "labels")."""
    import numpy as np
    from torch.utils.data import DataLoader, Dataset
    if isinstance(data, (tuple, list)) and len(data) == 2:
        x, y = _numpy(data[0], "inputs"), _numpy(data[1], "labels")
    else:
        if isinstance(data, Dataset):
            data = DataLoader(data, batch_size=_count(batch_size, "batch_size"))
        if not isinstance(data, DataLoader):
            raise UsageError(f"held-out data must be a DataLoader, a Dataset or (inputs, labels) "
                             f"arrays, not {type(data).__name__}")
        xs, ys = [], []
        for pair in data:
            xs.append(_numpy(pair[0], "a batch's inputs"))
            ys.append(_numpy(pair[1], "a batch's labels"))
        if not xs:
            raise DataError("the held-out data holds no samples")
        x, y = np.concatenate(xs), np.concatenate(ys)
    if len(x) != len(y):
        raise DataError(f"{len(x)} held-out inputs but {len(y)} labels")
    return {"input": x, "labels": y}


def _torch_tensor(array):
    import torch
    return torch.from_numpy(array)


def _progress(total: int, wanted: bool):
    if not wanted:
        return None
    try:
        from tqdm import tqdm
    except ImportError:  # Debian's python3-tqdm; without it, no bar
        return None
    return tqdm(total=total, unit="step", dynamic_ncols=True)
