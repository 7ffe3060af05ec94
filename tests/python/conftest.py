"""pytest fixtures of the dsinfer Python package tests (tests/python/test_pkg_*.py; tools/test.sh runs them).

The package must be installed (`pip install .`); the `dsinfer` CLI they compare with is DSINFER_BINARY, else
build/cpu/dsinfer. DSINFER_TEST_BACKEND (default cpu; cuda with a CUDA wheel and CLI) is the backend of every engine
the tests create, in Python and in the CLI alike. The other scripts in this folder are run by ctest / tools/test.sh as programs, not collected.
"""
import json
import os
import subprocess
import tempfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(ROOT, "models", "dsv4-small")
BACKEND = os.environ.get("DSINFER_TEST_BACKEND", "cpu")

collect_ignore = ["test_openai_client.py", "structured_outputs_test.py", "structured_schemas.py"]


@pytest.fixture(scope="session")
def model_dir():
    return MODEL


@pytest.fixture(scope="session")
def backend():
    return BACKEND


@pytest.fixture(scope="session")
def dsinfer_binary():
    path = os.environ.get("DSINFER_BINARY", os.path.join(ROOT, "build", "cpu", "dsinfer"))
    if not os.access(path, os.X_OK):
        pytest.fail(f"the dsinfer CLI is needed for the comparisons: {path} (build it or set DSINFER_BINARY)")
    return path


@pytest.fixture(scope="session")
def llm():
    import dsinfer
    return dsinfer.LLM(MODEL, backend=BACKEND)


def _run_cli(binary, args, lines):
    with tempfile.TemporaryDirectory() as tmp:
        inp = os.path.join(tmp, "in.jsonl")
        out = os.path.join(tmp, "out.jsonl")
        with open(inp, "w", encoding="utf-8") as f:
            for line in lines:
                f.write(json.dumps(line, ensure_ascii=False) + "\n")
        proc = subprocess.run([binary, *args, "--input", inp, "--output", out], capture_output=True, text=True)
        records = []
        if os.path.exists(out):
            with open(out, encoding="utf-8") as f:
                records = [json.loads(x) for x in f if x.strip()]
        return proc, records


@pytest.fixture(scope="session")
def cli_generate(dsinfer_binary):
    """cli_generate([(url, body), ...], *engine_flags) -> the response bodies of `dsinfer generate`, in order."""
    def run(requests, *flags):
        lines = [{"custom_id": f"r{i}", "method": "POST", "url": url, "body": body}
                 for i, (url, body) in enumerate(requests)]
        proc, records = _run_cli(dsinfer_binary, ["generate", "--model", MODEL, "--backend", BACKEND, *flags], lines)
        assert proc.returncode == 0, proc.stderr
        by_id = {r["custom_id"]: r for r in records}
        return [by_id[f"r{i}"]["response"]["body"] for i in range(len(requests))]
    return run


@pytest.fixture(scope="session")
def cli_render_chat(dsinfer_binary):
    """cli_render_chat([body, ...]) -> `dsinfer render-chat --model` records, in order."""
    def run(bodies):
        proc, records = _run_cli(dsinfer_binary, ["render-chat", "--model", MODEL], bodies)
        assert proc.returncode == 0, proc.stderr
        return records
    return run
