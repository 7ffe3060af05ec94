#!/usr/bin/env python3
"""Checks a retrained export against the model it started from (tools/train/retrain_drafters.sh step 5):

    python3 tools/train/verify_export.py --base models/dsv4-small --new OUT/model [--out verify.json]

- model.safetensors: the same tensor names; every non-mtp.* (target) tensor has the same dtype, shape and SHA-256 of
  its stored bytes; every mtp.* tensor the same dtype and shape (the engine's loader expects them);
- mtp1/model.safetensors: the same names, dtypes and shapes;
- config.json: equal except dspark_sts_temperatures / dspark_sts_temperatures_greedy;
- tokenizer.json, tokenizer_config.json, generation_config.json, reference.safetensors: byte-identical files.
Reads the safetensors headers directly (no torch); exits 1 on any difference, printing it.
"""
import argparse, hashlib, json, os, struct, sys


def tensors(path):
    """name -> (dtype, shape, sha256 of the stored bytes)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        base = 8 + n
        out = {}
        for name, m in header.items():
            if name == "__metadata__":
                continue
            b, e = m["data_offsets"]
            f.seek(base + b)
            out[name] = (m["dtype"], tuple(m["shape"]), hashlib.sha256(f.read(e - b)).hexdigest())
        return out


def file_hash(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True)
    ap.add_argument("--new", required=True)
    ap.add_argument("--out")
    a = ap.parse_args()
    errors, res = [], {}
    b, n = tensors(os.path.join(a.base, "model.safetensors")), tensors(os.path.join(a.new, "model.safetensors"))
    if set(b) != set(n):
        errors.append(f"model.safetensors names differ: only base {sorted(set(b) - set(n))[:5]}, "
                      f"only new {sorted(set(n) - set(b))[:5]}")
    target = [k for k in b if not k.startswith("mtp.")]
    same_target = [k for k in target if k in n and n[k] == b[k]]
    errors += [f"target tensor {k} differs: {b[k]} vs {n.get(k)}" for k in target if k not in same_target]
    mtp = [k for k in b if k.startswith("mtp.")]
    errors += [f"{k}: dtype/shape {b[k][:2]} -> {n[k][:2]}" for k in mtp if k in n and n[k][:2] != b[k][:2]]
    res["target_tensors_byte_identical"] = f"{len(same_target)}/{len(target)}"
    res["dspark_tensors_changed"] = f"{sum(k in n and n[k][2] != b[k][2] for k in mtp)}/{len(mtp)}"
    bm = tensors(os.path.join(a.base, "mtp1", "model.safetensors"))
    nm = tensors(os.path.join(a.new, "mtp1", "model.safetensors"))
    if {k: v[:2] for k, v in bm.items()} != {k: v[:2] for k, v in nm.items()}:
        errors.append("mtp1/model.safetensors: names, dtypes or shapes differ")
    res["mtp1_tensors_changed"] = f"{sum(k in nm and nm[k][2] != v[2] for k, v in bm.items())}/{len(bm)}"
    cb = json.load(open(os.path.join(a.base, "config.json")))
    cn = json.load(open(os.path.join(a.new, "config.json")))
    temps = ("dspark_sts_temperatures", "dspark_sts_temperatures_greedy")
    diff = sorted(k for k in set(cb) | set(cn) if k not in temps and cb.get(k) != cn.get(k))
    if diff:
        errors.append(f"config.json differs beyond the STS temperatures: {diff}")
    for fn in ("tokenizer.json", "tokenizer_config.json", "generation_config.json", "reference.safetensors"):
        if os.path.exists(os.path.join(a.base, fn)) and (
                not os.path.exists(os.path.join(a.new, fn))
                or file_hash(os.path.join(a.base, fn)) != file_hash(os.path.join(a.new, fn))):
            errors.append(f"{fn} is not byte-identical")
    res["errors"] = errors
    print(json.dumps(res, indent=1))
    if a.out:
        json.dump(res, open(a.out, "w"), indent=1)
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()
