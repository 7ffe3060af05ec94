"""dsinfer: DeepSeek-V4 inference from Python, on the C++ engine (the public API of include/dsinfer/).

    import dsinfer
    llm = dsinfer.LLM("models/dsv4-small")                     # backend="cuda" on a GPU build
    out = llm.generate(["def read_config(path):\\n"], dsinfer.SamplingParams(temperature=0, max_tokens=32))
    print(out[0].outputs[0].text)

LLM (offline generate / chat), AsyncEngine (asyncio streaming, cancel = abort), SamplingParams and
StructuredOutputsParams (vLLM's names and defaults), Tokenizer and apply_chat_template (equal to `dsinfer
render-chat`). Invalid input raises TypeError / ValueError / FileNotFoundError with the engine's message; a failed
model step raises RuntimeError.
"""
from ._core import EngineStats
from .async_engine import AsyncEngine
from .engine_options import option_names as engine_option_names
from .llm import LLM
from .outputs import CompletionOutput, Logprob, RequestOutput, ToolCall
from .sampling_params import SamplingParams, StructuredOutputsParams
from .tokenizer import Tokenizer, apply_chat_template

__version__ = "0.1.0"

__all__ = [
    "AsyncEngine", "CompletionOutput", "EngineStats", "LLM", "Logprob", "RequestOutput", "SamplingParams",
    "StructuredOutputsParams", "ToolCall", "Tokenizer", "apply_chat_template", "engine_option_names",
]
