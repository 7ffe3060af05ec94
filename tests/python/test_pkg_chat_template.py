"""dsinfer.apply_chat_template and dsinfer.Tokenizer against `dsinfer render-chat --model` on the same
conversations: the same prompt text and token ids."""
import json
import os
import subprocess

import pytest

import dsinfer
from test_pkg_offline import WEATHER_TOOL

CONVERSATIONS = [
    ({"messages": [{"role": "user", "content": "Hello!"}]}, {}),
    ({"messages": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "2+2?"},
                   {"role": "assistant", "content": "4"}, {"role": "user", "content": "And 3+3?"}],
      "thinking": {"type": "enabled"}}, {"chat_template_kwargs": {"thinking": True}}),
    ({"messages": [{"role": "user", "content": "Weather in Oslo?"}], "tools": [WEATHER_TOOL]},
     {"tools": [WEATHER_TOOL]}),
    ({"messages": [{"role": "user", "content": "Weather in Oslo?"},
                   {"role": "assistant", "content": "", "tool_calls": [
                       {"id": "call_0", "type": "function",
                        "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}]},
                   {"role": "tool", "tool_call_id": "call_0", "content": "{\"temp\": 3}"}],
      "tools": [WEATHER_TOOL], "thinking": {"type": "disabled"}},
     {"tools": [WEATHER_TOOL], "chat_template_kwargs": {"thinking": False}}),
]


@pytest.mark.parametrize("case", range(len(CONVERSATIONS)))
def test_apply_chat_template_matches_render_chat(case, model_dir, cli_render_chat):
    body, kwargs = CONVERSATIONS[case]
    want = cli_render_chat([body])[0]
    assert "error" not in want, want
    text = dsinfer.apply_chat_template(body["messages"], model=model_dir, **kwargs)
    ids = dsinfer.apply_chat_template(body["messages"], model=model_dir, tokenize=True, **kwargs)
    assert text == want["prompt"]
    assert ids == want["prompt_token_ids"]
    tok = dsinfer.Tokenizer(model_dir)
    assert tok.apply_chat_template(body["messages"], **kwargs) == ids
    assert tok.apply_chat_template(body["messages"], tokenize=False, **kwargs) == text


def test_tokenizer_round_trip(model_dir):
    tok = dsinfer.Tokenizer(model_dir)
    text = "def read_config(path):\n    return open(path).read()  # 読む"
    ids = tok.encode(text)
    assert ids and all(0 <= i < tok.vocab_size for i in ids)
    assert tok.decode(ids) == text
    # special-token spellings: one id with special_tokens=True, plain text otherwise
    eos = "<｜end▁of▁sentence｜>"
    assert len(tok.encode(eos)) == 1
    assert len(tok.encode(eos, special_tokens=False)) > 1
    assert tok.decode(tok.encode("a" + eos), skip_special_tokens=True) == "a"


def test_tokenizer_matches_cli(model_dir, dsinfer_binary):
    texts = ["Hello, world!", "def f(x):\n\treturn x ** 2  # 二乗", "<｜end▁of▁sentence｜>tail", "  spaces   "]
    tok = dsinfer.Tokenizer(model_dir)
    for plain in (False, True):
        args = [dsinfer_binary, "tokenize", "--tokenizer", os.path.join(model_dir, "tokenizer.json")]
        proc = subprocess.run(args + (["--plain"] if plain else []), input="".join(json.dumps(t) + "\n" for t in texts),
                              capture_output=True, text=True, check=True)
        want = [json.loads(x) for x in proc.stdout.splitlines()]
        assert [tok.encode(t, special_tokens=not plain) for t in texts] == want
