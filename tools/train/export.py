#!/usr/bin/env python3
"""Steps 3 and 6 of tools/train/run_all.sh.

    python3 tools/train/export.py quantize-target --work W
    python3 tools/train/export.py finalize --work W --out OUT_DIR [--base-model MODEL_DIR]

quantize-target: target_hf (fp32, trained) -> official tensors (FP8 e4m3 128x128 with E8M0 scales for attention and
shared-expert projections, FP4 e2m1 routed experts with one E8M0 scale per 32 inputs, BF16 norms / embeddings / head
/ gates / compressors, F32 mHC / sinks / ape / router bias, I64 tid2eid) in work/target_official.safetensors, and the
dequantized values loaded back through transformers' checkpoint conversion into work/target_deq (fp32) -- the model
the drafters are trained against and measured on, and whose logits are the reference.

finalize: quantizes the drafters (work/drafters.pt) the same way (mtp.* names, see docs/small_model.md), writes
OUT_DIR/model/{model.safetensors, mtp1/model.safetensors, config.json, generation_config.json, tokenizer.json,
tokenizer_config.json, reference.safetensors} and OUT_DIR/model.tar. The reference is transformers in fp32, with the
stable-topk patch, on exactly the dequantized exported weights (gen_fixtures.reference: one full forward per prompt
plus 8 greedy tokens by full forwards).
"""
import argparse, json, os, shutil, sys, tarfile
import torch
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import arch  # noqa: E402
import transformers  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402


def quantize_target(a):
    tgt = os.path.join(a.work, "target_hf")
    hf = load_file(os.path.join(tgt, "model.safetensors"))
    official, deq = {}, {}
    for name, t in hf.items():
        s, d = arch.quantize_official(arch.gf.official_name(name), t)
        official.update(s)
        deq[name] = d.float().contiguous() if d.dtype.is_floating_point else d.contiguous()
    save_file({k: v.contiguous() for k, v in official.items()}, os.path.join(a.work, "target_official.safetensors"))
    out = os.path.join(a.work, "target_deq")
    if os.path.exists(out):
        shutil.rmtree(out)
    shutil.copytree(tgt, out)
    save_file(deq, os.path.join(out, "model.safetensors"))
    m = transformers.DeepseekV4ForCausalLM.from_pretrained(out, dtype=torch.float32)  # load check
    print("quantized target:", len(official), "tensors;", sum(p.numel() for p in m.parameters()), "parameters")


def drafter_tensors(work):
    """Quantized official mtp.* tensors of both drafters; also returns the drafters with dequantized weights."""
    info = json.load(open(os.path.join(work, "data.json")))
    tcfg = arch.target_config(info["vocab_size"])
    ck = torch.load(os.path.join(work, "drafters.pt"), weights_only=False)
    ds = arch.DSpark(tcfg, ck["dspark_args"]["target_layer_ids"], ck["dspark_args"]["noise_id"])
    ds.load_state_dict(ck["dspark"])
    mtp = arch.MTP1(tcfg)
    mtp.load_state_dict(ck["mtp"])
    tmp = os.path.join(work, "tmp_roundtrip")
    D = arch.DSPARK["layers"]
    dsp = arch.roundtrip_core(ds.core, ds.cfg_kwargs, tmp, "mtp.")
    last = f"mtp.{D - 1}."
    extra = {"mtp.0.main_proj.weight": ds.main_proj.weight, "mtp.0.main_norm.weight": ds.main_norm.weight,
             last + "markov_head.embed.weight": ds.markov_embed.weight,
             last + "markov_head.head.weight": ds.markov_head.weight,
             last + "confidence_head.weight": ds.confidence.weight, last + "confidence_head.bias": ds.confidence.bias}
    with torch.no_grad():
        for n, p in extra.items():
            s, d = arch.quantize_official(n, p.detach())
            dsp.update(s)
            p.copy_(d)
    m1 = arch.roundtrip_core(mtp.core, mtp.cfg_kwargs, tmp, "mtp.")
    extra = {"mtp.0.e_proj.weight": mtp.e_proj.weight, "mtp.0.h_proj.weight": mtp.h_proj.weight,
             "mtp.0.enorm.weight": mtp.enorm.weight, "mtp.0.hnorm.weight": mtp.hnorm.weight}
    with torch.no_grad():
        for n, p in extra.items():
            s, d = arch.quantize_official(n, p.detach())
            m1.update(s)
            p.copy_(d)
    shutil.rmtree(tmp, ignore_errors=True)
    return dsp, m1, ds, mtp, ck


def official_config(tcfg, info, dspark_extra):
    L = tcfg["num_hidden_layers"]
    rates = {arch.SLIDING: 0, **tcfg["compress_rates"]}
    D = arch.DSPARK["layers"]
    comp = tcfg["rope_parameters"]["compress"]
    cfg = {
        "architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4",
        "vocab_size": tcfg["vocab_size"], "hidden_size": tcfg["hidden_size"], "num_hidden_layers": L,
        "num_attention_heads": tcfg["num_attention_heads"], "num_key_value_heads": 1, "head_dim": tcfg["head_dim"],
        "qk_rope_head_dim": tcfg["qk_rope_head_dim"], "q_lora_rank": tcfg["q_lora_rank"],
        "o_groups": tcfg["o_groups"], "o_lora_rank": tcfg["o_lora_rank"], "sliding_window": tcfg["sliding_window"],
        "compress_ratios": [rates[t] for t in tcfg["layer_types"]] + [0] * D,
        "num_hash_layers": tcfg["mlp_layer_types"].count("hash_moe"),
        "index_n_heads": tcfg["index_n_heads"], "index_head_dim": tcfg["index_head_dim"],
        "index_topk": tcfg["index_topk"], "n_routed_experts": tcfg["n_routed_experts"],
        "num_experts_per_tok": tcfg["num_experts_per_tok"], "n_shared_experts": 1,
        "moe_intermediate_size": tcfg["moe_intermediate_size"], "scoring_func": "sqrtsoftplus",
        "topk_method": "noaux_tc", "routed_scaling_factor": tcfg["routed_scaling_factor"], "norm_topk_prob": True,
        "swiglu_limit": tcfg["swiglu_limit"], "hidden_act": "silu", "hc_mult": tcfg["hc_mult"],
        "hc_sinkhorn_iters": tcfg["hc_sinkhorn_iters"], "hc_eps": tcfg["hc_eps"], "rms_norm_eps": tcfg["rms_norm_eps"],
        "rope_theta": tcfg["rope_theta"], "compress_rope_theta": comp["rope_theta"],
        "rope_scaling": {"type": "yarn", "factor": comp["factor"],
                         "original_max_position_embeddings": comp["original_max_position_embeddings"],
                         "beta_fast": comp["beta_fast"], "beta_slow": comp["beta_slow"]},
        "max_position_embeddings": tcfg["max_position_embeddings"], "num_nextn_predict_layers": D,
        "tie_word_embeddings": False, "bos_token_id": 0, "eos_token_id": 1, "torch_dtype": "bfloat16",
        "expert_dtype": "fp4",
        "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                "scale_fmt": "ue8m0", "weight_block_size": [128, 128]},
    }
    cfg.update(dspark_extra)
    return cfg


def finalize_retrained(a, dsp, m1):
    """--base-model: OUT/model/ = the base model with only the drafters replaced: its target tensors (read back from
    its model.safetensors, so their bytes are unchanged), the new mtp.* tensors, the new mtp1 file, its config.json
    with only the STS temperatures updated; tokenizer, generation config and reference.safetensors copied (the
    target did not change, so neither did its reference logits)."""
    base = a.base_model
    model_dir = os.path.join(a.out, "model")
    if os.path.exists(model_dir):
        shutil.rmtree(model_dir)
    os.makedirs(os.path.join(model_dir, "mtp1"))
    main = {k: v for k, v in load_file(os.path.join(base, "model.safetensors")).items() if not k.startswith("mtp.")}
    assert not (set(main) & set(dsp))
    save_file({**main, **dsp}, os.path.join(model_dir, "model.safetensors"),
              metadata={"format": "pt", "mtp": "DSpark drafter (docs/small_model.md), retrained by distillation"})
    save_file(m1, os.path.join(model_dir, "mtp1", "model.safetensors"),
              metadata={"format": "pt", "mtp": "MTP-1 baseline, retrained by distillation"})
    cal = json.load(open(os.path.join(a.work, "calibration.json")))
    cfg = json.load(open(os.path.join(base, "config.json")))
    cfg["dspark_sts_temperatures"] = cal["sample"]["temperatures"]
    cfg["dspark_sts_temperatures_greedy"] = cal["greedy"]["temperatures"]
    with open(os.path.join(model_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    for fn in ("generation_config.json", "tokenizer.json", "tokenizer_config.json", "reference.safetensors"):
        if os.path.exists(os.path.join(base, fn)):
            shutil.copyfile(os.path.join(base, fn), os.path.join(model_dir, fn))
    sizes = {os.path.relpath(os.path.join(dp, fn), model_dir): os.path.getsize(os.path.join(dp, fn))
             for dp, _, fns in os.walk(model_dir) for fn in sorted(fns)}
    json.dump({"sizes": sizes, "base_model": base}, open(os.path.join(a.work, "export.json"), "w"), indent=1)
    print(json.dumps(sizes, indent=1))


def finalize(a):
    if a.base_model:
        dsp, m1, _, _, _ = drafter_tensors(a.work)
        return finalize_retrained(a, dsp, m1)
    info = json.load(open(os.path.join(a.work, "data.json")))
    tcfg = arch.target_config(info["vocab_size"])
    dsp, m1, ds, mtp, ck = drafter_tensors(a.work)
    cal = json.load(open(os.path.join(a.work, "calibration.json")))
    model_dir = os.path.join(a.out, "model")
    if os.path.exists(model_dir):
        shutil.rmtree(model_dir)
    os.makedirs(model_dir)
    main = load_file(os.path.join(a.work, "target_official.safetensors"))
    assert not (set(main) & set(dsp))
    save_file({**main, **dsp}, os.path.join(model_dir, "model.safetensors"),
              metadata={"format": "pt", "mtp": "DSpark drafter (docs/small_model.md)"})
    os.makedirs(os.path.join(model_dir, "mtp1"))  # a second top-level .safetensors would read as a shard
    save_file(m1, os.path.join(model_dir, "mtp1", "model.safetensors"),
              metadata={"format": "pt", "mtp": "MTP-1 baseline"})
    extra = {"dspark_block_size": ds.block, "dspark_markov_rank": ds.rank,
             "dspark_target_layer_ids": ds.target_layer_ids, "dspark_noise_token_id": ds.noise_id,
             "dspark_n_routed_experts": tcfg["n_routed_experts"], "dspark_num_experts_per_tok":
             tcfg["num_experts_per_tok"], "dspark_sliding_window": ds.window,
             "dspark_target_hidden": "mean_of_hc_streams",
             "dspark_sts_temperatures": cal["sample"]["temperatures"],
             "dspark_sts_temperatures_greedy": cal["greedy"]["temperatures"],
             "mtp1_file": "mtp1/model.safetensors"}
    with open(os.path.join(model_dir, "config.json"), "w") as f:
        json.dump(official_config(tcfg, info, extra), f, indent=2)
    with open(os.path.join(model_dir, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": 0, "eos_token_id": 1, "do_sample": True, "temperature": 1.0, "top_p": 1.0}, f,
                  indent=2)
    for fn in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(a.work, fn), os.path.join(model_dir, fn))
    # Reference logits: transformers fp32 on the dequantized exported weights (target_deq).
    deq = transformers.DeepseekV4ForCausalLM.from_pretrained(os.path.join(a.work, "target_deq"),
                                                             dtype=torch.float32).eval()
    tok = Tokenizer.from_file(os.path.join(a.work, "tokenizer.json"))
    texts = json.load(open(os.path.join(a.work, "prompts_ref.json"), encoding="utf-8"))
    lengths = [1, 6, 17, 40, 64]
    prompts = []
    for i, n in enumerate(lengths):
        ids = [0] + tok.encode(texts[i % max(1, len(texts))] if texts else "def main():\n").ids
        while len(ids) < n:  # a short snippet is extended with the next one
            ids += tok.encode(texts[(i + len(ids)) % len(texts)]).ids
        prompts.append(ids[:n])
    save_file(arch.gf.reference(deq, prompts, 8), os.path.join(model_dir, "reference.safetensors"),
              metadata=arch.gf.REFERENCE_METADATA)
    sizes = {os.path.relpath(os.path.join(dp, fn), model_dir): os.path.getsize(os.path.join(dp, fn))
             for dp, _, fns in os.walk(model_dir) for fn in sorted(fns)}
    with tarfile.open(os.path.join(a.out, "model.tar"), "w") as t:
        t.add(model_dir, arcname="model")
    sizes["model.tar"] = os.path.getsize(os.path.join(a.out, "model.tar"))
    json.dump({"sizes": sizes, "reference_prompt_lengths": lengths}, open(os.path.join(a.work, "export.json"), "w"),
              indent=1)
    print(json.dumps(sizes, indent=1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["quantize-target", "finalize"])
    ap.add_argument("--work", required=True)
    ap.add_argument("--out")
    ap.add_argument("--base-model", help="finalize: replace only the drafters of this model (retrain_drafters.sh)")
    a = ap.parse_args()
    quantize_target(a) if a.what == "quantize-target" else finalize(a)


if __name__ == "__main__":
    main()
