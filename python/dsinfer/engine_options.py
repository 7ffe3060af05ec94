"""LLM(...) / AsyncEngine(...) keyword arguments -> the engine's EngineOptions (include/dsinfer/engine.h)."""
from __future__ import annotations

import os
from typing import Any

from . import _core


def make_engine(model: str, backend: str, options: dict) -> "_core.Engine":
    """A C++ engine for the model directory; FileNotFoundError for a missing directory, TypeError for an unknown
    option or a value of the wrong type, ValueError / RuntimeError with the engine's message otherwise."""
    if not isinstance(model, (str, os.PathLike)):
        raise TypeError(f"model must be a path (str), got {type(model).__name__}")
    model = os.fspath(model)
    if not os.path.isdir(model):
        raise FileNotFoundError(f"model directory not found: {model}")
    opts = _core.EngineOptions()
    opts.model_dir = model
    opts.backend = backend
    for key, value in options.items():
        if key == "tokenizer":
            key = "tokenizer_path"
        if key.startswith("_") or not hasattr(opts, key):
            raise TypeError(f"unknown engine option '{key}'")
        try:
            setattr(opts, key, value)
        except TypeError:
            want = type(getattr(opts, key)).__name__
            raise TypeError(f"engine option '{key}' must be {want}, got {type(value).__name__}") from None
    try:
        return _core.Engine(opts)
    except RuntimeError as e:
        raise RuntimeError(f"cannot create the engine for {model}: {e}") from None


def option_names() -> Any:
    """The engine option names LLM() and AsyncEngine() accept."""
    return sorted(k for k in dir(_core.EngineOptions) if not k.startswith("_"))
