#!/usr/bin/env python3
"""Step 1 of tools/train/run_all.sh: corpus, tokenizer, token data, held-out prompts.

    python3 tools/train/data.py --out OUT_DIR/work [--max-chars N] [--tok-chars N] [--vocab 3072]
                                [--tokenizer MODEL/tokenizer.json] [--train-prompts N]

Corpus: the Python source and documentation (*.py, *.pyi, *.md, *.rst, *.txt) of the installed Python packages
(every site-packages / purelib / platlib directory of the running interpreter, found through `sysconfig` and `site`)
plus this repository's README.md and docs/. Files are deduplicated by content; a file goes to the held-out split when
the first 8 hex digits of its SHA-256 are 0 mod --heldout-mod (default 50: about 2 %), so the split is stable across machines.

Tokenizer: byte-level BPE trained with HF `tokenizers` on a sample of the training split, with DeepSeek-V4's
normalizer, pre-tokenizer (digit, CJK and word/punctuation splits), ByteLevel decoder and post-processor copied from
the real V4 tokenizer (v4_tokenizer_spec.json). BOS / EOS / pad keep ids 0 / 1 / 2; the other kept V4 special tokens
(noise placeholder, FIM, <｜User｜>, <｜Assistant｜>, <think>, </think>, ｜DSML｜, task and grounding tokens) take the
last ids of the vocabulary, in V4 order, with V4's flags.

Writes into --out: tokenizer.json, tokenizer_config.json, train.bin / val.bin (uint16 token streams: every document
is BOS + tokens + EOS), prompts_calib.json / prompts_eval.json / prompts_ref.json (held-out text snippets), data.json
(counts and timings). --tokenizer reuses an existing tokenizer.json (copied byte for byte; no BPE training: the
drafter retraining, tools/train/retrain_drafters.sh, must use the shipped model's tokenizer); --train-prompts N also
writes prompts_train.json, N snippets of training-split files (the prompts the distillation data is generated from).
"""
import argparse, hashlib, json, os, random, shutil, site, sys, sysconfig, time
import numpy as np
from tokenizers import AddedToken, Tokenizer, pre_tokenizers, trainers

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
EXTS = (".py", ".pyi", ".md", ".rst", ".txt")


def corpus_roots():
    roots = []
    paths = sysconfig.get_paths()
    cands = [paths.get("purelib"), paths.get("platlib")]
    try:
        cands += site.getsitepackages()
    except AttributeError:
        pass
    try:
        cands.append(site.getusersitepackages())
    except AttributeError:
        pass
    for c in cands:
        if c and os.path.isdir(c) and os.path.realpath(c) not in [os.path.realpath(r) for r in roots]:
            roots.append(c)
    return roots


def iter_files(roots):
    for root in roots:
        for dp, dns, fns in os.walk(root):
            dns.sort()
            for fn in sorted(fns):
                if fn.endswith(EXTS):
                    yield os.path.join(dp, fn)
    for extra in [os.path.join(REPO, "README.md")] + sorted(
            os.path.join(REPO, "docs", f) for f in (os.listdir(os.path.join(REPO, "docs"))
                                                    if os.path.isdir(os.path.join(REPO, "docs")) else [])):
        if extra.endswith(".md"):
            yield extra


def load_corpus(max_chars, heldout_mod=50, min_size=200, max_size=400_000):
    seen, train, held = set(), [], []
    total = 0
    for path in iter_files(corpus_roots()):
        try:
            size = os.path.getsize(path)
            if size < min_size or size > max_size:
                continue
            with open(path, "rb") as f:
                raw = f.read()
            text = raw.decode("utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if "\x00" in text:
            continue
        h = hashlib.sha256(raw).hexdigest()
        if h in seen:
            continue
        seen.add(h)
        (held if int(h[:8], 16) % heldout_mod == 0 else train).append(text)
        total += len(text)
        if total >= max_chars:
            break
    return train, held


def build_tokenizer(sample_texts, vocab_size):
    spec = json.load(open(os.path.join(HERE, "v4_tokenizer_spec.json"), encoding="utf-8"))
    specials = spec["special_tokens"]
    head = [s for s in specials if s["v4_id"] < 3]
    tail = [s for s in specials if s["v4_id"] >= 3]
    skeleton = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
                "normalizer": spec["normalizer"], "pre_tokenizer": spec["pre_tokenizer"],
                "post_processor": spec["post_processor"], "decoder": spec["decoder"],
                "model": dict(spec["model_flags"], vocab={}, merges=[])}
    tok = Tokenizer.from_str(json.dumps(skeleton))

    def added(s):
        return AddedToken(s["content"], single_word=s["single_word"], lstrip=s["lstrip"], rstrip=s["rstrip"],
                          normalized=s["normalized"], special=s["special"])

    trainer = trainers.BpeTrainer(vocab_size=vocab_size - len(tail), min_frequency=2, show_progress=False,
                                  special_tokens=[added(s) for s in head],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(sample_texts, trainer=trainer)
    n_bpe = tok.get_vocab_size()
    if n_bpe != vocab_size - len(tail):
        raise SystemExit(f"BPE training produced {n_bpe} entries, expected {vocab_size - len(tail)} "
                         "(corpus too small for the requested vocabulary?)")
    for s in tail:
        (tok.add_special_tokens if s["special"] else tok.add_tokens)([added(s)])
    # Restore the exact V4 component JSON (training may normalise fields) and check the ids.
    j = json.loads(tok.to_str())
    for k in ("normalizer", "pre_tokenizer", "post_processor", "decoder"):
        j[k] = spec[k]
    tok = Tokenizer.from_str(json.dumps(j, ensure_ascii=False))
    for i, s in enumerate(head):
        assert tok.token_to_id(s["content"]) == i, s
    for i, s in enumerate(tail):
        assert tok.token_to_id(s["content"]) == vocab_size - len(tail) + i, s
    assert tok.get_vocab_size() == vocab_size
    return tok, j


def snippets(texts, n, rng, min_chars=160, max_chars=400):
    """Held-out prompts: text starting at a line that opens a definition / heading / paragraph."""
    out = []
    order = list(range(len(texts)))
    rng.shuffle(order)
    for i in order:
        lines = texts[i].split("\n")
        starts = [k for k, l in enumerate(lines) if l.strip() and (
            l.lstrip().startswith(("def ", "class ", "#", "import ", "from ", "if ", "for ", "return "))
            or (k > 0 and not lines[k - 1].strip()))]
        if not starts:
            continue
        k = starts[rng.randrange(len(starts))]
        s = "\n".join(lines[k:])[:max_chars]
        if len(s) >= min_chars:
            out.append(s)
        if len(out) >= n:
            break
    return out


def encode_stream(tok, texts, bos, eos):
    ids = []
    for enc in tok.encode_batch(texts, add_special_tokens=False):
        ids.append(bos)
        ids.extend(enc.ids)
        ids.append(eos)
    return np.asarray(ids, dtype=np.uint16)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--max-chars", type=int, default=64_000_000)
    ap.add_argument("--heldout-mod", type=int, default=50, help="a file is held out when sha256 %% this == 0")
    ap.add_argument("--tok-chars", type=int, default=12_000_000)
    ap.add_argument("--vocab", type=int, default=3072)
    ap.add_argument("--n-prompts", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tokenizer", default=None, help="reuse this tokenizer.json instead of training one")
    ap.add_argument("--train-prompts", type=int, default=0, help="also write N training-split prompts")
    ap.add_argument("--no-train-stream", action="store_true", help="skip train.bin (not needed by the retraining)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    t0 = time.time()
    train, held = load_corpus(args.max_chars, args.heldout_mod)
    t1 = time.time()
    rng = random.Random(args.seed)
    sample, n = [], 0
    for i in rng.sample(range(len(train)), len(train)):
        sample.append(train[i])
        n += len(train[i])
        if n >= args.tok_chars:
            break
    if args.tokenizer:
        shutil.copyfile(args.tokenizer, os.path.join(args.out, "tokenizer.json"))
        tok = Tokenizer.from_file(args.tokenizer)
        if tok.get_vocab_size() != args.vocab:
            raise SystemExit(f"{args.tokenizer}: vocabulary {tok.get_vocab_size()}, expected {args.vocab}")
    else:
        tok, tok_json = build_tokenizer(sample, args.vocab)
        with open(os.path.join(args.out, "tokenizer.json"), "w", encoding="utf-8") as f:
            json.dump(tok_json, f, ensure_ascii=False)
    t2 = time.time()
    bos, eos = 0, 1
    tail = [s for s in json.load(open(os.path.join(HERE, "v4_tokenizer_spec.json"), encoding="utf-8"))
            ["special_tokens"] if s["v4_id"] >= 3]
    noise = tok.token_to_id(next(s["content"] for s in tail if s["v4_id"] == 128799))
    with open(os.path.join(args.out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<｜begin▁of▁sentence｜>",
                   "eos_token": "<｜end▁of▁sentence｜>", "pad_token": "<｜end▁of▁sentence｜>",
                   "add_bos_token": True, "add_eos_token": False, "clean_up_tokenization_spaces": False,
                   "model_max_length": 4096}, f, ensure_ascii=False, indent=2)
    # Held-out documents: the first half gives the validation token stream, calibration prompts come from the
    # second quarter, evaluation / reference prompts from the last quarter (disjoint documents).
    rng.shuffle(held)
    q = max(1, len(held) // 4)
    val_docs, calib_docs, eval_docs = held[: 2 * q], held[2 * q: 3 * q], held[3 * q:]
    train_ids = encode_stream(tok, [] if args.no_train_stream else train, bos, eos)
    val_ids = encode_stream(tok, val_docs, bos, eos)
    if not args.no_train_stream:
        train_ids.tofile(os.path.join(args.out, "train.bin"))
    val_ids.tofile(os.path.join(args.out, "val.bin"))
    prng = random.Random(args.seed + 1)
    prompts = {"calib": snippets(calib_docs, args.n_prompts, prng), "eval": snippets(eval_docs, args.n_prompts, prng),
               "ref": snippets(eval_docs[::-1], 8, prng)}
    if args.train_prompts:  # own generator: the held-out prompts above stay identical with or without it
        trng, prompts["train"] = random.Random(args.seed + 2), []
        for _ in range(4):  # one snippet per file and pass (random start line), a few passes if files are few
            prompts["train"] += snippets(train, args.train_prompts - len(prompts["train"]), trng)
            if len(prompts["train"]) >= args.train_prompts:
                break
    for k, v in prompts.items():
        with open(os.path.join(args.out, f"prompts_{k}.json"), "w", encoding="utf-8") as f:
            json.dump(v, f, ensure_ascii=False, indent=1)
    t3 = time.time()
    info = {"corpus_roots": corpus_roots(), "train_docs": len(train), "heldout_docs": len(held),
            "train_chars": sum(map(len, train)), "heldout_chars": sum(map(len, held)),
            "tokenizer_sample_chars": n, "vocab_size": tok.get_vocab_size(), "noise_token_id": noise,
            "train_tokens": int(train_ids.size), "val_tokens": int(val_ids.size),
            "chars_per_token_train": sum(map(len, train)) / max(1, train_ids.size - 2 * len(train))
            if train_ids.size else None,
            "n_prompts": {k: len(v) for k, v in prompts.items()},
            "seconds": {"read_corpus": t1 - t0, "train_tokenizer": t2 - t1, "encode": t3 - t2}}
    with open(os.path.join(args.out, "data.json"), "w") as f:
        json.dump(info, f, indent=1)
    print(json.dumps(info, indent=1))


if __name__ == "__main__":
    main()
