#!/usr/bin/env python3
"""Summarizes an s3-tests JUnit XML: counts, failures grouped by their error, and against the
committed list of passing tests, the regressions (listed, did not pass) and the new passes
(passed, not listed). With --check, exits 1 when there is a regression.

usage: report.py JUNIT.xml PASSING.txt [--summary FILE] [--check] [--write-passing]
"""
import argparse
import collections
import re
import sys
import xml.etree.ElementTree as ET


# Lines of a regression's traceback the summary shows (its assertion, with the values).
DETAIL_LINES = 12


def outcomes(path):
    """{test name: (outcome, error line)} from a JUnit XML file, and {test name: the end of
    its failure's traceback, unmasked}."""
    out, details = {}, {}
    for case in ET.parse(path).getroot().iter("testcase"):
        name = case.get("name")
        outcome, why = "passed", ""
        for tag in ("failure", "error", "skipped"):
            el = case.find(tag)
            if el is not None:
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
                why = category(el.get("message") or (el.text or "").strip())
                details[name] = (el.text or "").strip().splitlines()[-DETAIL_LINES:]
                break
        out[name] = (outcome, why)
    return out, details


def category(message):
    """The error a failure shows, with the parts that vary between tests (names, numbers,
    request ids) masked, so that failures with one cause group together."""
    line = message.strip().splitlines()[0] if message.strip() else "(no message)"
    line = re.sub(r"nasd-[a-z0-9]+-\d+", "BUCKET", line)
    line = re.sub(r"'[^']{20,}'", "'…'", line)
    line = re.sub(r"\b\d+\b", "N", line)
    return line[:160]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("junit")
    p.add_argument("passing")
    p.add_argument("--summary")
    p.add_argument("--check", action="store_true")
    p.add_argument("--write-passing", action="store_true",
                   help="rewrite PASSING.txt with the tests that passed")
    a = p.parse_args()

    res, details = outcomes(a.junit)
    counts = collections.Counter(o for o, _ in res.values())
    try:
        with open(a.passing) as f:
            listed = {l.strip() for l in f if l.strip() and not l.startswith("#")}
    except FileNotFoundError:
        listed = set()
    passed = {n for n, (o, _) in res.items() if o == "passed"}
    regressions = sorted(listed - passed)
    new = sorted(passed - listed)

    lines = [
        f"s3-tests: {len(res)} tests: {counts['passed']} passed, {counts['failed']} failed, "
        f"{counts['error']} errors, {counts['skipped']} skipped",
        "",
        "failures by error (count, error):",
    ]
    groups = collections.Counter(w for o, w in res.values() if o in ("failed", "error"))
    lines += [f"{n:5} {w}" for w, n in groups.most_common()]
    lines += ["", f"regressions (listed in {a.passing}, did not pass): {len(regressions)}"]
    for n in regressions:
        lines.append(f"  {n}: {res.get(n, ('not run', ''))[0]} {res.get(n, ('', ''))[1]}")
        lines += [f"      | {l}" for l in details.get(n, [])]
    lines += ["", f"newly passing (add them to {a.passing}): {len(new)}"]
    lines += [f"  {n}" for n in new]
    text = "\n".join(lines) + "\n"
    if a.summary:
        with open(a.summary, "w") as f:
            f.write(text)
    print(text, end="")

    if a.write_passing:
        with open(a.passing, "w") as f:
            f.write("# s3-tests that pass against the nasd gateway (tools/s3-tests/run --check\n"
                    "# fails when one of them does not); add newly passing ones.\n")
            f.writelines(n + "\n" for n in sorted(passed))
    if a.check and regressions:
        print(f"FAIL: {len(regressions)} listed s3-tests did not pass", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
