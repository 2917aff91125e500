"""Writes the seed corpora of the checkpoint, data and names fuzzers (tests/fuzz/seeds/):
inputs each reader accepts, so that the fuzzers start from the formats' structure.

    python3 tools/make_fuzz_seeds.py [OUT_DIR]   (default tests/fuzz/seeds)

The checkpoint fuzzer's first byte chooses the file: even, a whole checkpoint's
model.safetensors; odd, a sharded checkpoint's index.json beside the tile files the harness
writes (tests/fuzz/checkpoint_fuzz_target.cc). The names fuzzer's first byte chooses the
reader (0 topology, 1 bytes, 2 zoo name, 3 schedule, 4 integer). The data fuzzer's first
byte chooses the format (0 IDX, 1 .npy, 2 TensorProto, 3 gzipped IDX, 4 safetensors).
"""
import gzip
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


def idx(type_code, shape, body):
    return bytes([0, 0, type_code, len(shape)]) + b"".join(struct.pack(">I", d) for d in shape) + body


def npy(descr, shape, body):
    header = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (
        descr, "".join("%d, " % d for d in shape))
    header += " " * (63 - (10 + len(header)) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + body


def varint(n):
    out = b""
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out += bytes([byte | 0x80])
        else:
            return out + bytes([byte])


def tensor_proto(dims, data_type, raw):
    """onnx.TensorProto: dims (field 1), data_type (2), raw_data (9)."""
    out = b"".join(b"\x08" + varint(d) for d in dims) + b"\x10" + varint(data_type)
    return out + b"\x4a" + varint(len(raw)) + raw


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

    data = os.path.join(out, "data")
    os.makedirs(data, exist_ok=True)
    images = idx(0x08, [3, 2, 2], bytes(range(12)))
    write(data, "idx_images", b"\0" + images)
    write(data, "idx_labels", b"\0" + idx(0x08, [3], bytes([1, 2, 3])))
    write(data, "idx_float", b"\0" + idx(0x0D, [2, 2], struct.pack(">4f", 1, 2, 3, 4)))
    write(data, "npy_f4", b"\1" + npy("<f4", [2, 3], floats(6)))
    write(data, "npy_i8", b"\1" + npy("<i8", [4], struct.pack("<4q", 1, -2, 3, 4)))
    write(data, "npy_u1", b"\1" + npy("|u1", [2, 2], bytes([0, 1, 2, 255])))
    write(data, "pb_float", b"\2" + tensor_proto([2, 2], 1, floats(4)))
    write(data, "pb_int64", b"\2" + tensor_proto([3], 7, struct.pack("<3q", 5, 6, 7)))
    write(data, "gz_images", b"\3" + gzip.compress(images, mtime=0))
    write(data, "safetensors", b"\4" + safetensors(
        {"images": ("U8", [3, 2, 2], bytes(range(12))), "labels": ("I64", [3], struct.pack("<3q", 0, 1, 2))}))

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
