"""Writes the seed corpora of the checkpoint and names fuzzers (tests/fuzz/seeds/): inputs
each reader accepts, so that the fuzzers start from the formats' structure.

    python3 tools/make_fuzz_seeds.py [OUT_DIR]   (default tests/fuzz/seeds)

The checkpoint fuzzer's first byte chooses the file: even, a whole checkpoint's
model.safetensors; odd, a sharded checkpoint's index.json beside the tile files the harness
writes (tests/fuzz/checkpoint_fuzz_target.cc). The names fuzzer's first byte chooses the
reader (0 topology, 1 bytes, 2 zoo name, 3 schedule, 4 integer).
"""
import json
import os
import struct
import sys


def safetensors(tensors, metadata=None):
    """tensors: name -> (dtype, shape, raw bytes), laid out in order."""
    header, data = {}, b""
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    if metadata:
        header["__metadata__"] = metadata
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


def floats(n, fmt="<f"):
    return b"".join(struct.pack(fmt, i * 0.5) for i in range(n))


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/fuzz/seeds"
    ckpt = os.path.join(out, "checkpoint")
    names = os.path.join(out, "names")
    os.makedirs(ckpt, exist_ok=True)
    os.makedirs(names, exist_ok=True)

    def write(folder, name, data):
        with open(os.path.join(folder, name), "wb") as f:
            f.write(data)

    write(ckpt, "whole_f32", b"\0" + safetensors(
        {"fc.weight": ("F32", [2, 3], floats(6)), "fc.bias": ("F32", [3], floats(3))},
        {"model": "mlp", "steps": "10", "optimizer": "sgd", "lr": "0.1"}))
    write(ckpt, "whole_mixed", b"\2" + safetensors(
        {"a": ("F16", [2, 2], floats(4, "<e")), "b": ("F64", [2], floats(2, "<d")),
         "c": ("BF16", [1], b"\x80\x3f"), "s": ("F32", [], floats(1))}))
    write(ckpt, "whole_empty", b"\4" + safetensors({}))

    def tile(file, key, box):
        return {"file": file, "key": key, "box": box}
    index = {"format": "tofu sharded checkpoint", "version": 1, "generation": 1,
             "metadata": {"steps": "3"},
             "tensors": {"w": {"shape": [4, 6], "tiles": [
                 tile("tiles-1-0.safetensors", "w@0:2,0:6", [[0, 2], [0, 6]]),
                 tile("tiles-1-1.safetensors", "w@2:4,0:6", [[2, 4], [0, 6]])]},
                 "s": {"shape": [], "tiles": [tile("tiles-1-0.safetensors", "s@", [])]}}}
    write(ckpt, "index", b"\1" + json.dumps(index).encode())
    index["tensors"]["w"]["tiles"].reverse()
    write(ckpt, "index_reversed", b"\3" + json.dumps(index).encode())

    texts = {
        0: ["2x8:12.5GB/s,150GB/s", "4:100Gbit/s@5us", "2x2x2:1GB/s@1ms,10GB/s,100GB/s@20ns",
            json.dumps({"levels": [{"name": "node", "count": 2, "bandwidth": "12.5GB/s",
                                    "latency": "5us"}, {"count": 4, "bandwidth": 1.5e11}]})],
        1: ["80GB", "16GiB", "12e9", "512 MiB", "1.5TB"],
        2: ["mlp", "wresnet-50-1-i32-c8-k10", "rnn-2-64", "rnn-10-8K", "gpt-1-64-4-16",
            "gpt-12-768-12-1024"],
        3: ["constant", "step:30:0.1", "step:7", "cosine", "cosine:1000"],
        4: ["0", "42", "-7", "1000000"],
    }
    for kind, values in texts.items():
        for i, text in enumerate(values):
            write(names, "%d_%d" % (kind, i), bytes([kind]) + text.encode())


if __name__ == "__main__":
    main()
