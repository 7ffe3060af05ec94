#!/usr/bin/env python3
"""Step 7 of tools/train/run_all.sh: OUT_DIR/report.json, report.md and train_log.txt from the step outputs.

    python3 tools/train/report.py --work OUT_DIR/work --out OUT_DIR
"""
import argparse, json, os, shutil


def fmt(v):
    return " ".join(f"{x:.3f}" for x in v)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    j = lambda n: json.load(open(os.path.join(a.work, n), encoding="utf-8"))
    ev, data, exp = j("eval.json"), j("data.json"), j("export.json")
    ri = os.path.join(a.out, "run_info.txt")
    ri = ri if os.path.exists(ri) else os.path.join(a.work, "run_info.txt")
    rep = {"data": data, "export": exp, **ev, "run_info": open(ri).read().strip().splitlines()}
    retrain = os.path.exists(os.path.join(a.work, "generate.json"))
    if retrain:
        rep["distillation_data"] = j("generate.json")
        rep["verify_export"] = j("verify.json")
    with open(os.path.join(a.out, "report.json"), "w", encoding="utf-8") as f:
        json.dump(rep, f, indent=1, ensure_ascii=False)
    with open(os.path.join(a.out, "train_log.txt"), "w") as f:
        if os.path.exists(os.path.join(a.work, "train_log.txt")):
            f.write(open(os.path.join(a.work, "train_log.txt")).read())
        f.write("\n# drafters (DSpark + MTP-1 trained together" + (", retrained by distillation" if retrain else "")
                + ")\n")
        f.write(open(os.path.join(a.work, "drafter_log.txt")).read())
    p, tt = ev["params"], ev["target_training"]
    L = [f"# Small DeepSeek-V4 + DSpark: run report" + (" (drafters retrained)" if retrain else ""), "",
         "Run: " + "; ".join(rep["run_info"]), "",
         "## Data and tokenizer",
         f"- corpus: {data['train_docs']} training files ({data['train_chars']:,} chars), {data['heldout_docs']} "
         f"held-out files; roots {data['corpus_roots']}"]
    if retrain:
        L += retrain_lines(rep)
    else:
        L += [f"- tokenizer: byte-level BPE, vocab {data['vocab_size']} (incl. DeepSeek-V4 special tokens), "
              f"{data['chars_per_token_train']:.2f} chars/token; train {data['train_tokens']:,} tokens, held-out "
              f"{data['val_tokens']:,}"]
    L += ["",
         "## Target" + (" (unchanged; training numbers from the shipped report)" if retrain else ""),
         f"- parameters: {p['target']:,} total, {p['target_active_per_token']:,} active per token",
         f"- training: {tt['steps']} steps, {tt['tokens']:,} tokens, {tt['seconds']:.0f} s, batch {tt['batch']} x "
         f"{tt['seq']}, stopped by {tt['stopped']}",
         f"- held-out perplexity: {ev['heldout']['perplexity']:.3f} (loss {ev['heldout']['loss']:.4f}, "
         f"{ev['heldout']['tokens']:,} tokens, fp32, exported weights); trained fp32 weights under bf16 autocast: "
         f"{tt['heldout_perplexity_fp32_trained_weights_bf16_autocast']:.3f}", "",
         "## Drafters",
         f"- DSpark: {p['dspark']:,} parameters (excl. the shared embedding / head); MTP-1: {p['mtp1']:,}; "
         f"{ev['drafter_training']['steps']} joint training steps in {ev['drafter_training']['seconds']:.0f} s",
         f"- {ev['n_prompts']['eval']} held-out evaluation prompts ({ev['n_prompts']['calib']} calibration prompts), "
         f"prompt {ev['prompt_len']} tokens, {ev['new_tokens']} new tokens", ""]
    for m, title in (("greedy", "greedy"), ("sample", "temperature 1.0")):
        r = ev[m]
        d, t = r["dspark_block5"], r["mtp1"]
        c = r["confidence_ece_cumulative_prefix_survival"]
        L += [f"### {title}", "",
              "| drafter | mean accepted length | acceptance per position (conditional) | prefix survival | rounds |",
              "|---|---|---|---|---|",
              f"| DSpark block 5 | {d['mean_accepted_length']:.3f} | {fmt(d['acceptance_per_position'])} | "
              f"{fmt(d['prefix_survival_per_position'])} | {d['rounds']} |",
              f"| MTP-1 | {t['mean_accepted_length']:.3f} | {fmt(t['acceptance_per_position'])} | "
              f"{fmt(t['prefix_survival_per_position'])} | {t['rounds']} |", "",
              f"- confidence ECE of the cumulative prefix survival, mean over positions: before STS "
              f"{c['before']['mean']:.4f} (per position {fmt(c['before']['per_position'])}), after STS "
              f"{c['after']['mean']:.4f} ({fmt(c['after']['per_position'])}); STS temperatures "
              f"{fmt(c['sts_temperatures'])} fit on {c['calibration_rounds']} calibration rounds"]
        if "greedy_outputs_identical_dspark_vs_mtp1" in r:
            L.append(f"- greedy outputs identical between DSpark and MTP-1 runs (both must equal the target's greedy "
                     f"output): {r['greedy_outputs_identical_dspark_vs_mtp1']}")
        if "lossless_vs_target_greedy" in r:
            lv = r["lossless_vs_target_greedy"]
            L.append(f"- greedy outputs equal to the target's own greedy decode ({ev.get('evaluation_shapes')}): "
                     f"DSpark {lv['dspark']['identical']}, MTP-1 {lv['mtp1']['identical']}; divergences "
                     f"{json.dumps(lv['dspark']['divergences'] + lv['mtp1']['divergences'])}")
        L += ["", f"Samples ({title}, DSpark-speculated; the output distribution is the target's):", ""]
        for s in r["samples"]:
            L += ["```", s["prompt"] + "⟦" + s["continuation"] + "⟧", "```"]
        L.append("")
    if "determinism_check" in ev:
        L += ["## Determinism check (tools/train/determinism.py)", "",
              "The target's greedy decode computed twice with different batch shapes (prompt order reversed plus "
              "one longer extra row): identical outputs, and where they differ the first differing position and "
              "the target's top-1 minus top-2 logit there.", ""]
        for mode, c in ev["determinism_check"].items():
            if isinstance(c, dict):
                L.append(f"- {mode}: identical {c['identical']}; divergences {json.dumps(c['divergences'])}")
                for kind in ("dspark", "mtp"):
                    if f"{kind}_vs_target_decode" in c:
                        k = c[f"{kind}_vs_target_decode"]
                        L.append(f"  - {kind} greedy speculative run vs this decode: identical {k['identical']}; "
                                 f"divergences {json.dumps(k['divergences'])}")
        L.append("")
    L += ["## Export", "", "| file | bytes |", "|---|---|"] + [f"| {k} | {v:,} |" for k, v in exp["sizes"].items()]
    with open(os.path.join(a.out, "report.md"), "w", encoding="utf-8") as f:
        f.write("\n".join(L) + "\n")
    print(open(os.path.join(a.out, "report.md"), encoding="utf-8").read())


def retrain_lines(rep):
    g, v, d = rep["distillation_data"], rep["verify_export"], rep["drafter_training"]
    before = ", ".join(f"{h['steps']} steps in {h['seconds']:.0f} s" for h in d.get("history", []) if h["steps"])
    ck = [f"{c['greedy_agreement_with_no_cache_argmax']:.4f}" + ("" if c["use_cache"] else " (no cache)")
          for c in g["checks"]]
    return ["- tokenizer: the shipped one (no BPE training); held-out prompts and validation stream as run_all.sh "
            "builds them", "",
            "## Drafter retraining (docs/small_model.md)",
            f"- start: the shipped model, target frozen, drafters warm-started from the shipped mtp.* / mtp1 weights",
            f"- distillation data: {g['sequences']} target-generated sequences of {g['seq_len']} tokens "
            f"({g['greedy_sequences']} greedy, {g['sequences'] - g['greedy_sequences']} temperature 1; prompts of "
            f"{g['prompt_lens']} tokens from {g['distinct_train_prompts']} training-split snippets), "
            f"{g['generated_tokens']:,} generated tokens in {g['seconds']:.0f} s; greedy tokens equal to the "
            f"no-cache argmax, per greedy batch: {', '.join(ck)}",
            f"- training: loss {d.get('loss', 'mix')}, {d['steps']} steps in {d['seconds']:.0f} s (earlier "
            f"training of the warm start: {before or 'unknown'})",
            f"- export check (verify_export.py): target tensors byte-identical {v['target_tensors_byte_identical']}, "
            f"DSpark tensors changed {v['dspark_tensors_changed']}, MTP-1 tensors changed "
            f"{v['mtp1_tensors_changed']}, errors {v['errors'] or 'none'}"]


if __name__ == "__main__":
    main()
