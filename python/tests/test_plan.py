"""tofu.plan against the installed tofu-plan: the same plans, the same documents, the same
errors, and placements by a PyTorch module's own parameter names.

Run by examples/consumers_test.sh against an install (tools/install.sh PREFIX):
    TOFU_PREFIX=PREFIX PYTHONPATH=PREFIX/lib/python3/dist-packages \\
        /usr/bin/python3 -m pytest python/tests
"""
import json
import os
import subprocess

import pytest
import torch
from torch import nn

import tofu

PREFIX = os.environ.get("TOFU_PREFIX", "")


def tofu_plan(*args):
    """The installed tofu-plan's exit status, standard output and standard error."""
    assert PREFIX, "TOFU_PREFIX names the install the tests run against"
    done = subprocess.run([os.path.join(PREFIX, "bin", "tofu-plan"), *args],
                          capture_output=True, text=True)
    return done.returncode, done.stdout, done.stderr


def untimed(value):
    """A JSON document without what differs from run to run (seconds of the search)."""
    if isinstance(value, dict):
        return {k: untimed(v) for k, v in value.items() if "second" not in k or "step" in k}
    if isinstance(value, list):
        return [untimed(v) for v in value]
    return value


class Net(nn.Module):
    """A convolution, a batch norm and two linear layers over 3x16x16 images."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1)
        self.bn = nn.BatchNorm2d(16)
        self.fc1 = nn.Linear(16 * 8 * 8, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = nn.functional.max_pool2d(torch.relu(self.bn(self.conv1(x))), 2)
        return self.fc2(torch.relu(self.fc1(torch.flatten(x, 1))))


@pytest.fixture(scope="module")
def net():
    torch.manual_seed(0)
    return Net()


def test_version_is_the_library_version():
    code, out, _ = tofu_plan("--version")
    assert tofu.__version__.count(".") == 2
    assert tofu.__version__ in out


@pytest.mark.parametrize("flags", [
    dict(workers=4),
    dict(workers=8, optimizer="sgd", algorithm="data-parallel"),
    dict(workers=4, memory_per_worker="30MB"),
    dict(workers=4, topology="2x2:12.5GB/s@5us,150GB/s", precision="bf16"),
    dict(workers=4, stages=2, microbatches=2),
    dict(workers=4, objective="bytes"),
])
def test_zoo_plan_is_tofu_plans(flags):
    """The same settings give tofu-plan's document, field for field (times aside)."""
    plan = tofu.plan("gpt-2-64-4-16", batch=8, **flags)
    cli = ["--model", "gpt-2-64-4-16", "--batch", "8", "--train", "--format=json"]
    for key, value in flags.items():
        cli += [f"--{key.replace('_', '-').replace('algorithm', 'algo')}", str(value)]
    code, out, err = tofu_plan(*cli)
    assert code == 0, err
    assert untimed(plan.json()) == untimed(json.loads(out))
    assert plan.estimated_step_seconds == json.loads(out)["step_time"]["seconds"]


def test_explain_is_tofu_plans():
    """Plan.explain() and explanation() are tofu-plan --explain's section, text and JSON."""
    plan = tofu.plan("gpt-2-64-4-16", batch=8, workers=4)
    cli = ["--model", "gpt-2-64-4-16", "--batch", "8", "--train", "--workers", "4", "--explain"]
    code, out, err = tofu_plan(*cli, "--format=json")
    assert code == 0, err
    assert untimed(plan.explanation()) == untimed(json.loads(out)["explain"])
    code, out, err = tofu_plan(*cli)
    assert code == 0, err
    assert plan.explain() in out
    assert "the runner-ups" in plan.explain()


def test_module_plan_places_parameters_by_their_names(net, tmp_path):
    example = torch.randn(16, 3, 16, 16)
    plan = tofu.plan(net, example, workers=4)
    # tofu-plan on the same export: the same cut of every tensor.
    onnx = tmp_path / "net.onnx"
    onnx.write_bytes(tofu._model._export(net, (example,), True))
    code, out, err = tofu_plan("--onnx", str(onnx), "--train", "--workers", "4", "--format=json")
    assert code == 0, err
    cli = {t["name"]: t for t in json.loads(out)["tensors"]}
    ours = {t["name"]: t for t in plan.json()["tensors"]}
    assert ours == cli
    assert plan.json()["ops"] == json.loads(out)["ops"]
    for name, param in net.named_parameters():
        p = plan.placement(name)
        assert p.shape == list(param.shape)
        assert len(p.cuts) == len(plan.json()["factors"])
        assert len(p.tiles) == 4
        # The workers' slices cover the parameter, each element as often as the plan
        # replicates it (the steps that do not cut it).
        copies = 1
        for cut, parts in zip(p.cuts, plan.json()["factors"]):
            copies *= parts if cut is None else 1
        covered = torch.zeros_like(param)
        for tile in p.tiles:
            covered[tile] += 1
        assert torch.equal(covered, torch.full_like(param, copies)), name
    with pytest.raises(KeyError, match="no tensor 'conv9.weight'"):
        plan.placement("conv9.weight")


def test_planning_a_module_leaves_its_state_alone(net):
    before = {n: b.clone() for n, b in net.state_dict().items()}
    net.eval()
    tofu.plan(net, torch.randn(8, 3, 16, 16), workers=2)
    assert not net.training
    for n, b in net.state_dict().items():
        assert torch.equal(before[n], b), n


def test_figures(net):
    plan = tofu.plan(net, torch.randn(16, 3, 16, 16), workers=4, memory_per_worker=4 << 20,
                     topology="2x2:12.5GB/s@5us,150GB/s")
    j = plan.json()
    assert 0 < plan.peak_bytes_per_worker <= 4 << 20
    assert plan.peak_bytes_per_worker == j["memory"]["planned_peak_bytes"]
    assert len(plan.peak_bytes) == 4
    levels = plan.communication
    assert levels["total"] == j["communication_bytes"] > 0
    assert set(levels) == {"total", "node", "gpu"}
    assert "labels" in plan.notes[0]
    assert repr(plan).startswith("<tofu.Plan Net training step on 4 workers (tofu)")
    assert "plan: Net training step on 4 workers" in plan.summary()
    assert len(plan.text()) > len(plan.summary())
    sqrt = tofu.plan("gpt-2-64-4-16", batch=8, workers=2, recompute="sqrt")
    assert sqrt.recomputed and all(isinstance(t, str) for t in sqrt.recomputed)


def test_svg_is_written_whole(tmp_path):
    path = tmp_path / "plan.svg"
    tofu.plan("mlp", workers=4).svg(path)
    assert path.read_text().startswith("<svg")
    assert os.listdir(tmp_path) == ["plan.svg"]
    with pytest.raises(tofu.UsageError, match="a pipeline has one per stage"):
        tofu.plan("gpt-2-64-4-16", batch=8, workers=4, stages=2).svg(tmp_path / "no.svg")


def cli_message(*args):
    """tofu-plan's exit status and its error, the last line it prints (after its progress)."""
    code, _, err = tofu_plan(*args)
    assert code != 0
    return code, err.strip().splitlines()[-1].removeprefix("tofu-plan: ")


def test_errors_are_the_tools_messages():
    # A plan that fits no budget: PlanError (tofu-plan exits 1).
    with pytest.raises(tofu.PlanError) as e:
        tofu.plan("gpt-2-64-4-16", batch=8, workers=4, memory_per_worker="100KB")
    code, message = cli_message("--model", "gpt-2-64-4-16", "--batch", "8", "--train",
                                "--workers", "4", "--memory-per-worker", "100KB")
    # (tofu-plan adds how its --fit finds the workers needed.)
    assert code == 1 and message == str(e.value) + "; --fit 100KB finds how many workers it needs"
    # A model that does not build: ModelError.
    with pytest.raises(tofu.ModelError, match="unknown model 'gpt-x'"):
        tofu.plan("gpt-x", workers=2)
    # Settings that cannot work: UsageError, also a ValueError.
    for kwargs, match in [
        (dict(workers=0), "workers must be a count of 1 or more"),
        (dict(workers=4, optimizer="adamx"), "optimizer 'adamx'"),
        (dict(workers=4, memory_per_worker="lots"), "memory_per_worker: "),
        (dict(workers=4, algorithm="nosuch"), "algorithm 'nosuch': not one of tofu"),
        (dict(workers=4, megatron="2,2"), "megatron '2,2': give TP,PP,DP"),
        (dict(workers=3, topology="2x2:1GB/s,2GB/s"), "has 4 workers"),
        (dict(workers=4, recompute="auto"), "recompute='auto' recomputes what a memory"),
        (dict(workers=4, algorithm="swap"), "an estimate of one worker"),
        (dict(workers=4, objective="speed"), "objective 'speed': not time or bytes"),
    ]:
        with pytest.raises(tofu.UsageError, match=match):
            tofu.plan("mlp", **kwargs)
    assert issubclass(tofu.UsageError, ValueError)
    for kind in (tofu.UsageError, tofu.ModelError, tofu.PlanError, tofu.DataError):
        assert issubclass(kind, tofu.Error)
    with pytest.raises(tofu.UsageError, match="example_inputs"):
        tofu.plan(Net(), workers=2)
    with pytest.raises(tofu.UsageError, match="no ONNX model at"):
        tofu.plan("/nonexistent/model.onnx", workers=2)


def test_a_module_the_importer_cannot_translate_is_a_model_error():
    class Odd(nn.Module):
        def forward(self, x):
            return torch.fft.rfft(x).real  # no ONNX export

    with pytest.raises(tofu.ModelError, match="Odd"):
        tofu.plan(Odd(), torch.randn(4, 8), workers=2, train=False)
