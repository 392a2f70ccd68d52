"""Counts test cases over Meson test logs (Boost.Test modules by their own report, other tests as
one case each) and JUnit XML reports (pytest's, one case each). Prints "N passed, N failed, N skipped";
exits 1 when anything failed."""
import json
import re
import sys
import xml.etree.ElementTree as ET

passed = failed = skipped = 0
for path in sys.argv[1:]:
    if path.endswith(".xml"):
        try:
            suites = ET.parse(path).getroot().iter("testsuite")
        except (OSError, ET.ParseError):
            print(f"{path}: missing or unreadable test report", file=sys.stderr)
            failed += 1
            continue
        for suite in suites:
            bad = int(suite.get("failures", 0)) + int(suite.get("errors", 0))
            skip = int(suite.get("skipped", 0))
            failed += bad
            skipped += skip
            passed += int(suite.get("tests", 0)) - bad - skip
        continue
    try:
        lines = open(path).read().splitlines()
    except OSError:
        print(f"{path}: missing test log", file=sys.stderr)
        failed += 1
        continue
    for line in lines:
        test = json.loads(line)
        output = (test.get("stdout") or "") + (test.get("stderr") or "")
        counts = {kind: int(n) for n, kind in re.findall(r"(\d+) test cases? out of \d+ (passed|failed|skipped)", output)}
        ok = test["result"] in ("OK", "EXPECTEDFAIL")
        if counts and ok:
            passed += counts.get("passed", 0)
            skipped += counts.get("skipped", 0)
        elif counts:
            passed += counts.get("passed", 0)
            failed += max(counts.get("failed", 0), 1)
            skipped += counts.get("skipped", 0)
        elif test["result"] == "SKIP":
            skipped += 1
        elif ok:
            passed += 1
        else:
            failed += 1
print(f"{passed} passed, {failed} failed, {skipped} skipped")
sys.exit(1 if failed else 0)
