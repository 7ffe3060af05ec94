"""Helpers shared by the adversarial case modules (standard library only): HTTP requests with timeouts, outcome
classification, and `dsinfer generate` runs over a JSONL file."""
import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request


class Timeout(Exception):
    pass


def post(url, body, timeout=30.0, headers=None):
    """POST body (bytes, str or a JSON value) -> (status, parsed JSON or None, raw text, seconds)."""
    if not isinstance(body, (bytes, str)):
        body = json.dumps(body)
    if isinstance(body, str):
        body = body.encode("utf-8", "surrogatepass")
    req = urllib.request.Request(url, data=body, method="POST",
                                 headers={"Content-Type": "application/json", **(headers or {})})
    t0 = time.time()
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            status, raw = r.status, r.read()
    except urllib.error.HTTPError as e:
        status, raw = e.code, e.read()
    except (socket.timeout, TimeoutError) as e:
        raise Timeout(f"no answer within {timeout} s") from e
    except urllib.error.URLError as e:
        if isinstance(e.reason, (socket.timeout, TimeoutError)):
            raise Timeout(f"no answer within {timeout} s") from e
        raise
    text = raw.decode("utf-8", "replace")
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = None
    return status, parsed, text, time.time() - t0


def error_of(parsed):
    if isinstance(parsed, dict) and isinstance(parsed.get("error"), dict):
        return parsed["error"]
    return None


def expect_error(url, body, param=None, status=400, in_message=None, timeout=30.0, not_in_message=None):
    """A case expected to fail cleanly: the status, an error object with a message, the right "param" (when
    given) and words the message must (not) contain. -> (outcome, detail)."""
    try:
        st, parsed, text, secs = post(url, body, timeout=timeout)
    except Timeout as e:
        return "hang", str(e)
    except OSError as e:
        return "crash", f"connection failed: {e}"
    err = error_of(parsed)
    if st != status or not err or not err.get("message"):
        return "wrong", f"expected {status} with an error object, got {st}: {text[:300]}"
    if param is not None and err.get("param") != param:
        return "wrong", f"param {err.get('param')!r}, expected {param!r}: {err['message'][:200]}"
    if in_message and in_message not in err["message"]:
        return "wrong", f"message lacks {in_message!r}: {err['message'][:300]}"
    if not_in_message and not_in_message in err["message"]:
        return "wrong", f"message has {not_in_message!r}: {err['message'][:300]}"
    return "clean_error", f"{st} param={err.get('param')} ({secs:.2f} s): {err['message'][:120]}"


def completion_text(parsed):
    """(text, finish_reason, completion_tokens) of the first choice of a chat or completions response."""
    c = parsed["choices"][0]
    text = c["message"]["content"] if "message" in c else c["text"]
    return text or "", c.get("finish_reason"), parsed.get("usage", {}).get("completion_tokens")


def expect_ok(url, body, check, timeout=60.0):
    """A case expected to succeed: 200, then check(text, finish_reason, tokens) -> None or a problem string."""
    try:
        st, parsed, text, secs = post(url, body, timeout=timeout)
    except Timeout as e:
        return "hang", str(e)
    except OSError as e:
        return "crash", f"connection failed: {e}"
    if st != 200 or not isinstance(parsed, dict) or "choices" not in parsed:
        return "wrong", f"expected 200, got {st}: {text[:300]}"
    out, finish, ntok = completion_text(parsed)
    problem = check(out, finish, ntok)
    if problem:
        return "wrong", f"{problem}; finish={finish} tokens={ntok} output={out[:200]!r}"
    return "ok", f"finish={finish} tokens={ntok} ({secs:.2f} s): {out[:60]!r}"


def run_generate(binary, model, tmp, name, bodies, extra_args=(), timeout=120.0):
    """Runs `dsinfer generate` over one JSONL file of completions / chat bodies. -> (rc, {custom_id: response
    line}, stderr); rc None on a timeout."""
    inp = os.path.join(tmp, f"{name}.jsonl")
    out = os.path.join(tmp, f"{name}.out.jsonl")
    with open(inp, "w") as f:
        for cid, body in bodies:
            url = "/v1/chat/completions" if "messages" in body else "/v1/completions"
            f.write(json.dumps({"custom_id": cid, "method": "POST", "url": url, "body": body}) + "\n")
    cmd = [binary, "generate", "--model", model, "--input", inp, "--output", out, *extra_args]
    try:
        p = subprocess.run(cmd, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, {}, f"generate did not finish within {timeout} s"
    results = {}
    if os.path.exists(out):
        with open(out) as f:
            for line in f:
                try:
                    j = json.loads(line)
                except ValueError:
                    continue
                results[j.get("custom_id")] = j
    return p.returncode, results, p.stderr.decode("utf-8", "replace")


def crashed(rc):
    return rc is not None and rc < 0  # killed by a signal
