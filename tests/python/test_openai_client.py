#!/usr/bin/env python3
"""`dsinfer serve` driven by the official `openai` Python client (pip install openai).

Starts the server on a free loopback port with the shipped model, then: chat with the model's defaults and nothing
but standard fields (plain, streamed, a forced tool call, a JSON-schema answer: each must come back with content or
tool calls), chat and completions, streaming with usage, thinking (reasoning_content), tools, logprobs, n > 1, every
error status, and a client that disconnects mid-stream. Every answer is compared with the offline `dsinfer generate`
output of the same request and seed.
Exit 0 = pass, 1 = failure, 77 = skipped (the openai package is not installed).

usage: test_openai_client.py --dsinfer build/cpu/dsinfer [--model models/dsv4-small]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request

try:
    import openai
except ImportError:
    print("skipped: the 'openai' package is not installed (pip install openai)")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
KEY = "sk-dsinfer-test"
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


class Server:
    def __init__(self, dsinfer, model, *extra):
        self.log = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen([dsinfer, "serve", "--model", model, "--port", "0", "--max-model-len", "1024",
                                      "--max-num-seqs", "8", *extra], stderr=self.log, stdout=subprocess.DEVNULL)
        self.port = None
        deadline = time.time() + 120
        while time.time() < deadline and self.port is None:
            if self.proc.poll() is not None:
                break
            self.log.seek(0)
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", self.log.read())
            if m:
                self.port = int(m.group(1))
            time.sleep(0.1)
        if self.port is None:
            self.log.seek(0)
            raise RuntimeError("server did not start:\n" + self.log.read())
        self.url = f"http://127.0.0.1:{self.port}"

    def metric(self, name):
        text = urllib.request.urlopen(self.url + "/metrics", timeout=10).read().decode()
        m = re.search("^" + re.escape(name) + r" (\S+)$", text, re.M)
        return float(m.group(1)) if m else None

    def stop(self):
        self.proc.send_signal(2)  # SIGINT: clean shutdown, exit 0
        return self.proc.wait(timeout=60)


def offline(dsinfer, model, requests):
    """Runs [(url, body)] through `dsinfer generate`; returns the response bodies in order."""
    with tempfile.TemporaryDirectory() as d:
        inp, out = os.path.join(d, "in.jsonl"), os.path.join(d, "out.jsonl")
        with open(inp, "w") as f:
            for i, (url, body) in enumerate(requests):
                f.write(json.dumps({"custom_id": str(i), "method": "POST", "url": url, "body": body}) + "\n")
        subprocess.run([dsinfer, "generate", "--model", model, "--max-model-len", "1024", "--input", inp, "--output", out],
                       check=True, stderr=subprocess.DEVNULL)
        return [json.loads(line)["response"]["body"] for line in open(out)]


def choices_of(resp):
    """The comparable part of a response (a pydantic object or a dict)."""
    d = resp if isinstance(resp, dict) else resp.model_dump(exclude_none=False)
    out = []
    for c in d["choices"]:
        c = dict(c)
        if "message" in c:
            m = {k: v for k, v in c["message"].items() if v not in (None, [], "") or k == "content"}
            m.pop("role", None)
            m.pop("annotations", None)
            m.pop("refusal", None)
            m.pop("audio", None)
            m.pop("function_call", None)
            c["message"] = m
        if isinstance(c.get("logprobs"), dict):  # pydantic adds fields the server does not send (refusal)
            c["logprobs"] = {k: v for k, v in c["logprobs"].items() if v is not None}
        out.append(c)
    return out


def fold_chat(chunks):
    """A streamed chat answer folded into message dicts per choice, and the usage."""
    msgs, usage = {}, None
    for ch in chunks:
        if ch.usage is not None:
            usage = ch.usage.model_dump()
        for c in ch.choices:
            m = msgs.setdefault(c.index, {"content": "", "reasoning_content": "", "tool_calls": {}, "finish_reason": None,
                                          "logprobs": []})
            d = c.delta
            m["content"] += d.content or ""
            m["reasoning_content"] += getattr(d, "reasoning_content", None) or (d.model_extra or {}).get("reasoning_content") or ""
            for t in d.tool_calls or []:
                call = m["tool_calls"].setdefault(t.index, {"id": "", "name": "", "arguments": ""})
                call["id"] = t.id or call["id"]
                call["name"] = (t.function.name if t.function else None) or call["name"]
                call["arguments"] += (t.function.arguments if t.function else None) or ""
            if c.logprobs and c.logprobs.content:
                m["logprobs"] += [x.model_dump() for x in c.logprobs.content]
            m["finish_reason"] = c.finish_reason or m["finish_reason"]
    return msgs, usage


def same_as_plain_chat(msgs, plain):
    for c in plain["choices"]:
        m = msgs[c["index"]]
        pm = c["message"]
        calls = [{"id": t["id"], "name": t["function"]["name"], "arguments": t["function"]["arguments"]}
                 for t in pm.get("tool_calls") or []]
        lp = (c.get("logprobs") or {}).get("content") or []
        if (m["content"] != (pm.get("content") or "") or m["reasoning_content"] != (pm.get("reasoning_content") or "")
                or list(m["tool_calls"].values()) != calls or m["finish_reason"] != c["finish_reason"]
                or [(x["token"], x["logprob"]) for x in m["logprobs"]] != [(x["token"], x["logprob"]) for x in lp]):
            print("  streamed:", json.dumps(m)[:400], "\n  plain:   ", json.dumps(c)[:400])
            return False
    return True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dsinfer", required=True)
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "dsv4-small"))
    a = ap.parse_args()
    srv = Server(a.dsinfer, a.model, "--api-key", KEY)
    try:
        run(a, srv)
    finally:
        rc = srv.stop()
        check(rc == 0, f"SIGINT stops the server with exit code 0 (got {rc})")
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


def run(a, srv):
    client = openai.OpenAI(base_url=srv.url + "/v1", api_key=KEY, max_retries=0, timeout=300)
    model = client.models.list().data[0].id
    check(model == os.path.basename(os.path.normpath(a.model)), f"/v1/models lists the model ({model})")
    defaults(client, model)

    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
              "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                             "required": ["city"]}}}]
    user = [{"role": "user", "content": "Write a Python function that reverses a string."}]
    cases = [
        ("/v1/chat/completions", {"model": model, "messages": user, "max_tokens": 32, "temperature": 0}),
        ("/v1/chat/completions", {"model": model, "messages": user, "max_tokens": 32, "temperature": 0.8, "seed": 4,
                                  "thinking": {"type": "enabled"}}),
        ("/v1/chat/completions", {"model": model, "messages": [{"role": "user", "content": "Weather in Paris?"}],
                                  "tools": tools, "tool_choice": "required", "thinking": {"type": "disabled"},
                                  "max_tokens": 48, "temperature": 0}),
        ("/v1/chat/completions", {"model": model, "messages": user, "max_tokens": 12, "n": 2, "temperature": 1.0,
                                  "seed": 8, "logprobs": True, "top_logprobs": 2, "thinking": {"type": "disabled"}}),
        ("/v1/completions", {"model": model, "prompt": "def quicksort(xs):", "max_tokens": 24, "temperature": 0,
                             "stop": ["\n\n\n"]}),
        ("/v1/completions", {"model": model, "prompt": "class Node:", "max_tokens": 16, "n": 2, "temperature": 0.9,
                             "seed": 21, "logprobs": 2}),
    ]
    want = offline(a.dsinfer, a.model, cases)
    for (url, body), off in zip(cases, want):
        name = f"{url} {json.dumps({k: v for k, v in body.items() if k not in ('messages', 'tools', 'model')})}"
        extra = {k: body[k] for k in ("thinking", "top_k") if k in body}
        args = {k: v for k, v in body.items() if k not in extra}
        if url == "/v1/chat/completions":
            plain = client.chat.completions.create(**args, extra_body=extra).model_dump()
            same = choices_of(plain) == choices_of(off)
            if not same:
                print("  server: ", json.dumps(choices_of(plain))[:600], "\n  offline:", json.dumps(choices_of(off))[:600])
            check(same, "chat equals offline generate: " + name)
            chunks = list(client.chat.completions.create(**args, extra_body=extra, stream=True,
                                                         stream_options={"include_usage": True}))
            msgs, usage = fold_chat(chunks)
            check(same_as_plain_chat(msgs, plain), "chat stream folds to the response: " + name)
            check(usage == plain["usage"] or usage == {**plain["usage"], **{k: None for k in usage if k not in plain["usage"]}},
                  "stream usage chunk equals the response usage: " + name)
        else:
            plain = client.completions.create(**args).model_dump()
            check(choices_of(plain) == choices_of(off), "completion equals offline generate: " + name)
            chunks = list(client.completions.create(**args, stream=True, stream_options={"include_usage": True}))
            texts = {}
            for ch in chunks:
                for c in ch.choices:
                    texts[c.index] = texts.get(c.index, "") + c.text
            check(texts == {c["index"]: c["text"] for c in plain["choices"]}, "completion stream folds to the response: " + name)
            check(chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == plain["usage"]["completion_tokens"],
                  "completion stream ends with the usage: " + name)
    think = client.chat.completions.create(**{k: v for k, v in cases[1][1].items() if k != "thinking"},
                                           extra_body={"thinking": {"type": "enabled"}})
    check(bool((think.choices[0].message.model_extra or {}).get("reasoning_content")), "thinking mode returns reasoning_content")

    errors(a, srv, client, model)
    disconnect(srv, client, model)


def defaults(client, model):
    """What a new user sends first: standard OpenAI fields only, the model's chat defaults (the shipped model:
    thinking off). Each answer must carry content or tool calls."""
    user = [{"role": "user", "content": "Write a Python function that reverses a string."}]
    r = client.chat.completions.create(model=model, messages=user, max_tokens=32)
    m = r.choices[0].message
    check(bool(m.content) and not (m.model_extra or {}).get("reasoning_content"),
          f"plain chat answers with content, no reasoning ({m.content!r})")
    text = "".join(c.choices[0].delta.content or "" for c in
                   client.chat.completions.create(model=model, messages=user, max_tokens=32, stream=True) if c.choices)
    check(bool(text), f"streamed chat answers with content ({text!r})")
    # "strict": true (OpenAI's function field) holds the call to its schema: the shipped model was not trained on
    # tool calls, a real model makes them without it.
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city", "strict": True,
              "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 24}},
                             "required": ["city"], "additionalProperties": False}}}]
    r = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Weather in Paris?"}],
                                       tools=tools, tool_choice="required", max_tokens=300)
    calls = r.choices[0].message.tool_calls or []
    check(len(calls) > 0 and calls[0].function.name == "get_weather" and isinstance(json.loads(calls[0].function.arguments), dict),
          f"tool_choice required returns a tool call ({r.choices[0].message})")
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 16}, "year": {"type": "integer"}},
              "required": ["name", "year"], "additionalProperties": False}
    r = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "A Python release as JSON."}],
                                       response_format={"type": "json_schema", "json_schema": {"name": "release", "schema": schema}},
                                       max_tokens=64)
    content = r.choices[0].message.content or ""
    try:
        value = json.loads(content)
    except ValueError:
        value = None
    check(isinstance(value, dict) and set(value) == {"name", "year"}, f"json_schema answer is the schema's object ({content!r})")


def errors(a, srv, client, model):
    def status_of(fn):
        try:
            fn()
        except openai.APIStatusError as e:
            body = e.body if isinstance(e.body, dict) else {}
            return e.status_code, body
        return 200, {}

    s, b = status_of(lambda: client.completions.create(model=model, prompt="x", temperature=-1))
    check(s == 400 and b.get("param") == "temperature", f"400 names the field (got {s} {b})")
    bad = openai.OpenAI(base_url=srv.url + "/v1", api_key="wrong", max_retries=0)
    s, _ = status_of(lambda: bad.completions.create(model=model, prompt="x", max_tokens=2))
    check(s == 401, f"401 for a wrong API key (got {s})")
    s, b = status_of(lambda: client.completions.create(model="gpt-4o", prompt="x", max_tokens=2))
    check(s == 404 and b.get("code") == "model_not_found", f"404 for an unknown model (got {s})")
    s, _ = status_of(lambda: client.get("/chat/completions", cast_to=object))
    check(s == 405, f"405 for GET on a POST endpoint (got {s})")
    s, _ = status_of(lambda: client.completions.create(model=model, prompt="x" * (9 << 20), max_tokens=2))
    check(s == 413, f"413 for a body over the limit (got {s})")
    busy = Server(a.dsinfer, a.model, "--max-waiting-requests", "0")
    try:
        c2 = openai.OpenAI(base_url=busy.url + "/v1", api_key="none", max_retries=0)
        s, b = status_of(lambda: c2.completions.create(model=model, prompt="x", max_tokens=2))
        check(s == 503 and b.get("code") == "overloaded", f"503 when the queue is full (got {s})")
    finally:
        busy.stop()


def disconnect(srv, client, model):
    stream = client.completions.create(model=model, prompt="import sys", max_tokens=900, stream=True,
                                       extra_body={"ignore_eos": True})
    n = 0
    for _ in stream:
        n += 1
        if n == 5:
            break
    stream.close()  # the client hangs up mid-stream
    slots, aborted = None, None
    for _ in range(200):
        time.sleep(0.05)
        slots = srv.metric("dsinfer_state_cache_slots_used")
        aborted = srv.metric('dsinfer_request_success_total{finished_reason="abort"}')
        if slots == 0 and aborted:
            break
    check(slots == 0 and aborted == 1, f"disconnect mid-stream aborts the request and frees its state ({slots}, {aborted})")
    r = client.completions.create(model=model, prompt="x = ", max_tokens=4, temperature=0)
    check(r.choices[0].finish_reason == "length", "the server keeps serving after a disconnect")


if __name__ == "__main__":
    sys.exit(main())
