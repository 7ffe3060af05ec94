"""dsinfer.LLM against `dsinfer generate` on the same requests: greedy and seeded sampling give the same tokens,
text, finish reasons and logprobs; chat with tools and with a JSON-schema answer."""
import json

import pytest

import dsinfer
from dsinfer import SamplingParams, StructuredOutputsParams

COMPLETIONS = "/v1/completions"
CHAT = "/v1/chat/completions"
PROMPTS = ["def read_config(path):\n", "The :command:`add_library` command", "import os\nimport",
           "# Quick sort in Python\n"]
IDS_PROMPT = [320, 2776, 10]

WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string",
                   "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}}
# strict + tool_choice "required": the call is held to the tool's schema (the small model would not call it)
STRICT_WEATHER_TOOLS = [{"type": "function", "function": {
    **WEATHER_TOOL["function"], "strict": True,
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
                                                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                   "required": ["city", "unit"], "additionalProperties": False}}}]
PERSON_SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20},
                 "age": {"type": "integer", "minimum": 0, "maximum": 150}},
                 "required": ["name", "age"], "additionalProperties": False}


def _same_completion(py, cli_choice, text_key="text"):
    assert py.token_ids == cli_choice["token_ids"]
    assert py.text == cli_choice[text_key]
    assert py.finish_reason == cli_choice["finish_reason"]


def test_greedy_generate_matches_cli(llm, cli_generate):
    prompts = PROMPTS + [IDS_PROMPT]
    params = [SamplingParams(temperature=0, max_tokens=24) for _ in prompts]
    params[2] = SamplingParams(temperature=0, max_tokens=40, stop=["\n\n"], logprobs=2)
    outs = llm.generate(prompts, params, use_tqdm=False)
    bodies = [{"prompt": p, "max_tokens": 24, "temperature": 0, "return_token_ids": True} for p in prompts]
    bodies[2].update({"max_tokens": 40, "stop": ["\n\n"], "logprobs": 2})
    cli = cli_generate([(COMPLETIONS, b) for b in bodies])
    assert len(outs) == len(prompts)
    for out, body, prompt in zip(outs, cli, prompts):
        assert out.finished and len(out.outputs) == 1
        _same_completion(out.outputs[0], body["choices"][0])
        assert out.num_prompt_tokens == body["usage"]["prompt_tokens"]
        assert len(out.outputs[0].token_ids) > 0
    assert outs[0].prompt == PROMPTS[0] and outs[-1].prompt_token_ids == IDS_PROMPT
    # logprobs: the sampled token's logprob per position, and 2 alternatives, as the CLI reports them
    lp_py = outs[2].outputs[0].logprobs
    lp_cli = cli[2]["choices"][0]["logprobs"]
    assert len(lp_py) == len(lp_cli["token_logprobs"]) == len(outs[2].outputs[0].token_ids)
    for pos, (tok, want) in enumerate(zip(outs[2].outputs[0].token_ids, lp_cli["token_logprobs"])):
        assert lp_py[pos][tok].logprob == pytest.approx(want, abs=1e-9)
        assert sum(1 for v in lp_py[pos].values() if v.rank is not None) == 2
        assert lp_py[pos][tok].logprob <= 0


def test_seeded_sampling_matches_cli(model_dir, backend, cli_generate):
    # A fresh engine (engine seed 0, as the CLI's default): requests without a seed draw theirs in submission order.
    llm = dsinfer.LLM(model_dir, backend=backend)
    params = [SamplingParams(temperature=0.8, top_p=0.9, seed=7, n=2, max_tokens=20),
              SamplingParams(temperature=1.0, top_k=20, max_tokens=20),
              SamplingParams(temperature=0.7, min_p=0.05, seed=8, max_tokens=20, repetition_penalty=1.2)]
    prompts = PROMPTS[:3]
    outs = llm.generate(prompts, params, use_tqdm=False)
    bodies = [{"prompt": prompts[0], "temperature": 0.8, "top_p": 0.9, "seed": 7, "n": 2, "max_tokens": 20},
              {"prompt": prompts[1], "temperature": 1.0, "top_k": 20, "max_tokens": 20},
              {"prompt": prompts[2], "temperature": 0.7, "min_p": 0.05, "seed": 8, "max_tokens": 20,
               "repetition_penalty": 1.2}]
    for b in bodies:
        b["return_token_ids"] = True
    cli = cli_generate([(COMPLETIONS, b) for b in bodies])
    for out, body in zip(outs, cli):
        assert len(out.outputs) == len(body["choices"])
        for c in out.outputs:
            _same_completion(c, body["choices"][c.index])
    # The seed matters: the two samples of request 0 differ, and another seed gives other tokens.
    assert outs[0].outputs[0].token_ids != outs[0].outputs[1].token_ids
    other = llm.generate(prompts[0], SamplingParams(temperature=0.8, top_p=0.9, seed=70, max_tokens=20),
                         use_tqdm=False)
    assert other[0].outputs[0].token_ids != outs[0].outputs[0].token_ids


def test_chat_greedy_matches_cli(llm, cli_generate):
    conv = [{"role": "user", "content": "Write a Python function that adds two numbers."}]
    outs = llm.chat([conv, conv], [SamplingParams(temperature=0, max_tokens=32)] * 2, use_tqdm=False,
                    chat_template_kwargs={"thinking": False})
    cli = cli_generate([(CHAT, {"messages": conv, "max_tokens": 32, "temperature": 0, "return_token_ids": True,
                               "thinking": {"type": "disabled"}})])
    choice = cli[0]["choices"][0]
    for out in outs:
        c = out.outputs[0]
        assert c.text == choice["message"]["content"]
        assert c.token_ids == choice["token_ids"]
        assert c.finish_reason == choice["finish_reason"]


def test_chat_with_tools_matches_cli(llm, cli_generate):
    conv = [{"role": "user", "content": "What is the weather in Paris?"}]
    tools = STRICT_WEATHER_TOOLS
    outs = llm.chat(conv, SamplingParams(temperature=0, max_tokens=200), use_tqdm=False, tools=tools,
                    tool_choice="required", chat_template_kwargs={"thinking": False})
    cli = cli_generate([(CHAT, {"messages": conv, "tools": tools, "tool_choice": "required", "max_tokens": 200,
                               "temperature": 0, "return_token_ids": True, "thinking": {"type": "disabled"}})])
    c = outs[0].outputs[0]
    want = cli[0]["choices"][0]
    assert c.finish_reason == want["finish_reason"]
    assert c.token_ids == want["token_ids"]
    assert c.text == (want["message"]["content"] or "")
    assert len(c.tool_calls) == len(want["message"].get("tool_calls", [])) >= 1
    for got, exp in zip(c.tool_calls, want["message"].get("tool_calls", [])):
        assert got.id == exp["id"]
        assert got.name == exp["function"]["name"] == "get_weather"
        assert got.arguments == exp["function"]["arguments"]
        args = json.loads(got.arguments)
        assert set(args) == {"city", "unit"} and args["unit"] in ("celsius", "fahrenheit")


def test_chat_json_schema_response(llm, cli_generate):
    conv = [{"role": "user", "content": "Give me a person as JSON."}]
    sp = SamplingParams(temperature=0, max_tokens=64, structured_outputs=StructuredOutputsParams(json=PERSON_SCHEMA))
    outs = llm.chat(conv, sp, use_tqdm=False, chat_template_kwargs={"thinking": False})
    cli = cli_generate([(CHAT, {"messages": conv, "max_tokens": 64, "temperature": 0, "return_token_ids": True,
                               "thinking": {"type": "disabled"}, "structured_outputs": {"json": PERSON_SCHEMA}})])
    c = outs[0].outputs[0]
    assert c.finish_reason == "stop"
    value = json.loads(c.text)
    assert set(value) == {"name", "age"} and isinstance(value["age"], int) and isinstance(value["name"], str)
    try:
        import jsonschema
        jsonschema.validate(value, PERSON_SCHEMA)
    except ImportError:
        pass
    assert c.text == cli[0]["choices"][0]["message"]["content"]
    assert c.token_ids == cli[0]["choices"][0]["token_ids"]


def test_prompt_forms_agree(llm):
    tok = llm.get_tokenizer()
    ids = tok.encode(PROMPTS[0])
    sp = SamplingParams(temperature=0, max_tokens=12)
    a = llm.generate(PROMPTS[0], sp, use_tqdm=False)[0]
    b = llm.generate({"prompt_token_ids": ids}, sp, use_tqdm=False)[0]
    c = llm.generate({"prompt": PROMPTS[0]}, sp, use_tqdm=False)[0]
    assert a.outputs[0].token_ids == b.outputs[0].token_ids == c.outputs[0].token_ids
    assert tok.decode(a.outputs[0].token_ids) == a.outputs[0].text
    assert llm.stats().running_requests == 0 and llm.stats().state_slots_used == 0
