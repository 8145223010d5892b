"""Tally of one run of Slurm's test suite against Drover (called by tests/slurm-suite/run.sh).

Reads the JUnit XML pytest wrote for each test file (RESULTS/junit/<file>.xml) and prints: the
counts (passed, failed, errored, skipped, total), the skip reasons with their counts, and one
line per failed or errored test with the first line of its message. A file that left no XML
(it timed out, was not run for lack of time, or pytest could not start) counts as one errored
test, so nothing that did not run is reported as passing.

Usage: tally.py RESULTS FILE...   (FILE: the test files run, relative to testsuite/python)
"""

import collections
import os
import re
import sys
import xml.etree.ElementTree as ET


def first_line(text):
    for line in (text or "").splitlines():
        if line.strip():
            return line.strip()[:200]
    return ""


def main():
    results, files = sys.argv[1], sys.argv[2:]
    def listed(name):
        path = os.path.join(results, name)
        return set(open(path).read().split()) if os.path.exists(path) else set()

    timed_out = listed("timed-out")
    not_run = listed("not-run")
    counts = collections.Counter()
    skips = collections.Counter()
    problems = []
    for f in files:
        name = f[len("tests/"):] if f.startswith("tests/") else f
        name = name.replace("/", "_")[: -len(".py")]
        xml = os.path.join(results, "junit", name + ".xml")
        if f in timed_out or f in not_run or not os.path.exists(xml):
            counts["errored"] += 1
            if f in not_run:
                why = "not run: the run's time budget was spent"
            elif f in timed_out:
                why = "file timed out"
            else:
                why = "no result (pytest did not finish)"
            problems.append(f"ERROR  {f}: {why}")
            continue
        for case in ET.parse(xml).getroot().iter("testcase"):
            test = f"{f}::{case.get('name')}"
            skipped = case.find("skipped")
            failure = case.find("failure")
            error = case.find("error")
            if failure is not None:
                counts["failed"] += 1
                problems.append(f"FAIL   {test}: {first_line(failure.get('message'))}")
            elif error is not None:
                counts["errored"] += 1
                problems.append(f"ERROR  {test}: {first_line(error.get('message'))}")
            elif skipped is not None:
                counts["skipped"] += 1
                reason = first_line(skipped.get("message"))
                reason = re.sub(r"^Skipped: ", "", reason)
                skips[reason] += 1
            else:
                counts["passed"] += 1
    total = sum(counts.values())
    ran = counts["passed"] + counts["failed"] + counts["errored"]
    for key in ("passed", "failed", "errored", "skipped"):
        print(f"{key:<8} {counts[key]}")
    print(f"total    {total}")
    if ran:
        print(f"pass rate {counts['passed']}/{ran} = {100 * counts['passed'] / ran:.0f}% of the tests that ran")
    if skips:
        print("skip reasons:")
        for reason, n in skips.most_common():
            print(f"  {n:4d}  {reason}")
    if problems:
        print("failures and errors:")
        for line in problems:
            print(f"  {line}")


if __name__ == "__main__":
    main()
