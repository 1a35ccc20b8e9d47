#!/usr/bin/env bash
# zero installed, as a C++ user embeds it: `meson install` of this build into a temporary
# DESTDIR, then examples/linear_regression.cpp compiled out of tree with nothing but the flags of
# `pkg-config PACKAGE`, and run under mpirun at 2 ranks: linked to the shared library, then with
# `pkg-config --static` to the static archive (no libzero*.so needed at run time).
# Usage: embed_installed.sh MESON BUILD_ROOT SOURCE_ROOT MPIRUN PACKAGE (zero or zero-cuda)
set -euo pipefail
meson=$1 build=$2 src=$3 mpirun=$4 package=$5
lib=${package//-/_}  # zero-cuda.pc describes libzero_cuda
fail() { echo "FAIL: $*" >&2; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$meson" install -C "$build" --destdir "$tmp/root" --no-rebuild --quiet

pcfile=$(find "$tmp/root" -path "*/pkgconfig/$package.pc" | head -n 1)
[ -n "$pcfile" ] || fail "meson install wrote no $package.pc"
for a in "lib$lib.a" "lib$lib.so"; do
  [ -e "$(dirname "$pcfile")/../$a" ] || fail "meson install wrote no $a beside $package.pc"
done
# zero's .pc files are relocatable (prefix=${pcfiledir}/..., the project's default), so they work
# from the DESTDIR as they are. A build directory configured before that default has an absolute
# prefix: point a copy at the DESTDIR.
if ! grep -q '^prefix=${pcfiledir}' "$pcfile"; then
  echo "note: $package.pc is not relocatable (-Dpkgconfig.relocatable=false); testing a copy"
  mkdir "$tmp/pc"
  sed "s|^prefix=|prefix=$tmp/root|" "$pcfile" > "$tmp/pc/$package.pc"
  pcfile=$tmp/pc/$package.pc
fi
export PKG_CONFIG_PATH=$(dirname "$pcfile")

# libzero is CPU-only in every build: neither it nor zero.pc may bring CUDA, NCCL or cuBLASLt.
# zero-cuda must bring them (for a static link).
libdir=$(pkg-config --variable=libdir "$package")
cuda_pattern='cuda|nccl|cublas'
if [ "$package" = zero ]; then
  # (the temporary directory's random name is left out of what is searched)
  ! pkg-config --static --cflags --libs zero | sed "s|$tmp||g" | grep -qiE "$cuda_pattern" ||
    fail "zero.pc names CUDA"
  ! readelf -d "$libdir/libzero.so" | grep -qiE "NEEDED.*($cuda_pattern)" || fail "libzero.so links CUDA"
  ! nm -u "$libdir/libzero.a" | grep -qE ' U (cuda|nccl|cublas)' || fail "libzero.a calls CUDA"
else
  for l in cudart cublasLt nccl; do
    pkg-config --static --libs "$package" | grep -q "$l" || fail "$package.pc does not bring $l"
  done
fi

# Out of tree: a copy of the example in an empty directory, so only the installed headers can
# resolve its #include "zero/zero.hpp".
mkdir "$tmp/user"
cp "$src/examples/linear_regression.cpp" "$tmp/user/trainer.cpp"
cd "$tmp/user"
cxx=${CXX:-c++}
cflags=$(pkg-config --cflags "$package")
echo "pkg-config --cflags --libs $package: $cflags $(pkg-config --libs "$package")"
# shellcheck disable=SC2086  # the flags are words
$cxx -std=c++20 trainer.cpp -o trainer_shared $cflags $(pkg-config --libs "$package") ||
  fail "the example does not build with pkg-config --cflags --libs $package alone (the compiler" \
       "says why above; a header that zero/zero.hpp includes goes in an install_headers list)"

run() {  # run BINARY: 2 ranks, rank 0 must report that the model learned
  "$mpirun" --oversubscribe --bind-to none -n 2 "$@" > out.txt 2>&1 || { cat out.txt; fail "$1 failed"; }
  cat out.txt
  grep -q '(learned)$' out.txt || fail "$1 did not print that it learned"
}
LD_LIBRARY_PATH=$libdir run ./trainer_shared
readelf -d trainer_shared | grep -q "NEEDED.*lib$lib\.so" || fail "trainer_shared is not linked to lib$lib.so"

# Static: the same flags from --static (Libs.private, Requires.private), the archive by name.
static_libs=$(pkg-config --static --libs "$package" | sed "s/-l$lib\( \|$\)/-l:lib$lib.a /")
echo "static: $static_libs"
# shellcheck disable=SC2086
$cxx -std=c++20 trainer.cpp -o trainer_static $cflags $static_libs ||
  fail "the example does not link statically with pkg-config --static --libs $package"
if readelf -d trainer_static | grep -q "NEEDED.*libzero"; then fail "trainer_static needs a libzero*.so"; fi
run ./trainer_static
echo "ok: $package installed, built out of tree and ran at 2 ranks (shared and static)"
