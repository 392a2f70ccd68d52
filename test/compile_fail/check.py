"""Compiles a file that must not compile and checks that the error says what to do.

usage: check.py SOURCE COMPILER [ARGS...]; the source names the expected text in a
`// expect: TEXT` line."""
import re
import subprocess
import sys

source, compiler = sys.argv[1], sys.argv[2:]
expected = re.search(r"^// expect: (.+)$", open(source).read(), re.M).group(1).strip()
result = subprocess.run(compiler + ["-fsyntax-only", source], capture_output=True, text=True)
if result.returncode == 0:
    sys.exit(f"{source} compiled, but it must not")
if expected not in result.stderr:
    sys.exit(f"{source} failed to compile without the message '{expected}':\n{result.stderr[-3000:]}")
print(f"{source}: rejected with '{expected}'")
