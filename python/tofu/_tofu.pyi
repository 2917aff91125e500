# The native part's interface (python/module.cc), for type checkers; tofu/__init__.py is the
# module's own.
from typing import Any, Callable, Dict, List, Tuple

def version() -> str: ...
def set_errors(usage: type, model: type, plan: type, data: type, base: type) -> None: ...

class PlanArgs:
    model: str
    onnx_path: str
    onnx_bytes: bytes
    micro_onnx_bytes: bytes
    name: str
    batch: int
    workers: int
    train: bool
    optimizer: str
    precision: str
    algorithm: str
    megatron: str
    stages: str
    microbatches: int
    schedule: str
    memory_per_worker: str
    recompute: str
    topology: str
    device: str
    anchor: str
    ops_dir: str
    def __init__(self) -> None: ...

class PlanHandle:
    loss_note: str
    recomputed: List[str]
    megatron_grid: str
    def text(self, json: bool, summary: bool) -> str: ...
    def tiles(self, name: str) -> List[List[Tuple[int, int]]]: ...
    def svg(self) -> str: ...
    def peaks(self) -> List[int]: ...

def plan(args: PlanArgs) -> PlanHandle: ...

class TrainArgs:
    plan: PlanArgs
    lr: float
    momentum: float
    weight_decay: float
    lr_schedule: str
    warmup: int
    steps: int
    seed: int
    threads_per_worker: int
    load: str
    backend: str
    def __init__(self) -> None: ...

class TrainerHandle:
    losses: List[float]
    step_seconds: List[float]
    batch: int
    lr: float
    build_seconds: float
    def train(self, on_step: Callable[[int, int, float, float], bool]) -> None: ...
    def state(self) -> Dict[str, Any]: ...
    def save(self, dir: str) -> Dict[str, Any]: ...
    def evaluate(self, arrays: Dict[str, Any]) -> Dict[str, Any]: ...
    def save_onnx(self, path: str) -> Dict[str, Any]: ...
    steps_before: int
    rank: int
    processes: int

def make_trainer(args: TrainArgs, first: Dict[str, Any],
                 next_batch: Callable[[int], Dict[str, Any]]) -> TrainerHandle: ...

def infer(args: PlanArgs, inputs: Dict[str, Any], seed: int) -> List[Tuple[str, Any]]: ...
