"""The conversations and model outputs of the chat parity goldens (see gen_chat_parity.py).

Bodies are Python values; N("1e15") is a JSON number written with exactly that spelling, and dumps() writes
the request text with it (so the reference and dsinfer both parse "1e15", not Python's repr of a float).
"""
import json


class N(str):
    """A JSON number literal, written verbatim."""


def dumps(v):
    if isinstance(v, N):
        return str(v)
    if isinstance(v, dict):
        return "{" + ", ".join(json.dumps(k, ensure_ascii=False) + ": " + dumps(x) for k, x in v.items()) + "}"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(dumps(x) for x in v) + "]"
    return json.dumps(v, ensure_ascii=False)


def U(c):
    return {"role": "user", "content": c}


def S(c):
    return {"role": "system", "content": c}


def A(c, **k):
    return dict(role="assistant", content=c, **k)


def T(i, c):
    return {"role": "tool", "tool_call_id": i, "content": c}


def TC(i, name, args):
    """A tool call; args is the arguments string (JSON text, numbers spelled as given)."""
    return {"id": i, "type": "function", "function": {"name": name, "arguments": args if isinstance(args, str) else dumps(args)}}


def tool(name, params=None, desc=None, strict=None):
    f = {"name": name}
    if desc is not None:
        f["description"] = desc
    if params is not None:
        f["parameters"] = params
    if strict is not None:
        f["strict"] = strict
    return {"type": "function", "function": f}


ND = {"thinking": {"type": "disabled"}}
TH = {"thinking": {"type": "enabled"}}

# ---- schemas with keys in non-alphabetical order, nested, and numbers in every notation ----
SEARCH = tool("search_docs", {
    "type": "object",
    "properties": {
        "query": {"type": "string", "description": "What to look for", "minLength": 1},
        "limit": {"type": "integer", "minimum": 1, "maximum": 50, "default": 10},
        "filters": {"type": "object", "properties": {
            "year": {"type": "integer", "exclusiveMinimum": 1900},
            "lang": {"type": "array", "items": {"type": "string", "enum": ["zh", "en", "de"]}},
            "author": {"type": "object", "properties": {"last": {"type": "string"}, "first": {"type": "string"}}},
        }},
        "boost": {"type": "number", "default": N("1.5e-7"), "multipleOf": N("0.00001")},
    },
    "required": ["query"],
}, "Search the documentation — 文档搜索")
NUMBERS = tool("set_numbers", {
    "type": "object",
    "properties": {
        "big": {"type": "number", "default": N("1e15"), "maximum": N("1e16")},
        "small": {"type": "number", "default": N("1e-05"), "minimum": N("1e-6")},
        "zero": {"type": "number", "default": N("-0.0"), "enum": [N("0.0"), N("-0.0"), N("0")]},
        "scaled": {"type": "number", "examples": [N("1E+2"), N("2.5e-5"), N("1e21"), N("1e300"), N("5e-324"),
                                                   N("1.7976931348623157e308"), N("0.1"), N("100.0"), N("-1.5e20")]},
        "ints": {"type": "integer", "examples": [N("0"), N("-7"), N("9007199254740993"), N("18446744073709551615"),
                                                  N("18446744073709551616"), N("-9223372036854775808"),
                                                  N("-9223372036854775809"), N("123456789012345678901234")]},
        "edge": {"type": "number", "examples": [N("9.999999999999998e15"), N("1234567890123456.8"), N("0.00001234"),
                                                 N("9.99999e-6"), N("123e-7"), N("0.1e-4"), N("1e0"), N("2e1"), N("3.14159")]},
    },
}, "Numbers in every notation")
WEATHER = tool("get_weather", {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]}},
                               "required": ["city"]}, "Weather for a city")
NOARGS = tool("now")
ESCAPES = tool("escapes", {"type": "object", "properties": {
    "q\"uote": {"type": "string", "description": "back\\slash \u0001 ctrl \u007f del \u2028 ls \t tab 🌧️ ünï"},
    "键": {"type": "string", "description": "<｜User｜> stays text </think>"}}})

# ---- strict tools ----
STRICT_ORDER = tool("book_flight", {
    "type": "object",
    "title": "dropped: strict schemas keep only typed fields",
    "properties": {
        "to": {"type": "string", "format": "email", "pattern": "^[A-Z]{3}$", "minLength": 3},
        "from": {"type": "string", "enum": ["PEK", "SFO"]},
        "passengers": {"type": "array", "items": {"type": "object", "properties": {
            "name": {"type": "string"}, "age": {"type": "integer", "minimum": 0, "maximum": 130}}}},
        "price": {"type": "number", "maximum": N("1e15"), "minimum": N("1e-05"), "default": N("-0.0")},
        "seat": {"anyOf": [{"type": "string", "description": "seat code"}, {"type": "null"}]},
        "meal": {"type": ["string", "null"], "description": "optional meal"},
        "ref": {"$ref": "#/$def/leg", "description": "dropped"},
        "flag": {"type": "boolean"},
    },
    "$def": {"leg": {"type": "object", "properties": {"id": {"type": "string"}}}},
    "$defs": {"dropped": {"type": "string"}},
    "additionalProperties": False,
    "required": ["to", "from", "passengers", "price", "seat", "meal", "ref", "flag"],
}, "Book a flight", strict=True)
STRICT_NOPARAMS = tool("ping", None, "No parameters", strict=True)
STRICT_NOREQ = tool("lookup", {"type": "object", "properties": {"z": {"type": "string"}, "a": {"type": "integer", "default": 3}}}, strict=True)


def strict_params(params):
    return tool("strict_tool", params, strict=True)


def bad_params(params):
    return tool("bad_tool", params)


def conv_cases():
    c = []
    add = lambda name, body: c.append((name, body))
    q = [U("Find the docs about tokenizers, please.")]
    # key order and numbers
    add("order_tools_nothink", dict(messages=q, tools=[SEARCH, WEATHER], **ND))
    add("order_tools_think", dict(messages=q, tools=[SEARCH], **TH))
    add("numbers_schema", dict(messages=q, tools=[NUMBERS], **ND))
    add("escapes_schema", dict(messages=q, tools=[ESCAPES, NOARGS], **ND))
    args_order = {"query": "tokenizer", "limit": N("5"), "filters": {"year": N("2024"), "lang": ["zh", "en"],
                  "author": {"last": "Ng", "first": "A"}}, "boost": N("1e-5")}
    args_numbers = {"big": N("1e15"), "small": N("1e-05"), "zero": N("-0.0"), "scaled": [N("1E+2"), N("2.5e-5"), N("1e21")],
                    "ints": [N("18446744073709551615"), N("-9223372036854775809")], "edge": N("1234567890123456.8"),
                    "text": "1e15 stays text", "nested": {"b": N("1.0"), "a": [True, False, None, {"z": N("0.1")}]}}
    calls = [TC("call_b", "search_docs", args_order), TC("call_a", "set_numbers", args_numbers)]
    results = [T("call_a", "numbers set"), T("call_b", "3 hits: a, b, c")]
    add("multi_turn_tools_think", dict(messages=q + [A("", reasoning_content="I should search.", tool_calls=calls)] + results +
                                       [A("Found 3 documents.", reasoning_content="Summarise."), U("Thanks! And the weather in Paris?")],
                                       tools=[SEARCH, NUMBERS, WEATHER], **TH))
    add("multi_turn_tools_nothink", dict(messages=q + [A("Searching.", tool_calls=calls)] + results + [A("Done.")],
                                         tools=[SEARCH, NUMBERS], **ND))
    add("tool_results_then_user", dict(messages=q + [A(None, tool_calls=calls)] + results + [U("continue"), U(""), U("more")],
                                       tools=[SEARCH, NUMBERS], **ND))
    add("multi_round_agent", dict(messages=[S("You are an agent."), U("Weather in Paris and Rome?"),
                                            A("", reasoning_content="two calls", tool_calls=[TC("c2", "get_weather", '{"city": "Rome"}'),
                                                                                              TC("c1", "get_weather", '{"unit": "c", "city": "Paris"}')]),
                                            T("c1", "18C"), T("c2", "21C"),
                                            A("", reasoning_content="now the time", tool_calls=[TC("c3", "now", "{}")]),
                                            T("c3", "12:00"), A("Paris 18C, Rome 21C at noon.")],
                                  tools=[WEATHER, NOARGS], **TH))
    add("missing_reasoning_think", dict(messages=q + [A("", tool_calls=[TC("x", "now", "{}")]), T("x", "noon")], tools=[NOARGS], **TH))
    add("tool_calls_without_tools", dict(messages=q + [A("", tool_calls=[TC("x", "now", '{"tz": "UTC", "offset": -0.0}')]), T("x", "noon"),
                                                      U("ok")], **TH))
    add("args_escapes", dict(messages=q + [A("", tool_calls=[TC("e", "escapes", {"q\"uote": "a \"b\" \\ \n\t \u0001 <｜User｜>",
                                                                                   "键": ["值", N("2.50"), {"k": "\u2028"}]})]), T("e", "ok")],
                             tools=[ESCAPES], **ND))
    # strict tools
    add("strict_normalised", dict(messages=q, tools=[STRICT_ORDER, STRICT_NOPARAMS, STRICT_NOREQ], **ND))
    add("strict_think_call", dict(messages=q + [A("", reasoning_content="book it", tool_calls=[
        TC("s1", "book_flight", {"to": "SFO", "from": "PEK", "price": N("1e3")})]), T("s1", "booked")], tools=[STRICT_ORDER], **TH))
    add("strict_tool_choice_none_mixed", dict(messages=q, tools=[STRICT_ORDER, WEATHER], tool_choice="none", **ND))
    add("strict_named", dict(messages=q, tools=[STRICT_ORDER, STRICT_NOPARAMS], tool_choice={"type": "function", "function": {"name": "ping"}}, **ND))
    strict_ok = [
        ("strict_reject_anyof_top", {"anyOf": [{"type": "object", "properties": {"a": {"type": "string"}}}]}),
        ("strict_ref_kept", {"type": "object", "properties": {"r": {"$ref": "#/nowhere"}}}),
        ("strict_int_bounds", {"type": "object", "properties": {"n": {"type": "integer", "minimum": N("-5"), "const": N("9223372036854775807")}}}),
        ("strict_number_bounds", {"type": "object", "properties": {"x": {"type": "number", "minimum": N("1"), "exclusiveMaximum": N("2.5e-5")}}}),
        ("strict_empty_top", {"type": "object"}),
        ("strict_null_fields", {"type": "object", "properties": None, "required": None, "additionalProperties": None, "description": None}),
        ("strict_description_order", {"description": "top first", "properties": {"b": {"description": "d", "type": "boolean"}}, "type": "object"}),
    ]
    for name, p in strict_ok:
        add(name, dict(messages=q, tools=[strict_params(p)], **ND))
    strict_bad = [
        ("strict_reject_required_missing", {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"}}, "required": ["a"]}),
        ("strict_reject_required_unknown", {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a", "z"]}),
        ("strict_reject_required_dup", {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a", "a"]}),
        ("strict_reject_additional_true", {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": True}),
        ("strict_reject_additional_schema", {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": {"type": "string"}}),
        ("strict_reject_empty_nested", {"type": "object", "properties": {"o": {"type": "object"}}}),
        ("strict_reject_top_string", {"type": "string"}),
        ("strict_reject_type_array_top", {"type": ["object"]}),
        ("strict_reject_format", {"type": "object", "properties": {"d": {"type": "string", "format": "date-time"}}}),
        ("strict_reject_int_float_bound", {"type": "object", "properties": {"n": {"type": "integer", "minimum": N("1.0")}}}),
        ("strict_reject_int_too_big", {"type": "object", "properties": {"n": {"type": "integer", "maximum": N("9223372036854775808")}}}),
        ("strict_reject_no_type", {"type": "object", "properties": {"x": {"description": "no type"}}}),
        ("strict_reject_array_no_items", {"type": "object", "properties": {"l": {"type": "array"}}}),
        ("strict_reject_unknown_type", {"type": "object", "properties": {"l": {"type": "tuple"}}}),
        ("strict_reject_anyof_untyped", {"type": "object", "properties": {"u": {"anyOf": [{"$ref": "#/x"}]}}}),
        ("strict_reject_type_array_object", {"type": "object", "properties": {"u": {"type": ["object", "null"]}}}),
        ("strict_reject_enum_numbers", {"type": "object", "properties": {"s": {"type": "string", "enum": [1, 2]}}}),
        ("strict_reject_description_number", {"type": "object", "description": 5, "properties": {"s": {"type": "string"}}}),
    ]
    for name, p in strict_bad:
        add(name, dict(messages=q, tools=[strict_params(p)], **ND))
    add("strict_reject_mixed", dict(messages=q, tools=[STRICT_NOPARAMS, WEATHER], **ND))
    add("strict_reject_with_response_format", dict(messages=q, tools=[STRICT_NOPARAMS], response_format={"type": "text"}, **ND))
    add("strict_flag_not_bool", dict(messages=q, tools=[tool("f", {"type": "object"}, strict="yes")], **ND))
    # non-strict schema rules
    nonstrict_bad = [
        ("params_reject_no_type", {"properties": {"a": {"type": "string"}}}),
        ("params_reject_type_string", {"type": "string"}),
        ("params_reject_type_list", {"type": ["object"]}),
        # "parameters": {} is accepted on purpose (OpenAI and vLLM accept it; issue 36, docs/decisions.md): not here
        ("params_reject_properties_number", {"type": "object", "properties": 5}),
        ("params_reject_bad_type_name", {"type": "object", "properties": {"a": {"type": "strin"}}}),
        ("params_reject_required_string", {"type": "object", "required": "a"}),
        ("params_reject_required_dup", {"type": "object", "required": ["a", "a"]}),
        ("params_reject_minlength_negative", {"type": "object", "minLength": -1}),
        ("params_reject_bad_regex", {"type": "object", "properties": {"a": {"type": "string", "pattern": "a{2,1}"}}}),
        ("params_reject_bad_pattern_property", {"type": "object", "patternProperties": {"(": {"type": "string"}}}),
        ("params_reject_dangling_ref", {"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}}),
        ("params_reject_remote_ref", {"type": "object", "properties": {"a": {"$ref": "https://example.com/s.json"}}}),
        ("params_reject_items_array", {"type": "object", "properties": {"a": {"type": "array", "items": [{"type": "string"}]}}}),
        ("params_reject_allof_empty", {"type": "object", "allOf": []}),
        ("params_reject_title_number", {"type": "object", "title": 5}),
        ("params_reject_multipleof_zero", {"type": "object", "properties": {"n": {"type": "number", "multipleOf": 0}}}),
        ("params_reject_unknown_metaschema", {"type": "object", "$schema": "http://example.com/my-schema"}),
        ("params_reject_defs_bad", {"type": "object", "$defs": {"a": {"type": "nope"}}}),
        ("params_reject_type_empty_list", {"type": []}),
    ]
    for name, p in nonstrict_bad:
        add(name, dict(messages=q, tools=[bad_params(p)], **ND))
    nonstrict_ok = [
        ("params_ok_unknown_keywords", {"type": "object", "x-vendor": {"type": 5}, "properties": {"a": True, "b": {"format": "nope"}}}),
        ("params_ok_local_ref", {"type": "object", "$defs": {"leg": {"type": "string"}}, "properties": {"a": {"$ref": "#/$defs/leg"}},
                                 "additionalProperties": {"type": "integer", "minimum": N("1e-5")}}),
        ("params_ok_draft7_items", {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
                                    "properties": {"t": {"type": "array", "items": [{"type": "string"}, {"type": "number"}]}}}),
        ("params_ok_min_length_float", {"type": "object", "minProperties": N("1.0"), "enum": [], "const": None}),
        ("params_null", None),
    ]
    for name, p in nonstrict_ok:
        add(name, dict(messages=q, tools=[tool("ok_tool", p, "desc")], **ND))
    add("params_bad_but_tool_choice_none", dict(messages=q, tools=[bad_params({"type": "string"})], tool_choice="none", **ND))
    add("params_reject_missing_strict_false", dict(messages=q, tools=[tool("f", {"type": "string"}, strict=False)], **ND))
    # tool names, choices
    add("reject_tool_name_space", dict(messages=q, tools=[tool("get weather", {"type": "object"})], **ND))
    add("reject_tool_name_dot", dict(messages=q, tools=[tool("ns.get", {"type": "object"})], tool_choice="none", **ND))
    add("reject_tool_name_unicode", dict(messages=q, tools=[tool("天气", {"type": "object"})], **ND))
    add("reject_tool_name_empty", dict(messages=q, tools=[tool("", {"type": "object"})], **ND))
    add("reject_tool_name_too_long", dict(messages=q, tools=[tool("x" * 129, {"type": "object"})], **ND))
    add("tool_name_128", dict(messages=q, tools=[tool("y" * 128, {"type": "object"})], **ND))
    add("reject_duplicate_tool_names", dict(messages=q, tools=[WEATHER, WEATHER], **ND))
    add("reject_tool_type", dict(messages=q, tools=[{"type": "retrieval", "function": {"name": "a"}}], **ND))
    add("required_choice", dict(messages=q, tools=[WEATHER, SEARCH], tool_choice="required", **ND))
    add("named_choice", dict(messages=q, tools=[WEATHER, SEARCH], tool_choice={"type": "function", "function": {"name": "search_docs"}}, **ND))
    add("reject_named_unknown", dict(messages=q, tools=[WEATHER], tool_choice={"type": "function", "function": {"name": "nope"}}, **ND))
    add("reject_required_thinking", dict(messages=q, tools=[WEATHER], tool_choice="required", **TH))
    add("reject_named_thinking", dict(messages=q, tools=[WEATHER], tool_choice={"type": "function", "function": {"name": "get_weather"}}, **TH))
    add("required_without_tools", dict(messages=q, tool_choice="required", **TH))
    add("named_without_tools", dict(messages=q, tool_choice={"type": "function", "function": {"name": "ghost"}}, **ND))
    add("reject_tool_choice_word", dict(messages=q, tools=[WEATHER], tool_choice="any", **ND))
    add("reject_tool_choice_no_type", dict(messages=q, tools=[WEATHER], tool_choice={"function": {"name": "get_weather"}}, **ND))
    add("tool_choice_none_think", dict(messages=q + [A("ok", reasoning_content="hidden")], tools=[WEATHER], tool_choice="none", **TH))
    # thinking and reasoning effort
    for eff in ["none", "minimal", "low", "medium", "high", "xhigh", "max", "ultra"]:
        add(f"effort_{eff}", dict(messages=[U("2+2?")], reasoning_effort=eff))
        add(f"effort_{eff}_thinking_on", dict(messages=[U("2+2?")], reasoning_effort=eff, **TH))
    add("effort_max_thinking_off", dict(messages=[U("2+2?")], reasoning_effort="max", **ND))
    add("thinking_adaptive", dict(messages=[U("2+2?")], thinking={"type": "adaptive", "budget_tokens": 1024}))
    add("thinking_null", dict(messages=[U("2+2?")], thinking=None, reasoning_effort=None))
    add("reject_effort_unknown", dict(messages=[U("2+2?")], reasoning_effort="extreme"))
    add("reject_thinking_type", dict(messages=[U("2+2?")], thinking={"type": "on"}))
    add("reject_thinking_no_type", dict(messages=[U("2+2?")], thinking={"budget_tokens": 5}))
    # messages
    add("developer_role_rejected", dict(messages=[{"role": "developer", "content": "be brief"}, U("hi")]))
    add("reject_unknown_role", dict(messages=[{"role": "wizard", "content": "x"}]))
    add("reject_empty_messages", dict(messages=[]))
    add("reject_assistant_no_content", dict(messages=[U("a"), {"role": "assistant"}, U("b")]))
    add("reject_assistant_null_content", dict(messages=[U("a"), A(None), U("b")]))
    add("reject_empty_tool_calls", dict(messages=[U("a"), A("x", tool_calls=[]), U("b")]))
    add("reject_duplicate_call_ids", dict(messages=[U("a"), A("", tool_calls=[TC("d", "now", "{}"), TC("d", "now", "{}")]), T("d", "1"), T("d", "2")], tools=[NOARGS]))
    add("reject_missing_tool_result", dict(messages=[U("a"), A("", tool_calls=[TC("m1", "now", "{}"), TC("m2", "now", "{}")]), T("m1", "1"), U("b")], tools=[NOARGS]))
    add("reject_tool_result_wrong_id", dict(messages=[U("a"), A("", tool_calls=[TC("w", "now", "{}")]), T("zzz", "1")], tools=[NOARGS]))
    add("reject_tool_result_twice", dict(messages=[U("a"), A("", tool_calls=[TC("w1", "now", "{}"), TC("w2", "now", "{}")]), T("w1", "1"), T("w1", "2")], tools=[NOARGS]))
    add("reject_stray_tool_message", dict(messages=[U("a"), T("x", "1")]))
    add("reject_tool_call_no_type", dict(messages=[U("a"), A("", tool_calls=[{"id": "n", "function": {"name": "now", "arguments": "{}"}}]), T("n", "1")], tools=[NOARGS]))
    add("tool_call_empty_id_and_odd_name", dict(messages=[U("a"), A("", tool_calls=[TC("", "odd name.x", '{"k": 1}')]), T("", "1")], **ND))
    add("reject_latest_reminder_list", dict(messages=[U("a"), {"role": "latest_reminder", "content": [{"type": "text", "text": "x"}]}]))
    add("reject_user_null_content", dict(messages=[{"role": "user", "content": None}]))
    add("reject_unknown_part", dict(messages=[{"role": "user", "content": [{"type": "audio", "audio": "x"}]}]))
    add("reject_name_not_string", dict(messages=[{"role": "user", "content": "a", "name": 5}]))
    add("names_and_parts", dict(messages=[{"role": "system", "content": [{"type": "text", "text": "s1"}, {"type": "text", "text": "s2"}], "name": "sys"},
                                          {"role": "user", "name": "alice", "content": [{"type": "text", "text": "look:"},
                                           {"type": "image_url", "image_url": {"url": "https://x/y.png", "detail": "high"}},
                                           {"type": "file", "file": "ignored", "file_data": "data:image/png;base64,AA"}]}], **ND))
    add("reject_image_detail", dict(messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "u", "detail": "ultra"}}]}]))
    add("systems_empty_and_billing", dict(messages=[S(""), S("x-anthropic-billing-header: cc=1;\n  You are helpful."), U("a"),
                                                    S("late system"), U("b"), S("x-anthropic-billing-header: only")], **ND))
    add("users_merge_empty", dict(messages=[U(""), U("b"), U(""), U("c"), A("r"), U(""), U("")], **ND))
    add("latest_reminder_turns", dict(messages=[U("a"), {"role": "latest_reminder", "content": "date: today"}, U("b"),
                                                {"role": "latest_reminder", "content": "r2"}], **TH))
    add("grounding_tokens_assistant", dict(messages=[U("where?"), A("It is <｜ref｜>the cat<｜/ref｜><｜box｜>(1,2),(3,4)<｜/box｜> <｜User｜>",
                                                                   reasoning_content="<｜point｜>x<｜/point｜><｜polygon｜>p<｜/polygon｜>"),
                                                     U("<｜ref｜> in user text stays text")], tools=[WEATHER], **TH))
    add("prefix_think_reasoning", dict(messages=[U("a"), A("", reasoning_content="partial thought", prefix=True)], **TH))
    add("prefix_think_content", dict(messages=[U("a"), A("Once upon", reasoning_content="r", prefix=True)], **TH))
    add("prefix_nothink", dict(messages=[U("a"), A("Once upon", reasoning_content="dropped", prefix=True)], **ND))
    add("prefix_then_empty_system", dict(messages=[U("a"), A("Once", prefix=True), S("")], **ND))
    add("reject_prefix_then_system", dict(messages=[U("a"), A("Once", prefix=True), S("s")], **ND))
    add("reject_prefix_not_last", dict(messages=[U("a"), A("x", prefix=True), U("b")], **ND))
    add("reject_prefix_after_tool_calls", dict(messages=[U("a"), A("", tool_calls=[TC("p", "now", "{}")]), T("p", "1"), A("The time is", prefix=True)], **ND))
    add("reject_prefix_with_tools", dict(messages=[U("a"), A("x", prefix=True)], tools=[WEATHER], tool_choice="none", **ND))
    add("reject_prefix_json_object", dict(messages=[U("answer in json"), A("{", prefix=True)], response_format={"type": "json_object"}, **ND))
    add("prefix_false_then_more", dict(messages=[U("a"), A("x", prefix=False), U("b")], **ND))
    # response formats
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer", "maximum": N("1e3")},
              "scores": {"type": "array", "items": {"type": "number", "minimum": N("-0.0"), "maximum": N("1e-05")}}}, "required": ["name", "age"]}
    add("json_schema_order", dict(messages=[U("Give me a person.")], response_format={"type": "json_schema", "json_schema": {"name": "p", "schema": schema}}, **ND))
    add("json_schema_strict_as_written", dict(messages=[U("Give me a person.")], response_format={"type": "json_schema", "json_schema": {
        "name": "p", "strict": True, "schema": {"type": "object", "properties": {"z": {"type": "string"}, "a": {"type": "number", "default": N("1e16")}},
                                                "required": ["z", "a"], "title": "kept as written"}}}, **TH))
    add("reject_json_schema_strict_required", dict(messages=[U("x")], response_format={"type": "json_schema", "json_schema": {
        "name": "p", "strict": True, "schema": {"type": "object", "properties": {"z": {"type": "string"}, "a": {"type": "number"}}, "required": ["z"]}}}, **ND))
    add("reject_json_schema_strict_empty", dict(messages=[U("x")], response_format={"type": "json_schema", "json_schema": {
        "strict": True, "schema": {"type": "object"}}}, **ND))
    add("reject_json_schema_strict_top", dict(messages=[U("x")], response_format={"type": "json_schema", "json_schema": {
        "strict": True, "schema": {"type": "array", "items": {"type": "string"}}}}, **ND))
    add("json_schema_nonstrict_bool", dict(messages=[U("x")], response_format={"type": "json_schema", "json_schema": {"schema": True}}, **ND))
    add("json_schema_nonstrict_string", dict(messages=[U("x")], response_format={"type": "json_schema", "json_schema": {"schema": {"type": "string", "maxLength": N("1e2")}}}, **TH))
    add("reject_json_schema_null", dict(messages=[U("x")], response_format={"type": "json_schema", "json_schema": {"schema": None}}, **ND))
    add("reject_json_schema_missing", dict(messages=[U("x")], response_format={"type": "json_schema", "json_schema": {"name": "n"}}, **ND))
    add("reject_json_schema_invalid", dict(messages=[U("x")], response_format={"type": "json_schema", "json_schema": {"schema": {"type": "object", "required": [1]}}}, **ND))
    add("json_object", dict(messages=[S("Reply in JSON."), U("list three colors")], response_format={"type": "json_object"}, **ND))
    add("json_object_word_in_tool_result", dict(messages=[U("a"), A("", tool_calls=[TC("j", "now", "{}")]), T("j", "use JSON")],
                                                response_format={"type": "json_object"}, **ND))
    add("reject_json_object_no_word", dict(messages=[U("list three colors")], response_format={"type": "json_object"}, **ND))
    add("reject_json_word_split", dict(messages=[U("js"), A("on"), U("x")], response_format={"type": "json_object"}, **ND))
    add("regex_format", dict(messages=[U("a number")], response_format={"type": "regex", "regex": "[0-9]+"}, **ND))
    add("text_format_with_tools", dict(messages=q, tools=[WEATHER], response_format={"type": "text"}, **TH))
    add("reject_response_format_type", dict(messages=[U("x")], response_format={"type": "yaml"}, **ND))
    add("json_schema_with_tools", dict(messages=q, tools=[WEATHER], response_format={"type": "json_schema", "json_schema": {"schema": schema}}, **ND))
    return c


REQUEST_CASES = conv_cases()

D = "｜DSML｜"


def dsml(calls):
    out = f"<{D}tool_calls>\n"
    for name, params in calls:
        out += f'<{D}invoke name="{name}">\n'
        for k, v, is_str in params:
            out += f'<{D}parameter name="{k}" string="{"true" if is_str else "false"}">{v}</{D}parameter>\n'
        out += f"</{D}invoke>\n"
    return out + f"</{D}tool_calls>"


_Q = [U("q")]
_TOOLS = [WEATHER, SEARCH, NUMBERS, NOARGS]
OUTPUT_CASES = [
    ("out_plain_nothink", dict(messages=_Q, tools=_TOOLS, **ND), "\n\nHello world!\nSecond line.\n"),
    ("out_think_content", dict(messages=_Q, tools=_TOOLS, **TH), "\nLet me think.\n\nStep 2.</think>\n\nThe answer is 4."),
    ("out_think_unfinished", dict(messages=_Q, **TH), "Still thinking when it stopped"),
    ("out_cjk_emoji", dict(messages=_Q, **TH), "思考中…🤔</think>答案是：四。👍"),
    ("out_call_think", dict(messages=_Q, tools=_TOOLS, **TH),
     "I need the weather.</think>Let me check.\n\n" + dsml([("get_weather", [("city", "Paris", True), ("unit", "c", True)])])),
    ("out_calls_order_numbers", dict(messages=_Q, tools=_TOOLS, **ND),
     dsml([("search_docs", [("query", "tok \"q\" \\ x", True), ("limit", "5", False),
                            ("filters", '{"year": 2024, "lang": ["zh", "en"], "author": {"last": "Ng", "first": "A"}}', False),
                            ("boost", "1e-05", False)]),
           ("set_numbers", [("big", "1000000000000000.0", False), ("zero", "-0.0", False), ("scaled", "[100.0, 0.000025, 1e+21]", False)]),
           ("now", [])])),
    ("out_calls_after_content", dict(messages=_Q, tools=_TOOLS, **ND), "Sure, checking both.\n\n" +
     dsml([("get_weather", [("city", "a\nb \"q\" 天气 🌧️", True)]), ("get_weather", [("city", "Rome", True), ("unit", "f", True)])])),
    ("out_required_choice", dict(messages=_Q, tools=_TOOLS, tool_choice="required", **ND),
     f'<{D}invoke name="get_weather">\n<{D}parameter name="city" string="true">Oslo</{D}parameter>\n</{D}invoke>\n</{D}tool_calls>'),
    ("out_named_choice", dict(messages=_Q, tools=_TOOLS, tool_choice={"type": "function", "function": {"name": "now"}}, **ND),
     f'<{D}invoke name="now">\n</{D}invoke>\n</{D}tool_calls>'),
    ("out_only_reasoning_then_call", dict(messages=_Q, tools=_TOOLS, **TH), "\n\nreasoning</think>\n\n" + dsml([("now", [])])),
    ("out_nested_values", dict(messages=_Q, tools=_TOOLS, **ND),
     dsml([("search_docs", [("filters", '{"lang": [], "author": {}}', False), ("limit", "null", False), ("query", "", True)])])),
    ("out_compact_values_verbatim", dict(messages=_Q, tools=_TOOLS, **ND),
     dsml([("get_weather", [("city", "[1,2]", False), ("unit", '{"a":1,"b":[true,null]}', False), ("x", " 5 ", False)])])),
    ("out_duplicate_parameter", dict(messages=_Q, tools=_TOOLS, **ND), dsml([("get_weather", [("city", "a", True), ("city", "b", True)])])),
    ("out_text_after_calls_dropped", dict(messages=_Q, tools=_TOOLS, **ND), dsml([("now", [])]) + "\n\ntrailing text"),
    ("out_second_block_dropped", dict(messages=_Q, tools=_TOOLS, **ND), dsml([("now", [])]) + "\n" + dsml([("get_weather", [])])),
    ("out_dsml_without_tools", dict(messages=_Q, **ND), "hi " + dsml([("now", [])])),
    ("out_dsml_tool_choice_none", dict(messages=_Q, tools=_TOOLS, tool_choice="none", **TH), "r</think>hi " + dsml([("now", [])])),
    ("out_calls_from_reasoning", dict(messages=_Q, tools=_TOOLS, **TH), "thinking\n\n" + dsml([("now", [])])),
    ("out_alternate_close", dict(messages=_Q, tools=_TOOLS, **ND),
     f'<{D}tool_calls>\n<{D}invoke name="now">\n</{D}invoke>\n</{D} calls>'),
    ("out_newlines_around_think_end", dict(messages=_Q, **TH), "\n\nr\n\n</think>\n\nc\n\n"),
    ("out_newlines_before_calls", dict(messages=_Q, tools=_TOOLS, **ND), "x\n\n\n\n" + dsml([("now", [])])),
    ("out_prefix_continues_content", dict(messages=[U("q"), A("Once", reasoning_content="r", prefix=True)], **TH), "\n\n upon a time"),
    ("out_prefix_continues_reasoning", dict(messages=[U("q"), A("", reasoning_content="r", prefix=True)], **TH), "\nmore</think>ok"),
    ("out_prefix_nothink", dict(messages=[U("q"), A("Once", prefix=True)], **ND), "\n\n upon"),
    ("out_think_start_literal", dict(messages=_Q, **TH), "<think>r</think>c"),
]
