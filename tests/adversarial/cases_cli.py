"""Adversarial cases for the CLI (issue 36): `generate --resume` after the input changed, `--output` naming the
input, hostile --input files, and `tokenize` / `detokenize` lines. Standard library only; run(ctx) follows the
interface of run_adversarial.py: [(case, outcome, detail)], outcome ok / clean_error / wrong / hang / crash."""
import json
import os
import shutil
import signal
import subprocess

TIMEOUT = 60  # seconds per command (the shipped model answers these in about one)
SANITIZER_MARKS = ("AddressSanitizer", "UndefinedBehaviorSanitizer", "runtime error:", "LeakSanitizer")


def run_cmd(args, timeout=TIMEOUT, stdin=None):
    """-> (outcome_or_None, rc, stdout, stderr): outcome "hang" / "crash" when it came to that, else None."""
    try:
        p = subprocess.run(args, input=stdin, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "hang", None, "", f"no exit within {timeout} s"
    out = p.stdout.decode("utf-8", "replace")
    err = p.stderr.decode("utf-8", "replace")
    if p.returncode < 0 and -p.returncode != signal.SIGPIPE:
        return "crash", p.returncode, out, f"killed by signal {-p.returncode}\n{err[-2000:]}"
    if any(m in err for m in SANITIZER_MARKS):
        return "crash", p.returncode, out, err[-3000:]
    return None, p.returncode, out, err


def expect_error(name, res, wants, rc_ok=(1, 2)):
    """A clear error: an exit code in rc_ok and every string of `wants` in stderr."""
    bad, rc, _, err = res
    if bad:
        return (name, bad, err)
    if rc not in rc_ok:
        return (name, "wrong", f"exit {rc}, expected an error naming {wants}:\n{err[-1500:]}")
    missing = [w for w in wants if w not in err]
    if missing:
        return (name, "wrong", f"unclear error (missing {missing}):\n{err[-1500:]}")
    return (name, "clean_error", err.strip().splitlines()[-1][:200] if err.strip() else "")


def write(path, text, mode="w"):
    with open(path, mode) as f:
        f.write(text)


def line(cid, max_tokens=2, prompt="[5, 6, 7]"):
    return '{"custom_id": "%s", "body": {"prompt": %s, "max_tokens": %d, "temperature": 0}}' % (cid, prompt, max_tokens)


def records(path):
    out = {}
    with open(path, encoding="utf-8") as f:
        for ln in f:
            j = json.loads(ln)
            out[j["custom_id"]] = j
    return out


def tokens_of(rec):
    return rec["response"]["body"]["usage"]["completion_tokens"] if rec.get("response") else None


class Gen:
    def __init__(self, ctx, sub):
        self.b, self.m = ctx["binary"], ctx["model"]
        self.dir = os.path.join(ctx["tmp"], sub)
        os.makedirs(self.dir, exist_ok=True)
        self.inp, self.out = os.path.join(self.dir, "in.jsonl"), os.path.join(self.dir, "out.jsonl")

    def __call__(self, *extra, inp=None, out=None):
        return run_cmd([self.b, "generate", "--model", self.m, "--input", inp or self.inp, "--output", out or self.out,
                        *extra])


def resume_cases(ctx):
    res = []
    g = Gen(ctx, "resume")
    write(g.inp, "\n".join([line("a"), line("b"), line("c"), line("d")]) + "\n")
    first = g()
    if first[0] or first[1] != 0:
        return [("resume:first-run", first[0] or "wrong", first[3][-1500:])]
    before = records(g.out)
    # Changed max_tokens, changed prompt, reformatted (same request), unchanged.
    write(g.inp, "\n".join([line("a", 4), line("b", 2, "[9, 9]"),
                            '{"body": {"temperature": 0, "max_tokens": 2, "prompt": [5,6,7]}, "custom_id": "c"}',
                            line("d")]) + "\n")
    r = g("--resume")
    if r[0] or r[1] != 0:
        res.append(("resume:changed-lines", r[0] or "wrong", r[3][-1500:]))
    else:
        after = records(g.out)
        checks = {
            "resume:changed-max_tokens-reruns": tokens_of(after["a"]) == 4,
            "resume:changed-prompt-reruns": after["b"]["response"]["body"]["usage"]["prompt_tokens"] == 2,
            "resume:reformatted-line-reused": json.dumps(after["c"]) == json.dumps(before["c"]),
            "resume:unchanged-line-reused": json.dumps(after["d"]) == json.dumps(before["d"]),
            "resume:says-what-changed": "2 lines changed since the earlier run" in r[3],
        }
        res += [(k, "ok" if v else "wrong", r[3][-800:]) for k, v in checks.items()]
    # A record without a fingerprint (older output), a cut-off partial line and garbage: run again, no crash.
    write(g.out, '{"id":"batch_req_1","custom_id":"a","response":{"status_code":200,"body":{}},"error":null}\n')
    write(g.out + ".partial", '{"id":"batch_req_2","custom_id":"b","resp\n\x00\xff garbage\n[1,2]\n"str"\n{}\n')
    r = g("--resume")
    ok = not r[0] and r[1] == 0 and all(tokens_of(x) for x in records(g.out).values())
    res.append(("resume:unmatched-and-garbage-records-rerun", r[0] or ("ok" if ok else "wrong"), r[3][-800:]))
    # A partial file from another input (custom_ids not in this input) is ignored.
    write(g.out + ".partial", json.dumps({"custom_id": "zzz", "response": {"body": {}}, "error": None}) + "\n")
    r = g("--resume")
    res.append(("resume:foreign-records-ignored", r[0] or ("ok" if r[1] == 0 and "zzz" not in records(g.out) else "wrong"),
                r[3][-500:]))
    # --resume with nothing to resume runs everything.
    os.remove(g.out)
    r = g("--resume")
    res.append(("resume:nothing-earlier", r[0] or ("ok" if r[1] == 0 and len(records(g.out)) == 4 else "wrong"), r[3][-500:]))
    # A stale partial file without --resume is not overwritten.
    write(g.out + ".partial", line("x") + "\n")
    res.append(expect_error("resume:stale-partial-needs-flag", g(), ["pass --resume"]))
    os.remove(g.out + ".partial")
    # --resume onto a device.
    res.append(expect_error("resume:device-output", g("--resume", out="/dev/null"), ["--resume needs a regular output file"]))
    return res


def same_file_cases(ctx):
    res = []
    g = Gen(ctx, "samefile")
    body = line("a") + "\n"
    write(g.inp, body)
    os.symlink(g.inp, os.path.join(g.dir, "sym.jsonl"))
    os.link(g.inp, os.path.join(g.dir, "hard.jsonl"))
    os.makedirs(os.path.join(g.dir, "sub"))
    outs = {"same-path": g.inp, "dot-slash": os.path.join(g.dir, ".", "in.jsonl"),
            "dotdot": os.path.join(g.dir, "sub", "..", "in.jsonl"), "symlink": os.path.join(g.dir, "sym.jsonl"),
            "hard-link": os.path.join(g.dir, "hard.jsonl")}
    for name, out in outs.items():
        for resume in ([], ["--resume"]):
            r = g(*resume, out=out)
            case = f"output-is-input:{name}{'+resume' if resume else ''}"
            row = expect_error(case, r, ["is the input file", "choose another output path"], rc_ok=(2,))
            if row[1] == "clean_error" and open(g.inp).read() != body:
                row = (case, "wrong", "the input file changed")
            res.append(row)
    # The input named as the output's partial / temporary file.
    part = os.path.join(g.dir, "o.jsonl.partial")
    shutil.copy(g.inp, part)
    res.append(expect_error("output-is-input:partial-file", g("--resume", inp=part, out=os.path.join(g.dir, "o.jsonl")),
                            ["which is the input file"], rc_ok=(2,)))
    tmpf = os.path.join(g.dir, "p.jsonl.tmp")
    shutil.copy(g.inp, tmpf)
    res.append(expect_error("output-is-input:tmp-file", g(inp=tmpf, out=os.path.join(g.dir, "p.jsonl")),
                            ["which is the input file"], rc_ok=(2,)))
    return res


def input_cases(ctx):
    res = []
    g = Gen(ctx, "inputs")
    res.append(expect_error("input:missing", g(inp=os.path.join(g.dir, "nope.jsonl")), ["cannot open"]))
    res.append(expect_error("input:directory", g(inp=g.dir), ["is a directory"]))
    write(g.inp, line("a") + "\n")
    res.append(expect_error("output:directory", g(out=g.dir), ["is a directory"]))
    res.append(expect_error("output:no-such-dir", g(out=os.path.join(g.dir, "x", "y.jsonl")), ["does not exist"]))
    res.append(expect_error("output:dev-full", g(out="/dev/full"), ["error writing /dev/full"]))
    # Files that hold no valid request: each line gets an error record naming it (exit 1), or nothing to do.
    for name, data, want in [
        ("empty", b"", None), ("only-newlines", b"\n\n\n", "line 1"), ("binary", bytes(range(256)) * 4, "line 1"),
        ("nul-bytes", b'{"custom_id": "a\x00b", "body": {"prompt": [1]}}\n', "line 1"),
        ("bom", b'\xef\xbb\xbf' + line("a").encode() + b"\n", None), ("crlf", (line("a") + "\r\n").encode(), None),
        ("no-final-newline", line("a").encode(), None), ("deep-nesting", b"[" * 200000 + b"\n", "nested deeper"),
        ("huge-number", b'{"custom_id": "a", "body": {"prompt": [1], "max_tokens": 1e999}}\n', "line 1"),
        ("invalid-utf8", b'{"custom_id": "a", "body": {"prompt": "caf\xe9"}}\n', "line 1"),
    ]:
        write(g.inp, data, "wb")
        r = g()
        if r[0]:
            res.append((f"input:{name}", r[0], r[3]))
        elif want is None:
            ok = r[1] in (0, 1) and os.path.exists(g.out)
            res.append((f"input:{name}", "ok" if ok else "wrong", r[3][-500:]))
        else:
            recs = open(g.out, encoding="utf-8", errors="replace").read() if os.path.exists(g.out) else ""
            ok = r[1] == 1 and want in recs
            res.append((f"input:{name}", "clean_error" if ok else "wrong", (recs or r[3])[-500:]))
    return res


def tokenize_cases(ctx):
    res = []
    tok = os.path.join(ctx["model"], "tokenizer.json")
    cmds = {"tokenize": [ctx["binary"], "tokenize", "--tokenizer", tok],
            "detokenize": [ctx["binary"], "detokenize", "--tokenizer", tok]}
    cases = [
        ("tokenize", "lone-high-surrogate", b'"a\\ud800b"', "surrogate"),
        ("tokenize", "lone-low-surrogate", b'"\\udc00"', "surrogate"),
        ("tokenize", "two-high-surrogates", b'"\\ud800\\ud800"', "surrogate"),
        ("tokenize", "surrogate-at-end", b'"x\\udbff"', "surrogate"),
        ("tokenize", "cesu8-bytes", b'"\xed\xa0\x80"', "not valid JSON"),
        ("tokenize", "latin1-byte", b'"caf\xe9"', "not valid JSON"),
        ("tokenize", "not-a-string", b"[1, 2]", "expected a JSON string"),
        ("tokenize", "deep-nesting", b"[" * 100000, "not valid JSON"),
        ("tokenize", "bare-word", b"hello", "not valid JSON"),
        ("tokenize", "pair-ok", b'"\\ud83d\\ude00"', None),
        ("tokenize", "nul-escape-ok", b'"a\\u0000b"', None),
        ("tokenize", "empty-ok", b'""', None),
        ("tokenize", "special-spelling-ok", '"<｜begin▁of▁sentence｜>x"'.encode(), None),
        ("tokenize", "megabyte-ok", b'"' + b"ab " * 350000 + b'"', None),
        ("detokenize", "negative-id", b"[-1]", "token id"),
        ("detokenize", "huge-id", b"[99999999999]", "32-bit integer"),
        ("detokenize", "float-id", b"[1.5]", "32-bit integer"),
        ("detokenize", "inf-number", b"[1e999]", "number overflow"),
        ("detokenize", "nested", b"[[1]]", "32-bit integer"),
        ("detokenize", "string", b'"abc"', "expected a JSON array"),
        ("detokenize", "ok", b"[5, 6, 7]", None),
    ]
    for cmd, name, data, want in cases:
        r = run_cmd(cmds[cmd], stdin=data + b"\n")
        case = f"{cmd}:{name}"
        if r[0]:
            res.append((case, r[0], r[3]))
            continue
        out = r[2].strip()
        if want is None:
            ok = r[1] == 0 and out.startswith(("[", '"'))
            res.append((case, "ok" if ok else "wrong", (out or r[3])[-300:]))
        else:
            ok = r[1] == 1 and '"error"' in out and want in out
            res.append((case, "clean_error" if ok else "wrong", (out or r[3])[-300:]))
    return res


def flag_cases(ctx):
    """Bad flag values of `plan`, `convert` and `generate`: exit 2 with the command and the flag named; good ones
    run."""
    b, m = ctx["binary"], ctx["model"]
    out_dir = os.path.join(ctx["tmp"], "convert-out")
    cases = [
        ("plan:missing-value", [b, "plan", "--model", m, "--gpus"], ["plan:", "--gpus needs a value"]),
        ("plan:unknown", [b, "plan", "--model", m, "--gpu", "2"], ["plan:", "unknown argument '--gpu'"]),
        ("plan:list-item-zero", [b, "plan", "--model", m, "--gpus", "1,0"], ["plan:", "--gpus expects an integer"]),
        ("plan:list-item-text", [b, "plan", "--model", m, "--batch", "1,x"], ["plan:", "--batch expects an integer"]),
        ("plan:real-range", [b, "plan", "--model", m, "--gpu-memory-gib", "-1"], ["--gpu-memory-gib expects"]),
        ("plan:no-model", [b, "plan", "--gpus", "2"], ["plan: --model is required"]),
        ("convert:seed-range", [b, "convert", "--model", m, "--out", out_dir, "--seed", "-1"],
         ["convert:", "--seed expects an integer"]),
        ("convert:shard-range", [b, "convert", "--model", m, "--out", out_dir, "--shard-mib", "0"],
         ["convert:", "--shard-mib expects an integer"]),
        ("convert:both-sources", [b, "convert", "--model", m, "--config", m, "--out", out_dir],
         ["convert: give --out and one of --model / --config"]),
        ("generate:top-k-range", [b, "generate", "--model", m, "--prompt", "x", "--top-k", "-2"],
         ["generate:", "--top-k expects an integer"]),
        ("generate:top-p-range", [b, "generate", "--model", m, "--prompt", "x", "--top-p", "1.5"],
         ["generate:", "--top-p expects"]),
        ("generate:max-tokens-zero", [b, "generate", "--model", m, "--prompt", "x", "--max-tokens", "0"],
         ["generate:", "--max-tokens expects an integer"]),
    ]
    res = [expect_error(name, run_cmd(args), wants, rc_ok=(2,)) for name, args, wants in cases]
    good = run_cmd([b, "plan", "--model", m, "--gpus", "1,2", "--batch", "1,64", "--context", "4096"])
    ok = good[0] is None and good[1] == 0 and "plan:" in good[2]
    res.append(("plan:good-lists", good[0] or ("ok" if ok else "wrong"), (good[2] or good[3])[-300:]))
    return res


def run(ctx):
    return resume_cases(ctx) + same_file_cases(ctx) + input_cases(ctx) + tokenize_cases(ctx) + flag_cases(ctx)
