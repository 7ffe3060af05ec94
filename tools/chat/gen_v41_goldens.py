#!/usr/bin/env python3
"""DeepSeek-V4.1 chat goldens for tests/unit/test_chat_v41.cpp, from an independent implementation: SGLang's port
of the V4.1 release encoder, sgl-project/sglang python/sglang/srt/entrypoints/openai/encoding_dsv41.py at commit
0e43c22447dcb0c53eee3832c8acba26e491bc94 (pure Python, stdlib only). It is third-party source and is not committed:
put it at /tmp/encoding_dsv41.py (or pass its directory as argv[1]) before running.

The encoder takes encoder messages, not an OpenAI request; this script is the adapter a server puts in front of
it (the same mapping dsinfer's V4.1 renderer implements):
  thinking_mode      "chat" when thinking.type is "disabled" or reasoning_effort is "none", else "thinking"
  reasoning_effort   passed through (an int 1-100 or low / high / xhigh / max; absent -> the encoder's default)
  tools              [{"function": {name, description, parameters}}] on the system message at index 0 (an empty
                     one is inserted when the conversation does not start with a system message)
  messages           as sent (tool messages are merged by the encoder itself)

Writes tests/data/chat_v41/:
  requests.jsonl          OpenAI Batch lines {"custom_id", "method", "url", "body"}
  expected.jsonl          {"custom_id", "prompt"}
  outputs.jsonl           {"custom_id", "body", "output": completion text}
  outputs_expected.jsonl  {"custom_id", "message"} from the encoder's parse_message_from_completion_text

    python3 tools/chat/gen_v41_goldens.py [/dir/holding/encoding_dsv41.py]
"""
import copy
import json
import os
import sys

sys.path.insert(0, sys.argv[1] if len(sys.argv) > 1 else "/tmp")
import encoding_dsv41 as enc  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "data", "chat_v41")
MODEL = "DeepSeek-V4.1-Flash"

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city — 城市天气",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                          "days": {"type": "integer", "minimum": 1}}, "required": ["city"]}}}
SEARCH = {"type": "function", "function": {"name": "search", "description": "Search the web",
          "parameters": {"type": "object", "properties": {"q": {"type": "string"},
                         "filters": {"type": "object"}}, "required": ["q"]}}}


def call(i, name, args):
    return {"id": i, "type": "function", "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)}}


def tool(i, content):
    return {"role": "tool", "tool_call_id": i, "content": content}


U = {"role": "user", "content": "What is 2+2?"}
A = {"role": "assistant", "content": "4.", "reasoning_content": "Add them."}
TOOL_TURN = [
    {"role": "user", "content": "Weather in Paris and news on it?"},
    {"role": "assistant", "content": "", "reasoning_content": "Two calls.",
     "tool_calls": [call("c_b", "get_weather", {"city": "Paris", "days": 3}),
                    call("c_a", "search", {"q": "Paris \"news\"", "filters": {"lang": ["fr", "en"], "n": 5, "ok": True}})]},
    tool("c_a", "Headline: 巴黎"), tool("c_b", "Sunny, 21C"),
]
SYS = {"role": "system", "content": "You are terse."}

CASES = [
    ("user_think", {"messages": [U]}),
    ("user_chat", {"messages": [U], "thinking": {"type": "disabled"}}),
    ("user_effort_none", {"messages": [U], "reasoning_effort": "none"}),
    ("system_think", {"messages": [SYS, U]}),
    ("system_chat", {"messages": [SYS, U], "thinking": {"type": "disabled"}}),
    ("effort_low", {"messages": [SYS, U], "reasoning_effort": "low"}),
    ("effort_xhigh", {"messages": [U], "reasoning_effort": "xhigh"}),
    ("effort_max", {"messages": [U], "reasoning_effort": "max"}),
    ("effort_int_1", {"messages": [U], "reasoning_effort": 1}),
    ("effort_int_88", {"messages": [SYS, U], "reasoning_effort": 88}),
    ("effort_int_100_chat", {"messages": [U], "reasoning_effort": 100, "thinking": {"type": "disabled"}}),
    ("multi_turn_think", {"messages": [SYS, U, A, {"role": "user", "content": "And 3+3?"}]}),
    ("multi_turn_chat", {"messages": [U, A, {"role": "user", "content": "And 3+3?"}], "thinking": {"type": "disabled"}}),
    ("mid_system_think", {"messages": [U, A, {"role": "system", "content": "Now answer in French."}]}),
    ("mid_system_then_user", {"messages": [SYS, U, A, {"role": "system", "content": "Be brief."},
                                           {"role": "user", "content": "3+3?"}], "reasoning_effort": 30}),
    ("mid_system_chat", {"messages": [U, A, {"role": "system", "content": "French now."}], "thinking": {"type": "disabled"}}),
    ("consecutive_users", {"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": ""},
                                        {"role": "user", "content": "b"}]}),
    ("content_array", {"messages": [{"role": "system", "content": [{"type": "text", "text": "S1"}, {"type": "text", "text": "S2"}]},
                                    {"role": "user", "content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]},
                                    {"role": "assistant", "content": [{"type": "text", "text": "x"}, {"type": "text", "text": "y"}]},
                                    {"role": "user", "content": "three"}], "thinking": {"type": "disabled"}}),
    ("latest_reminder", {"messages": [U, {"role": "latest_reminder", "content": "Date: 2026-11-30"}]}),
    ("tools_offered_think", {"messages": [U], "tools": [WEATHER, SEARCH]}),
    ("tools_offered_chat_system", {"messages": [SYS, U], "tools": [WEATHER], "thinking": {"type": "disabled"}}),
    ("tools_choice_none", {"messages": [U], "tools": [WEATHER], "tool_choice": "none"}),
    ("tool_results_out_of_order", {"messages": TOOL_TURN, "tools": [WEATHER, SEARCH]}),
    ("tool_results_then_user", {"messages": TOOL_TURN + [{"role": "user", "content": "Thanks. Summarise."}],
                                "tools": [WEATHER, SEARCH], "reasoning_effort": 64}),
    ("tool_loop_full", {"messages": [SYS] + TOOL_TURN + [{"role": "assistant", "content": "Sunny; see headline.",
                                                          "reasoning_content": "Done."},
                                                         {"role": "user", "content": "Tomorrow?"}],
                        "tools": [WEATHER, SEARCH]}),
    ("tool_call_no_args", {"messages": [U, {"role": "assistant", "content": "",
                                            "tool_calls": [call("p1", "ping", {}), call("p0", "get_weather", {"city": "Rome"})]},
                                           tool("p0", "Rain"), tool("p1", "pong")],
                           "tools": [WEATHER, {"type": "function", "function": {"name": "ping", "description": "",
                                                                                "parameters": {"type": "object", "properties": {}}}}]}),
    ("tool_loop_chat", {"messages": TOOL_TURN, "tools": [WEATHER, SEARCH], "thinking": {"type": "disabled"}}),
]


def thinking_mode(body):
    if body.get("thinking", {}).get("type") == "disabled" or body.get("reasoning_effort") == "none":
        return "chat"
    return "thinking"


def encoder_messages(body):
    msgs = copy.deepcopy(body["messages"])
    tools = body.get("tools") if body.get("tool_choice") != "none" else None
    if tools:
        if not msgs or msgs[0]["role"] != "system":
            msgs.insert(0, {"role": "system", "content": ""})
        msgs[0]["tools"] = [{"function": {k: t["function"][k] for k in ("name", "description", "parameters")}} for t in tools]
    return msgs


def render(body):
    effort = body.get("reasoning_effort")
    return enc.encode_messages(encoder_messages(body), thinking_mode(body),
                               reasoning_effort=None if effort == "none" else effort)


D = enc.dsml_token
OUTPUTS = [
    ("out_think_text", {"messages": [U]}, "Add.</think>4." + enc.eos_token),
    ("out_chat_text", {"messages": [U], "thinking": {"type": "disabled"}}, "It is 4." + enc.eos_token),
    ("out_think_tools", {"messages": [U], "tools": [WEATHER, SEARCH]},
     "Need data.</think>Checking.\n\n<" + D + " calls>\n<" + D + " invoke name=\"get_weather\">\n<" + D +
     " parameter name=\"city\" string=\"true\">Paris</" + D + " parameter>\n<" + D +
     " parameter name=\"days\" string=\"false\">3</" + D + " parameter>\n</" + D + " invoke>\n<" + D +
     " invoke name=\"search\">\n<" + D + " parameter name=\"q\" string=\"true\">a \"b\" 巴黎</" + D +
     " parameter>\n<" + D + " parameter name=\"filters\" string=\"false\">{\"n\": [1, 2], \"x\": null}</" + D +
     " parameter>\n</" + D + " invoke>\n</" + D + " calls>" + enc.eos_token),
    ("out_chat_tools", {"messages": [U], "tools": [WEATHER], "thinking": {"type": "disabled"}},
     "\n\n<" + D + " calls>\n<" + D + " invoke name=\"get_weather\">\n<" + D +
     " parameter name=\"city\" string=\"true\">Oslo</" + D + " parameter>\n</" + D + " invoke>\n</" + D + " calls>" +
     enc.eos_token),
]


def line(obj):
    return json.dumps(obj, ensure_ascii=False)


def main():
    with open(os.path.join(OUT, "requests.jsonl"), "w") as rq, open(os.path.join(OUT, "expected.jsonl"), "w") as ex:
        for name, body in CASES:
            b = dict({"model": MODEL}, **body)
            rq.write(line({"custom_id": name, "method": "POST", "url": "/v1/chat/completions", "body": b}) + "\n")
            ex.write(line({"custom_id": name, "prompt": render(body)}) + "\n")
    with open(os.path.join(OUT, "outputs.jsonl"), "w") as oq, open(os.path.join(OUT, "outputs_expected.jsonl"), "w") as oe:
        for name, body, text in OUTPUTS:
            oq.write(line({"custom_id": name, "body": dict({"model": MODEL}, **body), "output": text}) + "\n")
            m = enc.parse_message_from_completion_text(text, thinking_mode(body))
            oe.write(line({"custom_id": name, "message": m}) + "\n")


if __name__ == "__main__":
    main()
