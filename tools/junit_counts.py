#!/usr/bin/env python3
"""Counts the test cases of a JUnit XML report (ctest --output-junit): prints "N passed, N failed, N skipped".

    python3 tools/junit_counts.py build/cpu/ctest-results.xml
"""
import sys
import xml.etree.ElementTree as ET


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: junit_counts.py REPORT.xml")
    try:
        root = ET.parse(sys.argv[1]).getroot()
    except (OSError, ET.ParseError) as e:
        sys.exit(f"no JUnit report {sys.argv[1]}: {e}")
    passed = failed = skipped = 0
    for case in root.iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            failed += 1
        elif case.find("skipped") is not None or case.get("status") in ("disabled", "notrun"):
            skipped += 1
        else:
            passed += 1
    print(f"{passed} passed, {failed} failed, {skipped} skipped")


if __name__ == "__main__":
    main()
