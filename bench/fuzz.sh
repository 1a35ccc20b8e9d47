#!/usr/bin/env bash
# The file fuzzers, outside CI: builds the libFuzzer targets of tests/zero (safetensors headers,
# checkpoint metadata) with clang -fsanitize=fuzzer,address,undefined and runs RUNS inputs of each
# from its corpus (tests/zero/fuzz_corpus_*), printing each target's crashes and seconds.
#
#   bench/fuzz.sh [BUILD_DIR [RUNS]]      (defaults: build, 1000000; from the repository root)
#
# BUILD_DIR is a configured and built tree (ninja -C BUILD_DIR): the targets link its
# libzero.so, and the sources they reach (zero/safetensors.cpp, zero/checkpoint_format.cpp,
# zero/checkpoint_meta.cpp, zero/checkpoint_load.cpp) are compiled here again with the
# sanitizers and libFuzzer's coverage, so that their definitions replace the library's. New
# inputs libFuzzer finds go to $FUZZ_OUT/work-*, crashers to $FUZZ_OUT/crash-* (default
# FUZZ_OUT=/tmp/zero-fuzz): copy each crasher into the target's corpus as crash_<what>, fix, and
# run again; the suite runs the corpora (test_fuzz_files.cpp). Exit status: the number of targets
# that crashed.
set -uo pipefail
build=${1:-build}
runs=${2:-1000000}
out=${FUZZ_OUT:-/tmp/zero-fuzz}
cxx=${FUZZ_CXX:-clang++}
command -v "$cxx" >/dev/null || { echo "fuzz.sh: $cxx not found (apt-get install -y clang)"; exit 2; }
[ -f "$build/zero/libzero.so" ] || { echo "fuzz.sh: $build/zero/libzero.so not found: build first"; exit 2; }
mkdir -p "$out/obj"
flags=(-std=c++20 -g -O1 -fno-omit-frame-pointer -fsanitize=address,undefined
       -fno-sanitize-recover=undefined -I. -I"$build" $(mpicxx --showme:compile)
       -DOMPI_SKIP_MPICXX=1 -DBOOST_ALL_NO_LIB)
objs=()
for src in zero/safetensors.cpp zero/checkpoint_format.cpp zero/checkpoint_meta.cpp \
           zero/checkpoint_load.cpp; do
  o="$out/obj/$(basename "$src" .cpp).o"
  "$cxx" "${flags[@]}" -fsanitize=fuzzer-no-link -c "$src" -o "$o" || exit 2
  objs+=("$o")
done
libdir=$(cd "$build/zero" && pwd)
crashed=0
for target in safetensors checkpoint_meta; do
  corpus=tests/zero/fuzz_corpus_${target%_meta}
  bin="$out/fuzz_$target"
  "$cxx" "${flags[@]}" -fsanitize=fuzzer "tests/zero/fuzz_${target}_libfuzzer.cpp" "${objs[@]}" \
    -L"$libdir" -Wl,-rpath,"$libdir" -lzero -lboost_json $(mpicxx --showme:link) -o "$bin" || exit 2
  rm -rf "$out/work-$target" "$out"/crash-"$target"-* && mkdir -p "$out/work-$target"
  start=$(date +%s.%N)
  # -rss_limit_mb: a case that allocates past 2 GiB is a crasher too (a length trusted).
  "$bin" -runs="$runs" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
    -artifact_prefix="$out/crash-$target-" "$out/work-$target" "$corpus" \
    >"$out/log-$target.txt" 2>&1
  rc=$?
  end=$(date +%s.%N)
  found=$(ls "$out"/crash-"$target"-* 2>/dev/null | wc -l)
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$out/log-$target.txt" | grep -o '[0-9]*$')
  printf '%-16s %s inputs in %.0f s, exit %d, %d crash file(s)%s\n' "$target" "${execs:-?}" \
    "$(echo "$end - $start" | bc)" "$rc" "$found" \
    "$([ "$found" -gt 0 ] && echo ": $(ls "$out"/crash-"$target"-* | tr '\n' ' ')")"
  [ "$rc" -ne 0 ] && crashed=$((crashed + 1)) && tail -n 30 "$out/log-$target.txt"
done
exit "$crashed"
