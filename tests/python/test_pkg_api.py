"""The package's surface: the type stubs of dsinfer._core list exactly what the module defines, and the public
Python API has docstrings."""
import ast
import os

import dsinfer
from dsinfer import _core


def _stub_names():
    path = os.path.join(os.path.dirname(dsinfer.__file__), "_core.pyi")
    assert os.path.exists(path), "dsinfer/_core.pyi is not installed with the package"
    tree = ast.parse(open(path, encoding="utf-8").read())
    names = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            members = set()
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and not item.name.startswith("_"):
                    members.add(item.name)
                elif isinstance(item, ast.AnnAssign):
                    members.add(item.target.id)
            names[node.name] = members
        elif isinstance(node, ast.FunctionDef):
            names[node.name] = None
    return names


def test_stubs_match_the_module():
    stubs = _stub_names()
    module = {n for n in dir(_core) if not n.startswith("_")}
    assert set(stubs) == module
    for name, members in stubs.items():
        if members is None:
            continue
        defined = {m for m in dir(getattr(_core, name)) if not m.startswith("_")}
        assert members == defined, name


def test_public_api_is_documented():
    for name in dsinfer.__all__:
        obj = getattr(dsinfer, name)
        assert obj.__doc__ and obj.__doc__.strip(), name
    for cls, methods in ((dsinfer.LLM, ["generate", "chat", "get_tokenizer", "stats"]),
                         (dsinfer.AsyncEngine, ["generate", "chat", "stats", "shutdown"]),
                         (dsinfer.Tokenizer, ["encode", "decode", "apply_chat_template"])):
        for m in methods:
            assert getattr(cls, m).__doc__, f"{cls.__name__}.{m}"
    assert "max_num_seqs" in dsinfer.engine_option_names()
