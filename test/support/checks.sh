# Sourced by the test scripts (under set -e, where a bare `! COMMAND`, or a failing first command of
# `A && B`, does not stop the script): checks that fail it.
# expect CODE FRAGMENT COMMAND...: the command exits with CODE and its stderr holds FRAGMENT.
expect() {
  local code=$1 fragment=$2 rc=0
  shift 2
  "$@" >"$out/stdout.txt" 2>"$out/stderr.txt" || rc=$?
  if [ "$rc" != "$code" ] || ! grep -qF -- "$fragment" "$out/stderr.txt"; then
    echo "FAILED: $* -> exit $rc (expected $code), stderr:"; cat "$out/stderr.txt"; exit 1
  fi
}
# refute COMMAND...: the command fails.
refute() {
  if "$@"; then echo "FAILED: succeeded: $*"; exit 1; fi
}
