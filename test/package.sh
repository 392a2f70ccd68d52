#!/usr/bin/env bash
# The library as engines take it: installed alone (headers, pkg-config file, CMake package) into a
# scratch prefix that is then moved, and built into a small consumer (test/package/) through
# pkg-config --define-prefix, CMake's find_package, and a Meson project with this repository as a
# subproject, which must add no target, test or install of ours. The installed tree holds the library
# alone (no workbench header, no JSON), the bare decoder builds without Eigen, and the headers compile
# clean under an engine's strict warnings made errors.
# Usage: package.sh SOURCE_ROOT
set -euo pipefail
root=$(realpath "$1")
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
consumer=$root/test/package
fail() { echo "FAILED: $*"; exit 1; }

meson setup "$out/build" "$root" --prefix "$out/installed" -Dtests=false -Dexamples=false -Dbenchmarks=false \
  -Dcuda=disabled >/dev/null
meson install -C "$out/build" --quiet >/dev/null
mv "$out/installed" "$out/moved"   # relocated: nothing may point to the install prefix
prefix=$out/moved

# The library alone
[ -f "$prefix/include/blockpilot/blockpilot.hpp" ] || fail "headers not installed"
[ ! -e "$prefix/include/blockpilot_workbench" ] || fail "the workbench is installed"
if grep -rlE '#include [<"](blockpilot_workbench|nlohmann)' "$prefix/include/blockpilot"; then fail "installed headers use the workbench or JSON"; fi
c++ -std=c++20 -I"$prefix/include" "$consumer/bare.cpp" -o "$out/bare" || fail "the bare decoder needs more than the standard library"
"$out/bare" || fail "bare decoder"

# pkg-config
flags=$(PKG_CONFIG_PATH=$prefix/share/pkgconfig pkg-config --define-prefix --cflags blockpilot)
[[ " $flags " == *" -I$prefix/include "* ]] || fail "pkg-config --define-prefix: $flags"
[[ " $flags " != *" -std="* ]] || fail "pkg-config imposes a language standard: $flags"
# With an engine's strict warnings as errors on the library's headers (the other -I paths, Eigen's,
# taken as system headers, as an engine takes a dependency's).
strict="-Wall -Wextra -Wpedantic -Wconversion -Wsign-conversion -Wshadow -Wold-style-cast -Werror"
system_flags=$(for f in $flags; do if [[ $f == -I* && $f != "-I$prefix/include" ]]; then echo "-isystem ${f#-I}"; else echo "$f"; fi; done)
c++ -std=c++23 $strict $system_flags "$consumer/consumer.cpp" -o "$out/pc-consumer" || fail "the headers warn under $strict"
[ "$("$out/pc-consumer")" = success ] || fail "pkg-config consumer"

# CMake
cmake -S "$consumer" -B "$out/cmake" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$out/cmake" >/dev/null
[ "$("$out/cmake/consumer")" = success ] || fail "CMake consumer"

# Meson subproject
mkdir -p "$out/engine/subprojects"
cp "$consumer/meson.build" "$consumer/consumer.cpp" "$out/engine/"
ln -s "$root" "$out/engine/subprojects/blockpilot"
meson setup "$out/engine/build" "$out/engine" --force-fallback-for=blockpilot >/dev/null
count() { meson introspect "$1" "$out/engine/build" | python3 -c "import json, sys; print(len(json.load(sys.stdin)))"; }
[ "$(count --targets)" = 1 ] || fail "the subproject adds targets: $(meson introspect --targets "$out/engine/build")"
[ "$(count --tests)" = 0 ] || fail "the subproject adds tests"
[ "$(count --installed)" = 0 ] || fail "the subproject installs files"
ninja -C "$out/engine/build" >/dev/null
[ "$("$out/engine/build/consumer")" = success ] || fail "Meson subproject consumer"
echo "package: OK (pkg-config, CMake, Meson subproject)"
