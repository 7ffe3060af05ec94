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
    rep = {"data": data, "export": exp, **ev,
           "run_info": open(os.path.join(a.out, "run_info.txt")).read().strip().splitlines()}
    with open(os.path.join(a.out, "report.json"), "w", encoding="utf-8") as f:
        json.dump(rep, f, indent=1, ensure_ascii=False)
    with open(os.path.join(a.out, "train_log.txt"), "w") as f:
        f.write(open(os.path.join(a.work, "train_log.txt")).read())
        f.write("\n# drafters (DSpark + MTP-1 trained together)\n")
        f.write(open(os.path.join(a.work, "drafter_log.txt")).read())
    p, tt = ev["params"], ev["target_training"]
    L = [f"# Small DeepSeek-V4 + DSpark: run report", "",
         "Run: " + "; ".join(rep["run_info"]), "",
         "## Data and tokenizer",
         f"- corpus: {data['train_docs']} training files ({data['train_chars']:,} chars), {data['heldout_docs']} "
         f"held-out files; roots {data['corpus_roots']}",
         f"- tokenizer: byte-level BPE, vocab {data['vocab_size']} (incl. DeepSeek-V4 special tokens), "
         f"{data['chars_per_token_train']:.2f} chars/token; train {data['train_tokens']:,} tokens, held-out "
         f"{data['val_tokens']:,}", "",
         "## Target",
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
        L += ["", f"Samples ({title}, DSpark-speculated; the output distribution is the target's):", ""]
        for s in r["samples"]:
            L += ["```", s["prompt"] + "⟦" + s["continuation"] + "⟧", "```"]
        L.append("")
    L += ["## Export", "", "| file | bytes |", "|---|---|"] + [f"| {k} | {v:,} |" for k, v in exp["sizes"].items()]
    with open(os.path.join(a.out, "report.md"), "w", encoding="utf-8") as f:
        f.write("\n".join(L) + "\n")
    print(open(os.path.join(a.out, "report.md"), encoding="utf-8").read())


if __name__ == "__main__":
    main()
