"""tofu.Trainer against its oracles: PyTorch training the same module on the same batches,
and the installed tofu-run on the same data, bit for bit; Ctrl-C between steps; data that
does not fit.

Run by examples/consumers_test.sh against an install, as test_plan.py is.
"""
import json
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from torch import nn

import tofu

PREFIX = os.environ.get("TOFU_PREFIX", "")


class Net(nn.Module):
    """A convolution with a batch norm, then two linear layers: 1x8x8 images, 5 classes."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.fc1 = nn.Linear(4 * 4 * 4, 16)
        self.fc2 = nn.Linear(16, 5)

    def forward(self, x):
        x = nn.functional.max_pool2d(torch.relu(self.bn(self.conv(x))), 2)
        return self.fc2(torch.relu(self.fc1(torch.flatten(x, 1))))


def data(samples=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(samples, 1, 8, 8, generator=g), torch.randint(0, 5, (samples,), generator=g)


def fresh(seed=0):
    torch.manual_seed(seed)
    return Net()


def test_fit_trains_as_pytorch_does():
    x, y = data()
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=16)
    model = fresh()
    peer = fresh()
    trainer = tofu.Trainer(model, workers=2, optimizer="sgd", lr=0.1)
    history = trainer.fit(loader, epochs=2, progress=False)
    # PyTorch's own step on the same batches, in training mode (batch statistics).
    opt = torch.optim.SGD(peer.parameters(), lr=0.1)
    expected = []
    for _ in range(2):
        for xb, yb in loader:
            opt.zero_grad()
            loss = nn.functional.cross_entropy(peer(xb), yb)
            loss.backward()
            opt.step()
            expected.append(loss.item())
    assert len(history["loss"]) == len(expected) == 8
    np.testing.assert_allclose(history["loss"], expected, rtol=2e-5)
    assert trainer.losses == history["loss"]
    # The trained state loads into the module: weights and running statistics as PyTorch's.
    model.load_state_dict(trainer.state_dict())
    for (name, ours), (_, theirs) in zip(model.state_dict().items(), peer.state_dict().items()):
        if name.endswith("num_batches_tracked"):
            assert ours.item() == theirs.item() == 8
        else:
            torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-5, msg=name)
    # And evaluates as the peer does.
    model.eval()
    peer.eval()
    torch.testing.assert_close(model(x), peer(x), rtol=1e-4, atol=1e-4)


def test_a_pipeline_trains_the_full_batch_as_pytorch_does():
    """2 stages over 2 microbatches: the mean of the microbatches' losses and one update with
    their summed gradients are PyTorch's full-batch step; the evaluation (the forward graph
    planned on its own, the stages' weights laid out anew) is PyTorch's eval()."""
    def mlp():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(),
                             nn.Linear(32, 5))
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(64, 20, generator=g), torch.randint(0, 5, (64,), generator=g)
    held_x, held_y = torch.randn(40, 20, generator=g), torch.randint(0, 5, (40,), generator=g)
    model, peer = mlp(), mlp()
    trainer = tofu.Trainer(model, workers=2, optimizer="sgd", lr=0.1, stages=2, microbatches=2)
    history = trainer.fit((x, y), batch_size=16, epochs=2, eval_data=(held_x, held_y),
                          progress=False)
    opt = torch.optim.SGD(peer.parameters(), lr=0.1)
    expected = []
    for _ in range(2):
        for i in range(0, 64, 16):
            opt.zero_grad()
            loss = nn.functional.cross_entropy(peer(x[i:i + 16]), y[i:i + 16])
            loss.backward()
            opt.step()
            expected.append(loss.item())
    np.testing.assert_allclose(history["loss"], expected, rtol=1e-5)
    model.load_state_dict(trainer.state_dict())
    for (name, ours), (_, theirs) in zip(model.state_dict().items(), peer.state_dict().items()):
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6, msg=name)
    with torch.no_grad():
        logits = peer(held_x)
    score = history["eval"][-1]
    assert round(score["accuracy"] * 40) == (logits.argmax(1) == held_y).sum().item()
    assert score["loss"] == pytest.approx(nn.functional.cross_entropy(logits, held_y).item(),
                                          rel=1e-5)
    with pytest.raises(tofu.UsageError, match="no batch that splits into 3"):
        tofu.Trainer(mlp(), workers=2, stages=2, microbatches=3).fit((x, y), batch_size=16,
                                                                     steps=1, progress=False)


def test_evaluate_scores_as_pytorch_eval_does():
    x, y = data(64)
    held_x, held_y = data(50, seed=7)  # 50: the last batch of 16 is partial
    model = fresh()
    trainer = tofu.Trainer(model, workers=2, optimizer="sgd", lr=0.1)
    history = trainer.fit((x, y), batch_size=16, epochs=2, eval_data=(held_x, held_y),
                          progress=False)
    assert [e["step"] for e in history["eval"]] == [4, 8]  # after each epoch
    score = trainer.evaluate(torch.utils.data.TensorDataset(held_x, held_y), batch_size=8)
    assert score["samples"] == 50
    assert score == {**history["eval"][-1], "seconds": score["seconds"]}
    # PyTorch's eval() of the trained state: the same accuracy, the same loss to float32.
    model.load_state_dict(trainer.state_dict())
    model.eval()
    with torch.no_grad():
        logits = model(held_x)
    correct = (logits.argmax(1) == held_y).sum().item()
    assert round(score["accuracy"] * 50) == correct
    assert score["loss"] == pytest.approx(nn.functional.cross_entropy(logits, held_y).item(),
                                          rel=1e-5)


def test_fit_is_tofu_run_bit_for_bit(tmp_path):
    """The same batches through tofu-run (a data set in file order) give the same losses."""
    x, y = data(48, seed=1)
    model = fresh(1)
    onnx = tmp_path / "net.onnx"
    onnx.write_bytes(tofu._model._export(model, (x[:16],), True))
    np.save(tmp_path / "x.npy", x.numpy())
    np.save(tmp_path / "y.npy", y.numpy())
    trainer = tofu.Trainer(model, workers=2, optimizer="adam", lr=0.01)
    history = trainer.fit((x, y), batch_size=16, steps=6, progress=False)
    done = subprocess.run([os.path.join(PREFIX, "bin", "tofu-run"), "--onnx", str(onnx),
                           "--data", f"input={tmp_path}/x.npy,labels={tmp_path}/y.npy",
                           "--shuffle", "off", "--workers", "2", "--steps", "6",
                           "--optimizer", "adam", "--lr", "0.01", "--format=json"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert history["loss"] == json.loads(done.stdout)["loss"]


def test_a_dataset_and_callbacks():
    x, y = data(40)
    seen = []
    trainer = tofu.Trainer(fresh(), workers=2)
    trainer.fit(torch.utils.data.TensorDataset(x, y), batch_size=16, epochs=3, progress=False,
                callbacks=[lambda r: seen.append(r) or r["step"] == 4])
    # 40 samples: two batches of 16 an epoch (the short one left out); stopped after step 4.
    assert [r["step"] for r in seen] == [1, 2, 3, 4]
    assert len(trainer.losses) == 4
    assert all(r["samples_per_second"] > 0 for r in seen)


def test_data_that_does_not_fit_is_a_data_error():
    x, y = data(32)
    y[20] = 9  # in the second batch: the first binds the inputs, each batch is checked
    with pytest.raises(tofu.DataError, match="step 2: .*class 9, outside the model's 5 classes"):
        tofu.Trainer(fresh(), workers=2).fit((x, y), batch_size=16, progress=False)
    with pytest.raises(tofu.DataError, match="16 inputs but 15 labels"):
        tofu.Trainer(fresh(), workers=2).fit((x[:16], y[:15]), batch_size=8, progress=False)
    with pytest.raises(tofu.DataError, match="fewer than a batch"):
        tofu.Trainer(fresh(), workers=2).fit((x[:8], y[:8]), batch_size=16, progress=False)
    with pytest.raises(tofu.UsageError, match="needs batch_size"):
        tofu.Trainer(fresh(), workers=2).fit(torch.utils.data.TensorDataset(x, y))
    trainer = tofu.Trainer(fresh(), workers=2)
    with pytest.raises(tofu.UsageError, match="call fit"):
        trainer.state_dict()
    y[20] = 1
    trainer.fit((x, y), batch_size=16, progress=False)
    with pytest.raises(tofu.UsageError, match="once per Trainer"):
        trainer.fit((x, y), batch_size=16, progress=False)


def test_ctrl_c_stops_between_steps_and_leaves_a_checkpoint(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(f"""
        import sys, time, torch
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        import tofu
        from test_train import data, fresh
        x, y = data(64)
        def slow(record):
            if record["step"] == 3:
                print("started", flush=True)
            time.sleep(0.05)
        trainer = tofu.Trainer(fresh(), workers=2)
        try:
            trainer.fit((x, y), batch_size=16, steps=100000, progress=False,
                        callbacks=[slow], checkpoint={str(tmp_path / "ckpt")!r})
        except KeyboardInterrupt:
            print("interrupted after", len(trainer.losses), "steps", flush=True)
            raise
        """))
    child = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=dict(os.environ))
    assert child.stdout.readline().strip() == "started"
    child.send_signal(signal.SIGINT)
    out, err = child.communicate(timeout=60)
    assert child.returncode != 0 and "KeyboardInterrupt" in err, err
    steps = int(out.split("interrupted after")[1].split()[0])
    assert 3 <= steps < 100000
    # The checkpoint (tofu-run --save's safetensors file) holds the steps done.
    raw = (tmp_path / "ckpt" / "model.safetensors").read_bytes()
    header = json.loads(raw[8:8 + int.from_bytes(raw[:8], "little")])
    assert int(header["__metadata__"]["steps"]) == steps
    assert "fc1.weight" in header


def test_save_and_load_go_on_as_one_run(tmp_path):
    """Three steps, saved, then three more from the checkpoint: the same losses, bit for bit,
    as six steps in one run (Adam's state and step count carried)."""
    x, y = data(96, seed=3)
    straight = tofu.Trainer(fresh(3), workers=2, optimizer="adam", lr=0.01)
    straight.fit((x, y), batch_size=16, steps=6, progress=False)
    first = tofu.Trainer(fresh(3), workers=2, optimizer="adam", lr=0.01)
    first.fit((x[:48], y[:48]), batch_size=16, steps=3, progress=False)
    first.save(tmp_path / "ckpt")
    second = tofu.Trainer(fresh(3), workers=2, optimizer="adam", lr=0.01, load=tmp_path / "ckpt")
    second.fit((x[48:], y[48:]), batch_size=16, steps=3, progress=False)
    assert second.steps_before == 3
    assert first.losses + second.losses == straight.losses
    # A checkpoint of another optimiser is refused, naming it.
    with pytest.raises(tofu.UsageError, match="trained with optimizer adam, this run uses sgd"):
        tofu.Trainer(fresh(3), workers=2, optimizer="sgd", load=tmp_path / "ckpt").fit(
            (x, y), batch_size=16, steps=1, progress=False)
    with pytest.raises(tofu.UsageError, match="no checkpoint folder at"):
        tofu.Trainer(fresh(3), load=tmp_path / "none")


def test_save_onnx_writes_the_trained_values(tmp_path):
    import onnx
    from onnx import numpy_helper
    x, y = data(32)
    trainer = tofu.Trainer(fresh(), workers=2)
    trainer.fit((x, y), batch_size=16, progress=False)
    wrote = trainer.save_onnx(tmp_path / "trained.onnx")
    assert wrote["initializers"] >= 8
    saved = {i.name: numpy_helper.to_array(i)
             for i in onnx.load(str(tmp_path / "trained.onnx")).graph.initializer}
    state = trainer.state_dict()
    for name in ("conv.weight", "fc2.bias", "bn.running_var"):
        np.testing.assert_array_equal(saved[name], state[name].numpy())
    assert sorted(os.listdir(tmp_path)) == ["trained.onnx"]


def test_mpi_processes_train_as_threads_do(tmp_path):
    """mpirun -np 2 runs the same script, a worker a process: the same losses, evaluation
    and trained state as 2 threads, bit for bit; save() writes one checkpoint from both."""
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(f"""
        import json, sys
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        import tofu
        from test_train import data, fresh
        x, y = data(64)
        trainer = tofu.Trainer(fresh(), workers=2, backend=sys.argv[1], optimizer="adam",
                               lr=0.01)
        trainer.fit((x, y), batch_size=16, steps=4, progress=False)
        score = trainer.evaluate((x, y))
        weight = trainer.state_dict()["fc1.weight"].sum().item()
        trainer.save(sys.argv[2])
        if trainer.rank == 0:
            print(json.dumps({{"losses": trainer.losses, "accuracy": score["accuracy"],
                               "loss": score["loss"], "weight": weight}}))
        """))
    env = dict(os.environ)
    if os.getuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    threads = subprocess.run([sys.executable, str(script), "cpu", str(tmp_path / "a")],
                             capture_output=True, text=True, env=env, timeout=120)
    assert threads.returncode == 0, threads.stderr
    processes = subprocess.run(["mpirun", "--oversubscribe", "--bind-to", "none", "-np", "2",
                                sys.executable, str(script), "mpi", str(tmp_path / "b")],
                               capture_output=True, text=True, env=env, timeout=120)
    assert processes.returncode == 0, processes.stderr
    assert json.loads(processes.stdout) == json.loads(threads.stdout)
    assert os.listdir(tmp_path / "b")  # the checkpoint both processes wrote
    # More workers than processes is refused, naming both.
    wrong = subprocess.run(["mpirun", "--oversubscribe", "--bind-to", "none", "-np", "1",
                            sys.executable, str(script), "mpi", str(tmp_path / "c")],
                           capture_output=True, text=True, env=env, timeout=120)
    assert wrong.returncode != 0
    assert "workers=2 but mpirun started 1 processes" in wrong.stderr


def test_infer_computes_what_the_module_computes():
    x, _ = data(16)
    model = fresh()
    model.eval()  # infer runs the module in evaluation mode, from its own values
    with torch.no_grad():
        expected = model(x)
    for workers in (1, 2, 4):
        out = tofu.infer(model, x, workers=workers)
        assert isinstance(out, torch.Tensor) and out.shape == expected.shape
        torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    # A forward plan runs as its model would.
    plan = tofu.plan(model, (x,), workers=2, train=False)
    torch.testing.assert_close(tofu.infer(plan, x), expected, rtol=1e-5, atol=1e-5)
    with pytest.raises(tofu.UsageError, match="runs a forward plan"):
        tofu.infer(tofu.plan(model, (x,), workers=2), x)
    # A zoo or ONNX model takes a dict and gives one back.
    outputs = tofu.infer("mlp", {"x": np.zeros((32, 1024), np.float32)}, workers=2,
                         ops_dir=None)
    assert list(outputs) and all(isinstance(v, np.ndarray) for v in outputs.values())
    with pytest.raises(tofu.DataError, match=r"input 'x' is \[32, 1024\], but the array given "
                                             r"is \[8, 1024\]"):
        tofu.infer("mlp", {"x": np.zeros((8, 1024), np.float32)}, workers=2)
    with pytest.raises(tofu.DataError, match="no input 'nope'"):
        tofu.infer("mlp", {"nope": np.zeros((32, 1024), np.float32)}, workers=2)
    with pytest.raises(tofu.UsageError, match="dict of input name"):
        tofu.infer("mlp", np.zeros((32, 1024), np.float32))
