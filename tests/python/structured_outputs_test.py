#!/usr/bin/env python3
"""Structured outputs end to end: `dsinfer generate` on the shipped model (models/dsv4-small) with 50 JSON
schemas (tests/python/structured_schemas.py) through chat and completions, greedy and sampled, plus regex,
choice, EBNF and Lark grammars, n > 1, stop strings, thinking mode and strict forced tool calls. Every output
must finish with "stop" and match its constraint: JSON outputs parse and validate against their schema with
the `jsonschema` package (Draft 2020-12). Then a speculative pass: the greedy cases again with
`--speculative dspark` (drafts that break the grammar are rejected at verification); every output must equal the
non-speculative run's (text, reasoning, tool calls, finish reason).

usage: structured_outputs_test.py --binary build/cpu/dsinfer [--model models/dsv4-small] [--keep DIR]
                                  [--speculative dspark|mtp1|off]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

import jsonschema

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from structured_schemas import schemas  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

REGEXES = [r"[0-9]{3}-[0-9]{4}", r"(yes|no), because [a-z ]{1,20}\.", r"[A-Z][a-z]{2,8} [A-Z][a-z]{2,8}",
           r"[0-9]+(\.[0-9]{1,2})? (USD|EUR)", r"#[0-9a-f]{6}", r"[a-z]{4}_[0-9]{2}"]
CHOICES = [["red", "green", "blue"], ["positive", "negative", "neutral"], ["A", "B", "C", "D"], ["true", "false"]]
# (grammar, a Python regex with the same language, for checking)
GRAMMARS = [
    ('root ::= "(" num ("+" num)* ")"\nnum ::= [0-9] | [1-9] [0-9]', r"\((?:[0-9]|[1-9][0-9])(?:\+(?:[0-9]|[1-9][0-9]))*\)"),
    ('root ::= greeting ", " name "!"\ngreeting ::= "hello" | "hi"\nname ::= [a-z]{1,10}', r"(?:hello|hi), [a-z]{1,10}!"),
    ('root ::= item (";" item){0,3}\nitem ::= [a-z]{1,8} "=" [0-9]{1,3}', r"[a-z]{1,8}=[0-9]{1,3}(?:;[a-z]{1,8}=[0-9]{1,3}){0,3}"),
    ('start: "set " NAME " to " NUMBER\nNAME: /[a-z]{1,8}/\nNUMBER: /[0-9]{1,4}/', r"set [a-z]{1,8} to [0-9]{1,4}"),  # Lark
]
PROMPTS = ["Give me an example as JSON.", "Describe a record in JSON.", "Return the data as JSON only."]


def body(endpoint, i, **fields):
    b = {"max_tokens": 600, **fields}
    if endpoint == "chat":
        b["messages"] = [{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}]
        b.setdefault("thinking", {"type": "disabled"})
    else:
        b["prompt"] = PROMPTS[i % len(PROMPTS)] + "\n"
    return b


def sampling(mode, i):
    return {"temperature": 0} if mode == "greedy" else {"temperature": 0.8, "top_p": 0.95, "seed": 1000 + i}


def strict_compatible(s):
    """OpenAI / deepseek-recipe strict mode: every object lists all its properties in "required" and allows no
    additional ones (the engine rejects other schemas with strict: true, as the reference does)."""
    if isinstance(s, dict):
        if s.get("type") == "object":
            if set(s.get("required", [])) != set(s.get("properties", {})) or s.get("additionalProperties") is True:
                return False
        return all(strict_compatible(v) for v in s.values())
    if isinstance(s, list):
        return all(strict_compatible(v) for v in s)
    return True


def build_cases(think_end_id):
    cases = []  # (custom_id, endpoint, body, check)

    def add(cid, endpoint, b, check):
        cases.append((cid, endpoint, b, check))

    for i, s in enumerate(schemas()):
        for mode in ("greedy", "sampled"):
            endpoint = "chat" if i % 2 == 0 else "completions"
            if i % 3 == 0:
                fmt = {"response_format": {"type": "json_schema", "json_schema": {"name": f"s{i}", "schema": s, "strict": strict_compatible(s)}}}
            elif i % 3 == 1:
                fmt = {"structured_outputs": {"json": s}}
            else:
                fmt = {"guided_json": s}
            add(f"schema{i:02d}-{mode}", endpoint, body(endpoint, i, **fmt, **sampling(mode, i)), ("json", s))
    for i, rx in enumerate(REGEXES):
        for mode in ("greedy", "sampled"):
            fmt = {"structured_outputs": {"regex": rx}} if i % 2 else {"guided_regex": rx}
            add(f"regex{i}-{mode}", "completions", body("completions", i, **fmt, **sampling(mode, i)), ("regex", rx))
    for i, ch in enumerate(CHOICES):
        for mode in ("greedy", "sampled"):
            endpoint = "chat" if i % 2 else "completions"
            fmt = {"structured_outputs": {"choice": ch}} if i % 2 else {"guided_choice": ch}
            add(f"choice{i}-{mode}", endpoint, body(endpoint, i, **fmt, **sampling(mode, i)), ("choice", ch))
    for i, (g, rx) in enumerate(GRAMMARS):
        for mode in ("greedy", "sampled"):
            fmt = {"structured_outputs": {"grammar": g}} if i % 2 else {"guided_grammar": g}
            add(f"grammar{i}-{mode}", "completions", body("completions", i, **fmt, **sampling(mode, i)), ("regex", rx))
    # json_object, chat and completions.
    for i, endpoint in enumerate(("chat", "completions")):
        b = body(endpoint, i, response_format={"type": "json_object"}, **sampling("sampled", i))
        add(f"json_object-{endpoint}", endpoint, b, ("json", {"type": "object"}))
    # n > 1: every sample constrained, sampled and greedy.
    for i in (0, 13, 40, 49):
        s = schemas()[i]
        add(f"n3-schema{i:02d}", "chat", body("chat", i, guided_json=s, n=3, **sampling("sampled", i)), ("json", s))
    add("n4-choice", "completions", body("completions", 0, guided_choice=CHOICES[0], n=4, temperature=1.5, seed=7), ("choice", CHOICES[0]))
    # Stop strings: the stop string cuts the constrained output, finish "stop"; one that never matches is harmless.
    add("stop-regex", "completions", body("completions", 0, guided_regex=r"[a-z]{3};[a-z]{3}", stop=[";"], temperature=0),
        ("regex", r"[a-z]{3}"))
    add("stop-nomatch", "chat", body("chat", 1, guided_json=schemas()[0], stop=["@@@"], temperature=0), ("json", schemas()[0]))
    # Thinking mode: the reasoning is free, the answer after </think> is constrained. A logit bias on </think>
    # makes the tiny model close its reasoning; the grammar must not forbid </think> inside the reasoning.
    # With +16 the model writes a few reasoning tokens first (checked: the reasoning is not empty).
    for i, bias in enumerate((100, 16)):
        s = schemas()[i * 10]
        b = body("chat", 0, guided_json=s, thinking={"type": "enabled"}, logit_bias={str(think_end_id): bias}, temperature=0)
        add(f"thinking-bias{bias}", "chat", b, ("json+reasoning" if bias == 16 else "json", s))
    # Strict forced tool call: the DSML block holds to the tool's parameter schema.
    tool = {"type": "function", "function": {"name": "get_weather", "strict": True, "parameters": {
        "type": "object", "properties": {"city": {"type": "string", "maxLength": 12}, "days": {"type": "integer", "minimum": 1, "maximum": 7}},
        "required": ["city", "days"], "additionalProperties": False}}}
    b = body("chat", 0, tools=[tool], tool_choice={"type": "function", "function": {"name": "get_weather"}}, temperature=0)
    add("strict-tool-named", "chat", b, ("tool", tool["function"]))
    b = body("chat", 1, tools=[tool], tool_choice="required", **sampling("sampled", 1))
    add("strict-tool-required", "chat", b, ("tool", tool["function"]))
    return cases


def check(kind, spec, choice, endpoint):
    """None when the choice satisfies the constraint, else what is wrong."""
    if choice.get("finish_reason") not in ("stop", "tool_calls"):
        return f"finish_reason {choice.get('finish_reason')!r}"
    text = choice["text"] if endpoint == "completions" else (choice["message"].get("content") or "")
    if kind == "json+reasoning":
        if not choice["message"].get("reasoning_content"):
            return "expected some reasoning before </think>"
        kind = "json"
    if kind == "json":
        try:
            value = json.loads(text)
        except ValueError as e:
            return f"not JSON ({e}): {text[:200]!r}"
        try:
            jsonschema.validate(value, spec, cls=jsonschema.Draft202012Validator)
        except jsonschema.ValidationError as e:
            return f"does not validate ({e.message}): {text[:200]!r}"
        return None
    if kind == "regex":
        return None if re.fullmatch(spec, text) else f"does not match /{spec}/: {text[:200]!r}"
    if kind == "choice":
        return None if text in spec else f"not one of {spec}: {text[:200]!r}"
    if kind == "tool":
        calls = choice["message"].get("tool_calls") or []
        if not calls:
            return f"no tool call parsed: {choice['message']!r}"[:300]
        for c in calls:
            if c["function"]["name"] != spec["name"]:
                return f"tool {c['function']['name']!r}"
            try:
                jsonschema.validate(json.loads(c["function"]["arguments"]), spec["parameters"])
            except (ValueError, jsonschema.ValidationError) as e:
                return f"arguments {c['function']['arguments']!r}: {e}"[:300]
        return None
    return f"unknown check {kind}"


def generate(args, cases, work, tag, extra=()):
    """Runs `dsinfer generate` over the cases; (results by custom_id, stderr) or None on failure."""
    inp, outp = os.path.join(work, f"requests{tag}.jsonl"), os.path.join(work, f"results{tag}.jsonl")
    with open(inp, "w", encoding="utf-8") as f:
        for cid, endpoint, b, _ in cases:
            url = "/v1/chat/completions" if endpoint == "chat" else "/v1/completions"
            f.write(json.dumps({"custom_id": cid, "method": "POST", "url": url, "body": b}) + "\n")
    r = subprocess.run([args.binary, "generate", "--model", args.model, "--input", inp, "--output", outp, *extra],
                       stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        print(r.stderr[-3000:], file=sys.stderr)
        print(f"FAIL: dsinfer generate {' '.join(extra)} exited with {r.returncode}")
        return None
    results = {}
    with open(outp, encoding="utf-8") as f:
        for line in f:
            rec = json.loads(line)
            results[rec["custom_id"]] = rec
    return results, r.stderr


def comparable(choice):
    """What a greedy output must reproduce exactly (tool-call ids are fresh per response)."""
    m = choice.get("message") or {}
    calls = [(c["function"]["name"], c["function"]["arguments"]) for c in m.get("tool_calls") or []]
    return (choice.get("text"), m.get("content"), m.get("reasoning_content"), calls, choice.get("finish_reason"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default=os.path.join(ROOT, "build/cpu/dsinfer"))
    ap.add_argument("--model", default=os.path.join(ROOT, "models/dsv4-small"))
    ap.add_argument("--keep", help="directory to keep the input / output JSONL in")
    ap.add_argument("--speculative", default="dspark", help="drafter of the greedy speculative pass (off: skip it)")
    args = ap.parse_args()
    with open(os.path.join(args.model, "tokenizer.json"), encoding="utf-8") as f:
        think_end_id = next(t["id"] for t in json.load(f)["added_tokens"] if t["content"] == "</think>")
    cases = build_cases(think_end_id)
    work = args.keep or tempfile.mkdtemp(prefix="dsinfer_structured_")
    os.makedirs(work, exist_ok=True)
    run = generate(args, cases, work, "")
    if run is None:
        return 1
    results, stderr = run
    failures, outputs = [], 0
    for cid, endpoint, _, (kind, spec) in cases:
        rec = results.get(cid)
        if rec is None or rec.get("error"):
            failures.append(f"{cid}: {rec and rec.get('error')}")
            continue
        for choice in rec["response"]["body"]["choices"]:
            outputs += 1
            why = check(kind, spec, choice, endpoint)
            if why:
                failures.append(f"{cid}[{choice['index']}]: {why}")
    summary = stderr.strip().splitlines()[-2:] if stderr.strip() else []
    print("\n".join(summary))
    print(f"{len(cases)} requests, {outputs} outputs, {len(failures)} failures (files in {work})")
    if args.speculative != "off":
        greedy = [c for c in cases if c[2].get("temperature") == 0]
        # every draft verified (the cpu backend's cost model would verify none for greedy requests)
        run = generate(args, greedy, work, "-spec",
                       ("--speculative", args.speculative, "--speculative-cost-model", "off"))
        if run is None:
            return 1
        spec_results, stderr = run
        for cid, _, _, _ in greedy:
            want, got = results.get(cid), spec_results.get(cid)
            if not want or want.get("error"):
                continue  # reported above
            if got is None or got.get("error"):
                failures.append(f"{cid} (--speculative {args.speculative}): {got and got.get('error')}")
                continue
            wc, gc = want["response"]["body"]["choices"], got["response"]["body"]["choices"]
            if len(wc) != len(gc):
                failures.append(f"{cid} --speculative {args.speculative}: {len(gc)} choices, not {len(wc)}")
            for a, b in zip(wc, gc):
                if comparable(a) != comparable(b):
                    failures.append(f"{cid}[{a['index']}] --speculative {args.speculative} differs: "
                                    f"{comparable(b)!r:.200} vs {comparable(a)!r:.200}")
        print("\n".join(l for l in stderr.strip().splitlines() if "speculative" in l or "accepted" in l))
        print(f"speculative pass ({args.speculative}): {len(greedy)} greedy requests compared with the plain run")
    for f_ in failures:
        print("  " + f_)
    return 1 if failures else 0

if __name__ == "__main__":
    sys.exit(main())
