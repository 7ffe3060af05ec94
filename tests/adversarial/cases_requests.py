"""Hostile request bodies through `serve` (HTTP) and `generate`: fields of the wrong type or out of range (each
400 names its field in "param"), numbers above 2^63 (printed as sent), constraints that must hold (a completed
constraint ends the request despite min_tokens / ignore_eos; a constraint that admits no output is a 400), JSON
outputs that must stay valid within 256 tokens (bounded numbers and whitespace), bodies with 200,000 keys
(linear-time parsing, the logit_bias limit) and oversized grammars."""
import json
import re
import time

import advlib

CHAT = [{"role": "user", "content": "Return the data as JSON only."}]


def comp(**kw):
    return {"prompt": "def main():\n", "max_tokens": 8, **kw}


def chat(**kw):
    return {"messages": CHAT, "thinking": {"type": "disabled"}, "max_tokens": 8, **kw}


# (name, endpoint, body, expected param, words the message must contain)
FIELD_ERRORS = [
    ("temperature_negative", "completions", comp(temperature=-1), "temperature", None),
    ("top_p_zero", "completions", comp(top_p=0), "top_p", None),
    ("top_k_2_63", "completions", comp(top_k=2**63), "top_k", str(2**63)),
    ("max_tokens_2_63", "completions", comp(max_tokens=2**63), "max_tokens", str(2**63)),
    ("max_tokens_2_64_minus_1", "completions", comp(max_tokens=2**64 - 1), "max_tokens", str(2**64 - 1)),
    ("max_tokens_past_model_len", "completions", comp(max_tokens=10**6), "max_tokens", "max_model_len"),
    ("min_tokens_above_max", "completions", comp(min_tokens=9, max_tokens=2), "min_tokens", None),
    ("n_zero", "completions", comp(n=0), "n", None),
    ("n_huge", "completions", comp(n=2**40), "n", None),
    ("seed_string", "completions", comp(seed="7"), "seed", None),
    ("stop_number", "completions", comp(stop=["a", 3]), "stop", None),
    ("stop_token_ids_2_64", "completions", comp(stop_token_ids=[2**64 - 1]), "stop_token_ids", str(2**64 - 1)),
    ("logit_bias_bad_key", "completions", comp(logit_bias={"x": 1}), "logit_bias", None),
    ("logit_bias_out_of_range", "completions", comp(logit_bias={"5": 1000}), "logit_bias", None),
    ("logprobs_2_63", "completions", comp(logprobs=2**63), "logprobs", str(2**63)),
    ("stream_string", "completions", comp(stream="yes"), "stream", None),
    ("prompt_negative_id", "completions", {"prompt": [1, -1]}, "prompt", None),
    ("prompt_id_2_63", "completions", {"prompt": [2**63]}, "prompt", str(2**63)),
    ("prompt_too_long", "completions", {"prompt": "x " * 3000}, "prompt", "max_model_len"),
    ("echo_true", "completions", comp(echo=True), "echo", None),
    ("guided_regex_invalid", "completions", comp(guided_regex="(a"), "guided_regex", None),
    ("guided_json_not_json", "completions", comp(guided_json="{nope"), "guided_json", None),
    ("structured_outputs_regex_number", "completions", comp(structured_outputs={"regex": 3}), "structured_outputs",
     None),
    ("two_constraints", "completions", comp(guided_regex="a", guided_choice=["a"]), None, "both constrain"),
    ("messages_empty", "chat", {"messages": []}, "messages", None),
    ("messages_bad_role", "chat", {"messages": [{"role": "robot", "content": "x"}]}, "messages", None),
    ("messages_on_completions", "completions", {"messages": CHAT}, "messages", None),
    ("tools_string", "chat", chat(tools="x"), "tools", None),
    ("tool_choice_unknown", "chat", chat(tool_choice="sometimes"), "tool_choice", None),
    ("response_format_xml", "chat", chat(response_format={"type": "xml"}), "response_format", None),
    ("reasoning_effort_lots", "chat", chat(reasoning_effort="lots"), "reasoning_effort", None),
    ("thinking_maybe", "chat", chat(thinking={"type": "maybe"}), "thinking", None),
    # A constraint that admits no output at all is refused at admission, naming its field.
    ("regex_unsatisfiable", "completions", comp(guided_regex="[^\\s\\S]"), "guided_regex", None),
    ("grammar_empty_language", "completions", comp(guided_grammar="root ::= root"), "guided_grammar", None),
    ("structured_grammar_empty_language", "completions", comp(structured_outputs={"grammar": "root ::= root"}),
     "structured_outputs", None),
]


def url_of(server, endpoint):
    return server.url + ("/v1/chat/completions" if endpoint == "chat" else "/v1/completions")


def field_error_cases(server):
    out = []
    for name, ep, body, param, words in FIELD_ERRORS:
        outcome, detail = advlib.expect_error(url_of(server, ep), body, param=param, in_message=words,
                                              not_in_message="-9223372036854775808")
        out.append((f"field:{name}", outcome, detail))
    return out


def matches(pattern):
    return lambda text, finish, n: None if re.fullmatch(pattern, text) and finish == "stop" else \
        f"output does not match {pattern!r} with finish stop"


def valid_json(schema_check=None):
    def check(text, finish, n):
        try:
            v = json.loads(text)
        except ValueError as e:
            return f"not valid JSON ({e})"
        if finish != "stop":
            return "finish is not stop"
        if schema_check:
            return schema_check(v)
        return None
    return check


# Constraints that must hold whatever min_tokens / ignore_eos say: (name, extra fields, check)
HOLDING = [
    ("choice_min_tokens", {"guided_choice": ["yes", "no"], "min_tokens": 10}, matches("yes|no")),
    ("choice_ignore_eos", {"guided_choice": ["yes", "no"], "ignore_eos": True}, matches("yes|no")),
    ("regex_min_tokens", {"guided_regex": "[0-9]{3}", "min_tokens": 8}, matches("[0-9]{3}")),
    ("regex_ignore_eos", {"guided_regex": "[0-9]{3}", "ignore_eos": True}, matches("[0-9]{3}")),
    ("json_boolean_min_tokens", {"guided_json": {"type": "boolean"}, "min_tokens": 10},
     valid_json(lambda v: None if isinstance(v, bool) else "not a boolean")),
    ("json_integer_ignore_eos", {"guided_json": {"type": "integer"}, "ignore_eos": True},
     valid_json(lambda v: None if isinstance(v, int) and abs(v) < 10**15 else "not a bounded integer")),
    ("json_number_sampled", {"guided_json": {"type": "number"}, "temperature": 1.0, "seed": 3},
     valid_json(lambda v: None if isinstance(v, (int, float)) and abs(v) < 10**15 else "not a bounded number")),
    ("json_object_min_tokens", {"response_format": {"type": "json_object"}, "min_tokens": 30},
     valid_json(lambda v: None if isinstance(v, dict) else "not an object")),
    ("grammar_min_tokens", {"guided_grammar": 'root ::= "ab" | "cd"', "min_tokens": 5}, matches("ab|cd")),
    ("choice_stop_token_ids_min_tokens", {"guided_choice": ["x"], "min_tokens": 4, "stop_token_ids": [0]},
     matches("x")),
]


def holding_cases(server):
    out = []
    for name, extra, check in HOLDING:
        ep = "chat" if "response_format" in extra else "completions"
        body = (chat if ep == "chat" else comp)(**{"max_tokens": 256, "temperature": 0, **extra})
        if ep == "chat":
            body["messages"] = [{"role": "user", "content": "Give me a JSON object."}]
        outcome, detail = advlib.expect_ok(url_of(server, ep), body, check, timeout=90)
        out.append((f"constraint:{name}", outcome, detail))
    return out


def holding_generate_cases(ctx):
    """The same constraints through `generate`, with and without --speculative dspark."""
    out = []
    bodies = []
    for name, extra, _ in HOLDING:
        b = comp(**{"max_tokens": 256, "temperature": 0, **extra})
        if "response_format" in extra:
            b = chat(**{"max_tokens": 256, "temperature": 0, **extra})
            b["messages"] = [{"role": "user", "content": "Give me a JSON object."}]
        bodies.append((name, b))
    for spec in ("off", "dspark"):
        rc, res, err = advlib.run_generate(ctx["binary"], ctx["model"], ctx["tmp"], f"holding_{spec}", bodies,
                                           ["--speculative", spec, "--speculative-cost-model", "off",
                                            "--max-model-len", "1024"], timeout=150)
        for name, extra, check in HOLDING:
            case = f"generate[{spec}]:{name}"
            if rc is None:
                out.append((case, "hang", err))
                continue
            if advlib.crashed(rc):
                out.append((case, "crash", f"rc {rc}: {err[-500:]}"))
                continue
            line = res.get(name)
            body = (line or {}).get("response", {}).get("body") if line else None
            if not body:
                out.append((case, "wrong", f"no result line (rc {rc}): {err[-300:]}"))
                continue
            text, finish, n = advlib.completion_text(body)
            problem = check(text, finish, n)
            out.append((case, "wrong" if problem else "ok", problem or f"{text[:40]!r} finish={finish}"))
    return out


def num(t="integer"):
    return {"type": t}


def obj(props, **extra):
    return {"type": "object", "properties": props, "required": list(props), **extra}


S = {"type": "string", "maxLength": 12}
# 24 schemas whose numbers have no bounds (the literals the model once ran on with) and whose whitespace is free:
# every output must be valid JSON, finished with "stop", within 256 tokens.
JSON24 = [
    num(), num("number"), obj({"n": num()}), obj({"x": num("number"), "y": num("number")}),
    obj({"id": num(), "name": S}), {"type": "array", "items": num(), "maxItems": 4},
    {"type": "array", "items": num("number"), "minItems": 1, "maxItems": 3}, obj({"a": obj({"b": num()})}),
    obj({"count": {"type": ["integer", "null"]}}), obj({"v": {"anyOf": [num(), S]}}),
    obj({"lat": num("number"), "lon": num("number"), "label": S}), obj({"min": {"type": "integer", "minimum": 0}}),
    obj({"max": {"type": "integer", "maximum": 0}}), obj({"p": {"type": "number", "exclusiveMinimum": 0}}),
    obj({"m": {"type": "array", "items": {"type": "array", "items": num(), "maxItems": 2}, "maxItems": 2}}),
    obj({"ok": {"type": "boolean"}, "code": num()}), obj({"price": num("number"), "qty": num()}),
    {"$defs": {"pt": obj({"x": num(), "y": num()})}, "type": "object",
     "properties": {"from": {"$ref": "#/$defs/pt"}, "to": {"$ref": "#/$defs/pt"}}, "required": ["from", "to"]},
    obj({"t": num("number"), "unit": {"enum": ["s", "ms"]}}), obj({"big": num(), "small": num(), "mid": num()}),
    obj({"vals": {"type": "array", "items": obj({"k": S, "v": num("number")}), "maxItems": 2}}),
    obj({"score": {"type": "number", "minimum": -1}}), obj({"e": {"oneOf": [num(), {"type": "boolean"}]}}),
    obj({"nested": obj({"deeper": obj({"n": num("number")})})}),
]


def json24_cases(ctx):
    """The 24 schemas, greedy and sampled, through `generate`, with and without --speculative dspark."""
    out = []
    prompts = ["Give me an example as JSON.\n", "Return the data as JSON only.\n", "{"]
    bodies = []
    for i, schema in enumerate(JSON24):
        for mode in ("greedy", "sampled"):
            samp = {"temperature": 0} if mode == "greedy" else {"temperature": 1.0, "seed": 100 + i}
            bodies.append((f"s{i:02d}_{mode}", {"prompt": prompts[i % 3], "max_tokens": 256,
                                                 "guided_json": schema, **samp}))
    for spec in ("off", "dspark"):
        rc, res, err = advlib.run_generate(ctx["binary"], ctx["model"], ctx["tmp"], f"json24_{spec}", bodies,
                                           ["--speculative", spec, "--speculative-cost-model", "off",
                                            "--max-model-len", "1024"], timeout=170)
        for cid, _ in bodies:
            case = f"json24[{spec}]:{cid}"
            if rc is None or advlib.crashed(rc):
                out.append((case, "hang" if rc is None else "crash", err[-500:]))
                continue
            body = (res.get(cid) or {}).get("response", {}).get("body")
            if not body:
                out.append((case, "wrong", f"no result (rc {rc}): {err[-300:]}"))
                continue
            text, finish, n = advlib.completion_text(body)
            problem = valid_json()(text, finish, n)
            out.append((case, "wrong" if problem else "ok", (problem or "") + f" tokens={n} {text[:50]!r}"))
    return out


def big_body_cases(server):
    out = []
    url = url_of(server, "completions")
    # 200,000 logit_bias entries: refused by the entry limit, and the body parses in linear time.
    lb = {str(i): 1 for i in range(200_000)}
    t0 = time.time()
    outcome, detail = advlib.expect_error(url, comp(logit_bias=lb), param="logit_bias", in_message="limit",
                                          timeout=20)
    out.append(("big:logit_bias_200k", outcome, f"{detail} [{time.time() - t0:.1f} s]"))
    # 200,000 keys in a field the server ignores ("user" must be a string: a clean 400 after a linear parse).
    t0 = time.time()
    body = '{"prompt": "x", "max_tokens": 1, "metadata": {' + ",".join(f'"k{i}": {i}' for i in range(200_000)) + "}}"
    try:
        st, parsed, text, secs = advlib.post(url, body, timeout=20)
        ok = st in (200, 400) and secs < 10
        out.append(("big:object_200k_keys", "ok" if ok else "wrong", f"{st} in {secs:.1f} s: {text[:120]}"))
    except advlib.Timeout as e:
        out.append(("big:object_200k_keys", "hang", str(e)))
    # Duplicate keys: the last value wins (as JSON parsers commonly do), and the answer names it.
    outcome, detail = advlib.expect_error(url, '{"prompt": "x", "temperature": 0.5, "temperature": -3}',
                                          param="temperature", in_message="-3")
    out.append(("big:duplicate_key_last_wins", outcome, detail))
    # A 1 MiB choice list: refused before compiling (grammar source limit), quickly.
    choices = [f"option-{i:06d}-" + "x" * 40 for i in range(20_000)]
    outcome, detail = advlib.expect_error(url, comp(guided_choice=choices), param="guided_choice", in_message="limit",
                                          timeout=20)
    out.append(("big:choice_1mib", outcome, detail))
    big_regex = "(" + "|".join(f"w{i}" for i in range(60_000)) + ")"
    outcome, detail = advlib.expect_error(url, comp(guided_regex=big_regex), param="guided_regex", in_message="limit",
                                          timeout=20)
    out.append(("big:regex_over_limit", outcome, detail))
    # Nesting, invalid UTF-8, a lone surrogate, an empty body, a body that is not an object.
    for name, raw in [("deep_nesting", '{"prompt": "x", "x": ' + "[" * 5000 + "]" * 5000 + "}"),
                      ("not_object", "[1, 2]"), ("empty_body", ""), ("truncated", '{"prompt": "x", "max_tok'),
                      ("invalid_utf8", b'{"prompt": "\xff\xfe"}'), ("nan_literal", '{"prompt": "x", "top_p": NaN}')]:
        outcome, detail = advlib.expect_error(url, raw)
        out.append((f"body:{name}", outcome, detail))
    return out


def compile_off_engine_thread_cases(server):
    """A request with a slow grammar (a 200 KiB choice list, under the limit) and a plain one sent just after it:
    the plain one must not wait for the other's compile (grammars compile on the connection's thread)."""
    import threading
    url = url_of(server, "completions")
    choices = [f"choice-number-{i:06d}-" + "y" * 20 for i in range(5_000)]
    big = {}

    def send_big():
        try:
            big["r"] = advlib.post(url, comp(guided_choice=choices, max_tokens=4), timeout=120)
        except Exception as e:  # noqa: BLE001
            big["e"] = e
        big["t"] = time.time()

    t = threading.Thread(target=send_big)
    t.start()
    time.sleep(0.3)
    try:
        st, parsed, text, secs = advlib.post(url, comp(max_tokens=2), timeout=60)
    except advlib.Timeout as e:
        t.join()
        return [("compile:plain_request_not_stalled", "hang", str(e))]
    small_done = time.time()
    t.join()
    if "e" in big:
        return [("compile:plain_request_not_stalled", "wrong", f"the big request failed: {big['e']}")]
    big_st, _, big_text, big_secs = big["r"]
    detail = f"plain {st} in {secs:.2f} s; choice list {big_st} in {big_secs:.2f} s"
    if st != 200 or big_st != 200:
        return [("compile:plain_request_not_stalled", "wrong", detail + f": {text[:200]} {big_text[:200]}")]
    stalled = big_secs > 1.5 and small_done >= big["t"] - 0.2
    out = [("compile:plain_request_not_stalled", "wrong" if stalled else "ok", detail)]
    try:
        import urllib.request
        metrics = urllib.request.urlopen(server.url + "/metrics", timeout=10).read().decode()
        m = re.search(r"^dsinfer_grammar_compile_seconds_total ([0-9.e+-]+)$", metrics, re.M)
        ok = m is not None and float(m.group(1)) > 0
        out.append(("compile:metrics_report_compile_time", "ok" if ok else "wrong",
                    m.group(0) if m else metrics[-300:]))
    except OSError as e:
        out.append(("compile:metrics_report_compile_time", "wrong", str(e)))
    return out


def run(ctx):
    server = ctx["server"]
    out = field_error_cases(server)
    out += holding_cases(server)
    out += big_body_cases(server)
    out += compile_off_engine_thread_cases(server)
    out += holding_generate_cases(ctx)
    out += json24_cases(ctx)
    return out
