# The native part's interface (python/module.cc), for type checkers; tofu/__init__.py is the
# module's own.
from typing import List, Tuple

def version() -> str: ...
def set_errors(usage: type, model: type, plan: type, data: type, base: type) -> None: ...

class PlanArgs:
    model: str
    onnx_path: str
    onnx_bytes: bytes
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
