#!/usr/bin/env python3
"""Prints the commands of README.md's "## Set-up" section, one per line: its indented code lines, in order. CI
(.ci/run) runs exactly these in a fresh clone, so the README's commands are the ones that are tested.

    python3 tools/readme_commands.py [README.md]
"""
import sys


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "README.md"
    section, commands = None, []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("## "):
                section = line[3:].strip()
                continue
            if section and section.startswith("Set-up") and line.startswith("    ") and line.strip():
                commands.append(line.strip())
    if not commands:
        sys.exit(f"{path}: no indented command lines in a '## Set-up' section")
    print("\n".join(commands))


if __name__ == "__main__":
    main()
