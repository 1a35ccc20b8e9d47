#!/usr/bin/env bash
# zero as a Meson subproject, as a user's project embeds it: tests/install/subproject/ copied to a
# temporary directory with subprojects/zero a symlink to this source tree, configured with
# -Dzero:tests=false -Dzero:cuda=disabled, only the trainer built (and what it needs), then run
# under mpirun at 2 ranks. Prints the seconds the configure and the build took.
# Usage: embed_subproject.sh MESON SOURCE_ROOT MPIRUN
set -euo pipefail
meson=$1 src=$2 mpirun=$3
fail() { echo "FAIL: $*" >&2; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp -r "$src/tests/install/subproject" "$tmp/project"
cp "$src/examples/linear_regression.cpp" "$tmp/project/"
mkdir "$tmp/project/subprojects"
ln -s "$(cd "$src" && pwd)" "$tmp/project/subprojects/zero"

start=$SECONDS
# --force-fallback-for: use the subproject even where an installed zero.pc exists.
"$meson" setup "$tmp/build" "$tmp/project" --force-fallback-for=zero \
  -Dzero:tests=false -Dzero:cuda=disabled > "$tmp/setup.log" 2>&1 ||
  { cat "$tmp/setup.log"; fail "the project that embeds zero does not configure"; }
configured=$SECONDS
# Only the trainer and what it links (libzero), not the zero command or the static archive.
"$meson" compile -C "$tmp/build" linear_regression > "$tmp/build.log" 2>&1 ||
  { cat "$tmp/build.log"; fail "the project that embeds zero does not build"; }
built=$SECONDS
echo "configure $((configured - start)) s, build $((built - configured)) s"

"$mpirun" --oversubscribe --bind-to none -n 2 "$tmp/build/linear_regression" > "$tmp/out.txt" 2>&1 ||
  { cat "$tmp/out.txt"; fail "the trainer built with zero as a subproject failed"; }
cat "$tmp/out.txt"
grep -q '(learned)$' "$tmp/out.txt" || fail "the trainer did not print that it learned"
echo "ok: zero as a Meson subproject"
