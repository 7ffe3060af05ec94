"""Adversarial cases for model directories (issue 36): nonsense config.json values, NaN / Inf weights, FIFOs and
directories in place of files, and paths that lead out of the directory (index.json shards, mtp1_file, symbolic
links). Each case is a copy of the shipped model with one thing broken, run with `dsinfer generate --prompt`;
the answer must be an error naming the file and the field / tensor / entry, never a hang, a crash or a run.
Standard library only; run(ctx) follows run_adversarial.py's interface."""
import json
import os
import shutil
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cases_cli import expect_error, run_cmd  # noqa: E402


class Models:
    """Copies of the shipped model: one base copy, then per case hard links to it (cheap) with the changed
    files written anew (so the base stays intact)."""

    def __init__(self, ctx):
        self.ctx = ctx
        self.base = os.path.join(ctx["tmp"], "base")
        shutil.copytree(ctx["model"], self.base)
        self.n = 0

    def make(self):
        self.n += 1
        d = os.path.join(self.ctx["tmp"], f"m{self.n}")
        shutil.copytree(self.base, d, copy_function=os.link)
        return d

    def run(self, d, *extra):
        return run_cmd([self.ctx["binary"], "generate", "--model", d, "--prompt", "hi", "--max-tokens", "1", *extra])


def replace(path, data):
    if os.path.lexists(path):
        os.remove(path)  # a hard link: write a new file, never through the link
    with open(path, "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def edit_config(d, **kv):
    p = os.path.join(d, "config.json")
    with open(p) as f:
        j = json.load(f)
    for k, v in kv.items():
        if v is DELETE:
            j.pop(k, None)
        else:
            j[k] = v
    replace(p, json.dumps(j))


DELETE = object()


def poke(path, tensor, index, fmt, value):
    """Writes one element of `tensor` (struct format fmt: "<f" for F32, "B" for a raw byte) into a copy."""
    with open(path, "rb") as f:
        data = bytearray(f.read())
    n = struct.unpack("<Q", data[:8])[0]
    h = json.loads(data[8:8 + n])
    off = 8 + n + h[tensor]["data_offsets"][0] + index * struct.calcsize(fmt)
    struct.pack_into(fmt, data, off, value)
    replace(path, bytes(data))


def config_cases(m):
    res = []
    cfg = "config.json"
    for name, kv, want in [
        ("max_position_embeddings-0", {"max_position_embeddings": 0}, "'max_position_embeddings' must be in [1,"),
        ("max_position_embeddings-negative", {"max_position_embeddings": -4096}, "'max_position_embeddings' must be"),
        ("max_position_embeddings-string", {"max_position_embeddings": "4096"}, "'max_position_embeddings' must be an integer"),
        ("max_position_embeddings-huge", {"max_position_embeddings": 1e30}, "'max_position_embeddings'"),
        ("rms_norm_eps-0", {"rms_norm_eps": 0}, "'rms_norm_eps' must be in (0, 1]"),
        ("rms_norm_eps-negative", {"rms_norm_eps": -1e-6}, "'rms_norm_eps' must be in (0, 1]"),
        ("hc_eps-large", {"hc_eps": 3.5}, "'hc_eps' must be in (0, 1]"),
        ("routed_scaling_factor-0", {"routed_scaling_factor": 0}, "'routed_scaling_factor'"),
        ("swiglu_limit-negative", {"swiglu_limit": -7}, "'swiglu_limit'"),
        ("partial_rotary_factor-2", {"partial_rotary_factor": 2}, "'partial_rotary_factor'"),
        ("vocab_size-0", {"vocab_size": 0}, "'vocab_size'"),
        ("hidden_size-huge", {"hidden_size": 2 ** 40}, "'hidden_size'"),
        ("num_hidden_layers-0", {"num_hidden_layers": 0}, "'num_hidden_layers'"),
        ("rope_theta-1", {"rope_theta": 1}, "'rope_theta' must be in (1, "),
        ("compress_rope_theta-negative", {"compress_rope_theta": -3}, "'compress_rope_theta' must be in (1, "),
        ("experts_per_tok-above-experts", {"num_experts_per_tok": 99}, "num_experts_per_tok"),
        ("eos_token_id-outside-vocab", {"eos_token_id": 10 ** 9}, "'eos_token_id'"),
        ("layer_types-short", {"layer_types": ["sliding_attention"]}, "'layer_types'"),
        ("hidden_size-missing", {"hidden_size": DELETE}, "'hidden_size'"),
        ("model_type-wrong", {"model_type": "llama"}, "model_type"),
    ]:
        d = m.make()
        edit_config(d, **kv)
        res.append(expect_error(f"config:{name}", m.run(d), [os.path.join(d, cfg), want]))
    for name, text, want in [("not-json", "{oops", "not valid JSON"), ("empty", "", "not valid JSON"),
                             ("array", "[]", "top level must be a JSON object"),
                             ("deep", "[" * 100000, "nested deeper")]:
        d = m.make()
        replace(os.path.join(d, cfg), text)
        res.append(expect_error(f"config:{name}", m.run(d), [os.path.join(d, cfg), want]))
    res.append(expect_error("config:max_model_len-above-limit", m.run(m.base, "--max-model-len", "999999"),
                            ["exceeds the model's max_position_embeddings"]))
    return res


def weight_cases(m):
    res = []
    st = "model.safetensors"
    for name, tensor, index, fmt, value in [
        ("nan-routing-bias", "layers.2.ffn.gate.bias", 3, "<f", float("nan")),
        ("inf-routing-bias", "layers.2.ffn.gate.bias", 0, "<f", float("inf")),
        ("nan-hc-scale", "layers.0.hc_attn_scale", 1, "<f", float("nan")),
        ("neg-inf-head-scale", "hc_head_scale", 0, "<f", float("-inf")),
    ]:
        d = m.make()
        poke(os.path.join(d, st), tensor, index, fmt, value)
        res.append(expect_error(f"weights:{name}", m.run(d), [f"tensor '{tensor}'", f"element {index} is not a finite"]))
    # An E8M0 block scale of 0xFF (NaN): the first F8_E8M0 tensor of the checkpoint.
    d = m.make()
    with open(os.path.join(d, st), "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
    e8 = sorted(k for k, v in h.items() if k != "__metadata__" and v["dtype"] == "F8_E8M0")[0]
    poke(os.path.join(d, st), e8, 0, "B", 0xFF)
    res.append(expect_error("weights:nan-e8m0-scale", m.run(d), [f"tensor '{e8}'", "not a finite"]))
    size = os.path.getsize(os.path.join(m.base, st))
    with open(os.path.join(m.base, st), "rb") as f:
        head = f.read(4096)
    for name, data, want in [("truncated", head, "truncated"), ("empty", b"", "truncated"),
                             ("huge-header-length", struct.pack("<Q", 2 ** 62) + head[8:], "exceeds file size"),
                             ("header-not-json", struct.pack("<Q", 4) + b"{{{{", "not valid JSON")]:
        d = m.make()
        replace(os.path.join(d, st), data)
        res.append(expect_error(f"weights:{name}", m.run(d), [st, want]))
    assert size > 4096
    return res


def special_file_cases(m):
    res = []
    for f in ["model.safetensors", "config.json", "tokenizer.json", "chat_defaults.json", "model.safetensors.index.json"]:
        for kind in ("fifo", "dir"):
            d = m.make()
            p = os.path.join(d, f)
            if os.path.exists(p):
                os.remove(p)
            if kind == "fifo":
                os.mkfifo(p)
            else:
                os.makedirs(p)
            want = "is a FIFO" if kind == "fifo" else "is a directory"
            res.append(expect_error(f"special:{f}-{kind}", m.run(d), [p, want]))
    d = m.make()
    p = os.path.join(d, "mtp1", "model.safetensors")
    os.remove(p)
    os.mkfifo(p)
    res.append(expect_error("special:mtp1-fifo", m.run(d, "--speculative", "mtp1"), [p, "is a FIFO"]))
    return res


def path_cases(m):
    res = []
    outside = os.path.join(m.ctx["tmp"], "outside.safetensors")
    shutil.copy(os.path.join(m.base, "model.safetensors"), outside)
    for name, entry, want in [("dotdot", "../outside.safetensors", 'has a ".." component'),
                              ("dotdot-inner", "mtp1/../../outside.safetensors", 'has a ".." component'),
                              ("absolute", outside, "is an absolute path"), ("etc-passwd", "/etc/passwd", "is an absolute path"),
                              ("empty", "", "is empty"), ("symlink-out", "link.safetensors", "leads outside the model directory"),
                              ("dir-symlink-out", "linkdir/outside.safetensors", "leads outside the model directory")]:
        d = m.make()
        os.rename(os.path.join(d, "model.safetensors"), os.path.join(d, "shard.safetensors"))
        os.symlink(outside, os.path.join(d, "link.safetensors"))
        os.symlink(m.ctx["tmp"], os.path.join(d, "linkdir"))
        idx = {"weight_map": {"embed.weight": "shard.safetensors", "norm.weight": entry}}
        replace(os.path.join(d, "model.safetensors.index.json"), json.dumps(idx))
        res.append(expect_error(f"paths:index-{name}", m.run(d), [f'weight_map shard = "{entry}"', want]))
    d = m.make()
    replace(os.path.join(d, "model.safetensors.index.json"), json.dumps({"weight_map": {"embed.weight": 5}}))
    res.append(expect_error("paths:index-non-string", m.run(d), ["is not a file name"]))
    d = m.make()
    os.remove(os.path.join(d, "model.safetensors"))
    os.symlink(outside, os.path.join(d, "model.safetensors"))
    res.append(expect_error("paths:weights-symlink-out", m.run(d), ['"model.safetensors"', "leads outside"]))
    d = m.make()
    os.remove(os.path.join(d, "model.safetensors"))
    os.symlink("/etc/passwd", os.path.join(d, "model.safetensors"))
    res.append(expect_error("paths:weights-symlink-etc-passwd", m.run(d), ['"model.safetensors"', "leads outside"]))
    for name, entry, want in [("dotdot", "../../../../etc/passwd", 'has a ".." component'),
                              ("absolute", "/etc/passwd", "is an absolute path"),
                              ("non-string", 7, "'mtp1_file' must be a file name"),
                              ("missing", "mtp1/nope.safetensors", "not found")]:
        d = m.make()
        edit_config(d, mtp1_file=entry)
        res.append(expect_error(f"paths:mtp1_file-{name}", m.run(d, "--speculative", "mtp1"), ["config.json", want]))
    return res


def run(ctx):
    m = Models(ctx)
    return config_cases(m) + weight_cases(m) + special_file_cases(m) + path_cases(m)
