"""Bad input raises clean Python exceptions carrying the engine's message, and the engine keeps working."""
import asyncio

import pytest

import dsinfer
from dsinfer import SamplingParams, StructuredOutputsParams


def test_unknown_model_dir(tmp_path):
    with pytest.raises(FileNotFoundError, match="model directory not found"):
        dsinfer.LLM(str(tmp_path / "no-such-model"))
    with pytest.raises(RuntimeError, match="config.json"):  # a directory without a model
        dsinfer.LLM(str(tmp_path))
    with pytest.raises(TypeError, match="model must be a path"):
        dsinfer.LLM(42)


def test_bad_engine_options(model_dir):
    with pytest.raises(TypeError, match="unknown engine option 'max_num_sequences'"):
        dsinfer.LLM(model_dir, max_num_sequences=4)
    with pytest.raises(TypeError, match="engine option 'max_num_seqs' must be int"):
        dsinfer.LLM(model_dir, max_num_seqs="four")
    with pytest.raises((ValueError, RuntimeError), match="backend"):
        dsinfer.LLM(model_dir, backend="tpu")


def test_wrong_types(llm):
    with pytest.raises(TypeError, match="prompts must be a str, token ids"):
        llm.generate(5)
    with pytest.raises(TypeError, match="a prompt must be"):
        llm.generate([[1.5, 2]])
    with pytest.raises(TypeError, match="SamplingParams.temperature must be a number"):
        SamplingParams(temperature="hot")
    with pytest.raises(TypeError, match="SamplingParams.max_tokens must be an int"):
        SamplingParams(max_tokens=3.5)
    with pytest.raises(TypeError, match="sampling_params must be"):
        llm.generate("hi", {"temperature": 0})
    with pytest.raises(TypeError, match="messages must be a list of message dicts"):
        llm.chat("hello")
    with pytest.raises(TypeError, match="not JSON-serializable"):
        llm.chat([{"role": "user", "content": object()}])
    with pytest.raises(ValueError, match="2 sampling params for 3 prompts"):
        llm.generate(["a", "b", "c"], [SamplingParams(), SamplingParams()])


def test_engine_rejections_carry_the_message(llm):
    with pytest.raises(ValueError, match="temperature"):
        llm.generate("hi", SamplingParams(temperature=-1.0))
    with pytest.raises(ValueError, match="structured_outputs.json"):
        llm.generate("hi", SamplingParams(structured_outputs=StructuredOutputsParams(json="{not json")))
    with pytest.raises(ValueError, match="structured_outputs"):
        llm.generate("hi", SamplingParams(structured_outputs={"json": {"type": "object"}, "regex": "a+"}))
    with pytest.raises(ValueError, match="vocab"):
        llm.generate([[10 ** 9]])
    with pytest.raises(ValueError, match="role"):
        llm.chat([{"role": "wizard", "content": "hi"}])
    with pytest.raises(ValueError, match="chat_template_kwargs: unknown key 'colour'"):
        llm.chat([{"role": "user", "content": "hi"}], chat_template_kwargs={"colour": "blue"})
    with pytest.raises(ValueError, match="tools"):
        llm.chat([{"role": "user", "content": "hi"}], tools=[{"type": "function", "function": {"name": 3}}])


def test_a_bad_request_in_a_batch_leaves_the_engine_clean(llm):
    good = SamplingParams(temperature=0, max_tokens=4)
    with pytest.raises(ValueError, match="^request 1: .*top_p"):
        llm.generate(["one", "two", "three"], [good, SamplingParams(top_p=7.0), good])
    st = llm.stats()
    assert st.running_requests == 0 and st.waiting_requests == 0 and st.state_slots_used == 0
    out = llm.generate(["one"], good, use_tqdm=False)
    assert len(out[0].outputs[0].token_ids) == 4


def test_tokenizer_and_template_errors(tmp_path, model_dir):
    bad = tmp_path / "tokenizer.json"
    bad.write_text("{\"model\": 5}")
    with pytest.raises(ValueError):
        dsinfer.Tokenizer(str(bad))
    with pytest.raises(FileNotFoundError):
        dsinfer.Tokenizer(str(tmp_path / "missing.json"))
    tok = dsinfer.Tokenizer(model_dir)
    with pytest.raises(ValueError, match=str(10 ** 8)):
        tok.decode([1, 10 ** 8])
    with pytest.raises(TypeError):
        tok.encode(b"bytes")
    with pytest.raises(ValueError, match="messages"):
        dsinfer.apply_chat_template([], model=model_dir)
    with pytest.raises(FileNotFoundError):
        dsinfer.apply_chat_template([{"role": "user", "content": "x"}], model=str(tmp_path / "nope"))


def test_async_rejection_raises(model_dir):
    async def main():
        with dsinfer.AsyncEngine(model_dir) as engine:
            with pytest.raises(ValueError, match="top_k"):
                async for _ in engine.generate("hi", SamplingParams(top_k=-5)):
                    pass
            outs = [o async for o in engine.generate("hi", SamplingParams(temperature=0, max_tokens=3))]
            assert outs[-1].finished and len(outs[-1].outputs[0].token_ids) == 3
    asyncio.run(main())
