#!/usr/bin/env python3
"""Oracle for furlong's safetensors reader/writer, using the real `safetensors` package.

Expectation files are JSON: {"tensors": {name: {"dtype": "BF16", "shape": [..], "hex": ".."}},
"metadata": {..}}, where "hex" is the tensor's raw little-endian bytes in C order. Comparing
bytes (not values) makes NaN payloads, -0.0 and bf16 rounding exact.

Commands:
  write-fixtures OUT_DIR   OUT_DIR/dtypes.safetensors (save_file, every supported dtype, special
                           values, 0-d and empty tensors, metadata) + OUT_DIR/dtypes.json, and
                           OUT_DIR/dtypes_pt.safetensors (same tensors, metadata format=pt only)
  check FILE EXPECT_JSON   load FILE with safetensors and compare with EXPECT_JSON; also check
                           the layout rules of the reference writer (padding, ordering, tiling)
  write-sharded OUT_DIR    a sharded HF directory written by huggingface_hub's
                           save_torch_state_dict (the transformers save path) + OUT_DIR.json
  check-hf DIR EXPECT_JSON check a HF directory (index, shards, metadata, values)
"""
import json
import os
import struct
import sys

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

DTYPES = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
}
NAME_OF = {v: k for k, v in DTYPES.items()}
# Layout order of the reference writer: descending rank, then name.
RANK = ["BOOL", "U8", "I8", "I16", "F16", "BF16", "I32", "F32", "F64", "I64"]


def tensor_hex(t):
    t = t.contiguous()
    if t.numel() == 0:
        return ""
    return t.view(-1).view(torch.uint8).numpy().tobytes().hex()


def describe(tensors, metadata):
    return {
        "tensors": {
            name: {"dtype": NAME_OF[t.dtype], "shape": list(t.shape), "hex": tensor_hex(t)}
            for name, t in tensors.items()
        },
        "metadata": metadata or {},
    }


def random_tensor(gen, dtype, shape):
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=gen, dtype=torch.float64) * 10).to(dtype)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=gen).to(torch.bool)
    info = torch.iinfo(dtype)
    return torch.randint(info.min, info.max, shape, generator=gen, dtype=torch.int64).to(dtype)


def fixture_tensors():
    gen = torch.Generator().manual_seed(1234)
    tensors = {}
    for i, (name, dtype) in enumerate(DTYPES.items()):
        tensors[f"rand.{name.lower()}"] = random_tensor(gen, dtype, (3, 5 + i))
        tensors[f"scalar.{name.lower()}"] = random_tensor(gen, dtype, ())
        tensors[f"empty.{name.lower()}"] = torch.empty((0, 4), dtype=dtype)
    specials = [float("inf"), float("-inf"), float("nan"), -0.0, 1e-40, 65504.0, 3.0e38, 1.0]
    for dtype in (torch.float64, torch.float32, torch.float16, torch.bfloat16):
        tensors[f"special.{NAME_OF[dtype].lower()}"] = torch.tensor(specials).to(dtype)
    for dtype in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8):
        info = torch.iinfo(dtype)
        tensors[f"extreme.{NAME_OF[dtype].lower()}"] = torch.tensor(
            [info.min, info.max, 0, 1], dtype=dtype)
    # A larger bf16 matrix, like a real weight.
    tensors["model.layers.0.mlp.up_proj.weight"] = random_tensor(gen, torch.bfloat16, (64, 48))
    return tensors


def write_fixtures(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    tensors = fixture_tensors()
    metadata = {"format": "pt", "note": "furlong oracle fixture"}
    save_file(tensors, os.path.join(out_dir, "dtypes.safetensors"), metadata=metadata)
    # The reference writer emits metadata keys in hash-map order, so byte-for-byte comparisons
    # need a single key: this copy carries HF's {"format": "pt"} only.
    save_file(tensors, os.path.join(out_dir, "dtypes_pt.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(out_dir, "dtypes.json"), "w") as f:
        json.dump(describe(tensors, metadata), f)


def check_layout(path):
    """The rules furlong's writer promises: header padded with spaces to 8, tensors laid out in
    descending dtype rank then name, contiguous from 0 to the end of the file."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    assert n % 8 == 0, f"header length {n} is not a multiple of 8"
    text = data[8:8 + n].decode("utf-8")
    assert text.rstrip(" ") == text.strip(), "header padding must be trailing spaces"
    header = json.loads(text)
    entries = [(k, v) for k, v in header.items() if k != "__metadata__"]
    entries.sort(key=lambda kv: kv[1]["data_offsets"][0])
    expected_order = sorted(entries, key=lambda kv: (-RANK.index(kv[1]["dtype"]), kv[0].encode()))
    assert [k for k, _ in entries] == [k for k, _ in expected_order], "tensor order differs"
    pos = 0
    for _, v in entries:
        begin, end = v["data_offsets"]
        assert begin == pos, f"gap or overlap at {begin} (expected {pos})"
        pos = end
    assert 8 + n + pos == len(data), "data does not end at the end of the file"


def compare(actual, expected, where):
    problems = []
    exp_t, act_t = expected["tensors"], actual["tensors"]
    if set(exp_t) != set(act_t):
        problems.append(f"{where}: names differ: missing {sorted(set(exp_t) - set(act_t))}, "
                        f"extra {sorted(set(act_t) - set(exp_t))}")
    for name in sorted(set(exp_t) & set(act_t)):
        for field in ("dtype", "shape", "hex"):
            if exp_t[name][field] != act_t[name][field]:
                problems.append(f"{where}: tensor {name}: {field} differs: "
                                f"{str(act_t[name][field])[:80]} != {str(exp_t[name][field])[:80]}")
    if actual["metadata"] != expected["metadata"]:
        problems.append(f"{where}: metadata {actual['metadata']} != {expected['metadata']}")
    return problems


def check(path, expect_path):
    with open(expect_path) as f:
        expected = json.load(f)
    tensors = load_file(path)
    with safe_open(path, framework="pt") as f:
        metadata = f.metadata() or {}
    problems = compare(describe(tensors, metadata), expected, path)
    check_layout(path)
    return problems


def write_sharded(out_dir):
    from huggingface_hub import save_torch_state_dict

    gen = torch.Generator().manual_seed(99)
    tensors = {"model.embed_tokens.weight": random_tensor(gen, torch.bfloat16, (32, 16))}
    for layer in range(3):
        p = f"model.layers.{layer}."
        tensors[p + "self_attn.q_proj.weight"] = random_tensor(gen, torch.bfloat16, (16, 16))
        tensors[p + "self_attn.q_norm.weight"] = random_tensor(gen, torch.float32, (16,))
        tensors[p + "mlp.down_proj.weight"] = random_tensor(gen, torch.bfloat16, (16, 24))
    tensors["model.norm.weight"] = random_tensor(gen, torch.float32, (16,))
    tensors["rotary.inv_freq"] = random_tensor(gen, torch.float64, (8,))
    os.makedirs(out_dir, exist_ok=True)
    save_torch_state_dict(tensors, out_dir, max_shard_size=1500, metadata={"format": "pt"})
    with open(out_dir.rstrip("/") + ".json", "w") as f:
        json.dump(describe(tensors, {}), f)


def check_hf(directory, expect_path):
    with open(expect_path) as f:
        expected = json.load(f)
    problems = []
    index_path = os.path.join(directory, "model.safetensors.index.json")
    if os.path.exists(index_path):
        with open(index_path) as f:
            index = json.load(f)
        weight_map = index["weight_map"]
        shards = sorted(set(weight_map.values()))
        total = 0
        for shard in shards:
            assert shard.startswith("model-") and f"-of-{len(shards):05d}" in shard, shard
        actual = {}
        for shard in shards:
            path = os.path.join(directory, shard)
            with safe_open(path, framework="pt") as f:
                if (f.metadata() or {}).get("format") != "pt":
                    problems.append(f"{shard}: metadata {f.metadata()} lacks format=pt")
                for name in f.keys():
                    if weight_map.get(name) != shard:
                        problems.append(f"{shard}: {name} is not mapped to this shard")
                    actual[name] = f.get_tensor(name)
                    total += actual[name].numel() * actual[name].element_size()
            check_layout(path)
        if index["metadata"]["total_size"] != total:
            problems.append(f"total_size {index['metadata']['total_size']} != {total}")
    else:
        path = os.path.join(directory, "model.safetensors")
        actual = load_file(path)
        with safe_open(path, framework="pt") as f:
            if (f.metadata() or {}).get("format") != "pt":
                problems.append(f"model.safetensors: metadata {f.metadata()} lacks format=pt")
        check_layout(path)
    problems += compare(describe(actual, {}), {**expected, "metadata": {}}, directory)
    return problems


def main(argv):
    command, args = argv[1], argv[2:]
    if command == "write-fixtures":
        write_fixtures(args[0])
        problems = []
    elif command == "check":
        problems = check(args[0], args[1])
    elif command == "write-sharded":
        write_sharded(args[0])
        problems = []
    elif command == "check-hf":
        problems = check_hf(args[0], args[1])
    else:
        raise SystemExit(f"unknown command {command!r}")
    for p in problems:
        print(p)
    if problems:
        sys.exit(1)
    print("ok")


if __name__ == "__main__":
    main(sys.argv)
