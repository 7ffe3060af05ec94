#!/usr/bin/env python3
"""Copy of a DeepSeek-V4 model folder whose routed experts are FP8_BLOCK instead of FP4 (issue 30).

The CUTLASS grouped MoE path (MoePath::CutlassFp8) serves FP8_BLOCK experts only, and the shipped small model
(models/dsv4-small) has FP4 experts (e2m1 codes, one UE8M0 scale per 32 k), so the fidelity gate needs a copy with the
same expert values stored as e4m3 codes with one UE8M0 scale per 128 x 128 block (config expert_dtype "fp8").
Conversion: the block scale is 2^(s_max - 6) where s_max is the block's largest 32-group exponent (6 * 2^6 = 384 <=
448, e4m3's largest value); each group then holds e2m1 * 2^(s_g - s_max + 6), exact in e4m3 down to
s_g >= s_max - 14 (0.5 * 2^-8 = 2^-9, e4m3's smallest subnormal); smaller groups are rounded to the nearest e4m3
(counted and printed). Pure Python (no numpy): each group of 16 code bytes is mapped by two bytes.translate tables
(low and high nibbles) chosen by the group's exponent shift, so the 5.5 M expert values of dsv4-small take ~1 s.

Usage: fp8_experts_model.py SRC_DIR DST_DIR   (copies every other file of SRC_DIR unchanged)
"""
import json
import os
import shutil
import struct
import sys

E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def e4m3_value(code):
    s = -1.0 if code & 0x80 else 1.0
    e = (code >> 3) & 0xF
    m = code & 0x7
    if e == 0:
        return s * m / 8.0 * 2.0 ** -6
    return s * (1.0 + m / 8.0) * 2.0 ** (e - 7)


POS = [(e4m3_value(c), c) for c in range(0x7F)]  # 0x7F is NaN


def e4m3_encode(x):
    """Nearest e4m3 code of x (ties to the even code), saturating at 448."""
    mag = min(abs(x), 448.0)
    best = min(POS, key=lambda vc: (abs(vc[0] - mag), vc[1] & 1))
    code = best[1]
    return code | (0x80 if x < 0 and code else 0)


_tables = {}


def nibble_tables(shift):
    """bytes.translate tables mapping a packed FP4 byte to the e4m3 code of its low / high nibble times 2^shift."""
    if shift not in _tables:
        codes = []
        inexact = 0
        for n in range(16):
            v = E2M1[n & 7] * 2.0 ** shift * (-1.0 if n & 8 else 1.0)
            c = e4m3_encode(v)
            inexact += e4m3_value(c) != v
            codes.append(c)
        lo = bytes(codes[b & 0xF] for b in range(256))
        hi = bytes(codes[b >> 4] for b in range(256))
        _tables[shift] = (lo, hi, inexact > 0)
    return _tables[shift]


def convert(codes, scales, rows, cols):
    """FP4 codes [rows, cols / 2] + E8M0 [rows, cols / 32] -> e4m3 [rows, cols] + E8M0 [rows / 128, cols / 128]."""
    kb, gb = cols // 128, cols // 32
    block_scale = bytearray((rows // 128) * kb)
    for br in range(rows // 128):
        for bk in range(kb):
            s_max = max(scales[r * gb + g] for r in range(br * 128, br * 128 + 128) for g in range(bk * 4, bk * 4 + 4))
            block_scale[br * kb + bk] = max(s_max - 6, 0)
    out = bytearray(rows * cols)
    inexact_groups = 0
    for r in range(rows):
        for g in range(gb):
            S = block_scale[(r // 128) * kb + g // 4]
            lo, hi, inexact = nibble_tables(scales[r * gb + g] - S)
            inexact_groups += inexact
            src = codes[r * (cols // 2) + g * 16: r * (cols // 2) + g * 16 + 16]
            at = r * cols + g * 32
            out[at: at + 32: 2] = src.translate(lo)
            out[at + 1: at + 32: 2] = src.translate(hi)
    return bytes(out), bytes(block_scale), inexact_groups


def main():
    src, dst = sys.argv[1], sys.argv[2]
    os.makedirs(dst, exist_ok=True)
    for name in os.listdir(src):
        if name in ("model.safetensors", "config.json"):
            continue
        p = os.path.join(src, name)
        (shutil.copytree if os.path.isdir(p) else shutil.copy)(p, os.path.join(dst, name))
    cfg = json.load(open(os.path.join(src, "config.json")))
    if cfg.get("expert_dtype") != "fp4":
        sys.exit(f"{src}: expert_dtype is {cfg.get('expert_dtype')!r}, expected 'fp4'")
    cfg["expert_dtype"] = "fp8"
    bs = cfg.get("quantization_config", {}).get("weight_block_size")
    if bs != [128, 128]:
        sys.exit(f"{src}: weight_block_size {bs}, expected [128, 128]")
    json.dump(cfg, open(os.path.join(dst, "config.json"), "w"), indent=2)

    with open(os.path.join(src, "model.safetensors"), "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        blob = f.read()
    meta = header.pop("__metadata__", None)
    tensors = {}
    for name, h in header.items():
        a, b = h["data_offsets"]
        tensors[name] = (h["dtype"], h["shape"], blob[a:b])
    converted = inexact = 0
    for name in list(tensors):
        if ".experts." not in name or not name.endswith(".weight") or tensors[name][0] != "I8":
            continue
        base = name[: -len(".weight")]
        _, shape, codes = tensors[name]
        sdt, sshape, scales = tensors[base + ".scale"]
        rows, cols = shape[0], shape[1] * 2
        if sdt != "F8_E8M0" or sshape != [rows, cols // 32] or rows % 128 or cols % 128:
            sys.exit(f"{name}: unexpected FP4 layout {shape} / {sdt} {sshape}")
        q, s, bad = convert(codes, scales, rows, cols)
        tensors[name] = ("F8_E4M3", [rows, cols], q)
        tensors[base + ".scale"] = ("F8_E8M0", [rows // 128, cols // 128], s)
        converted += 1
        inexact += bad
    out_header, parts, at = {}, [], 0
    if meta is not None:
        out_header["__metadata__"] = meta
    for name, (dt, shape, data) in tensors.items():
        out_header[name] = {"dtype": dt, "shape": shape, "data_offsets": [at, at + len(data)]}
        parts.append(data)
        at += len(data)
    hb = json.dumps(out_header, separators=(",", ":")).encode()
    hb += b" " * (-len(hb) % 8)
    with open(os.path.join(dst, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for p in parts:
            f.write(p)
    print(f"{converted} expert weights converted to FP8_BLOCK; {inexact} groups of 32 rounded (not exact in e4m3)")


if __name__ == "__main__":
    main()
