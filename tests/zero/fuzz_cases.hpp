// What the file fuzzers run on one input, shared by their libFuzzer targets
// (fuzz_safetensors_libfuzzer.cpp, fuzz_checkpoint_meta_libfuzzer.cpp; bench/fuzz.sh runs them)
// and the suite's run of their corpora (test_fuzz_files.cpp). A case ends in success or
// zero::Error; anything else, or a result that breaks what the reader promises, calls
// std::abort, so that libFuzzer keeps the input and the suite fails on it.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.hpp"
#include "zero/checkpoint.hpp"
#include "zero/checkpoint_format.hpp"
#include "zero/safetensors.hpp"

namespace zero::fuzz {

// What a case ended in, for the suite's report.
enum class Outcome { ok, refused };

[[noreturn]] inline void broken(const std::string& what) {
  std::cerr << "fuzz case broke a promise: " << what << "\n";
  std::abort();
}

// The header read from memory must describe tensors that tile the data section exactly.
inline void check_tiling(const SafetensorsHeader& h, std::int64_t data_bytes) {
  std::int64_t at = 0;
  for (const SafetensorsTensor& t : h.tensors) {
    const auto size = safetensors_dtype_bytes(t.dtype);
    if (!size || t.begin != at || t.end < t.begin || t.end - t.begin != t.numel * *size)
      broken("tensor '" + t.name + "' was accepted outside the tiling");
    at = t.end;
  }
  if (at != data_bytes) broken("the accepted tensors do not cover the data section");
}

// The same bytes as a file (an anonymous memory file): SafetensorsFile must agree with the
// in-memory reading, and every float tensor must read whole.
inline void read_as_file(std::span<const std::byte> bytes, bool accepted) {
  const int fd = ::memfd_create("fuzz.safetensors", 0);
  if (fd < 0) return;  // no memory files here: the in-memory reading stands alone
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  for (std::size_t done = 0; done < bytes.size();) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n <= 0) return;
    done += static_cast<std::size_t>(n);
  }
  try {
    SafetensorsFile f("/proc/self/fd/" + std::to_string(fd));
    if (!accepted) broken("the file was accepted but its bytes in memory were refused");
    std::vector<float> out;
    for (const SafetensorsTensor& t : f.tensors()) {
      if (t.dtype != "F32" && t.dtype != "BF16" && t.dtype != "F16") continue;
      out.resize(static_cast<std::size_t>(t.numel));
      f.read(t, 0, out);
    }
  } catch (const Error&) {
    if (accepted) broken("the bytes in memory were accepted but the file was refused");
  }
}

// A safetensors file's bytes: the header's length, the header, then (optionally) the file.
inline Outcome safetensors_case(std::span<const std::byte> bytes, bool through_file) {
  const std::string path = "fuzz.safetensors";
  const auto size = static_cast<std::int64_t>(bytes.size());
  bool accepted = false;
  try {
    const auto first = bytes.first(std::min(bytes.size(), kSafetensorsSniffBytes));
    const std::int64_t n = safetensors_header_length(first, size, path);
    if (n < 1 || n > size - 8) broken("a header length past the file's end was accepted");
    const std::string_view header(reinterpret_cast<const char*>(bytes.data()) + 8,
                                  static_cast<std::size_t>(n));
    check_tiling(parse_safetensors_header(header, size - 8 - n, path), size - 8 - n);
    accepted = true;
  } catch (const Error&) {
  } catch (...) {
    broken("an exception other than zero::Error");
  }
  if (through_file) read_as_file(bytes, accepted);
  return accepted ? Outcome::ok : Outcome::refused;
}

// A checkpoint's meta.json: read and checked as a load does, then its invariants, its numbers,
// and a round trip through to_json that must read back to the same text.
inline Outcome checkpoint_meta_case(std::string_view text) {
  CheckpointMeta m;
  try {
    m = meta_from_json(std::string(text), "fuzz/meta.json");
  } catch (const Error&) {
    return Outcome::refused;
  } catch (...) {
    broken("an exception other than zero::Error");
  }
  try {
    (void)m.numel();
    std::vector<std::int64_t> covered(m.params.size(), 0);
    for (const CheckpointPiece& p : m.pieces) {
      if (p.param < 0 || p.param >= static_cast<int>(m.params.size()) || p.file < 0 ||
          p.file >= static_cast<int>(m.files.size()))
        broken("a piece names a param or file that does not exist");
      const auto& file = m.files[static_cast<std::size_t>(p.file)];
      // In 128 bits: an accepted piece's numbers must not overflow 64.
      const __int128 end = static_cast<__int128>(p.offset) + __int128{12} * p.count;
      if (p.begin != covered[static_cast<std::size_t>(p.param)] || p.count < 1 || end > file.bytes)
        broken("a piece was accepted outside its param or its file");
      covered[static_cast<std::size_t>(p.param)] += p.count;
    }
    for (std::size_t i = 0; i < m.params.size(); ++i)
      if (covered[i] != m.params[i].numel) broken("a param was accepted not tiled by its pieces");
    // A model of exactly the checkpoint's params matches it (a name given twice would not).
    UnitSpec unit{"all", {}};
    for (const CheckpointParam& p : m.params) unit.params.push_back({p.name, p.shape});
    if (const std::string e = checkpoint_mismatch(m, {unit}, "fuzz/meta.json"); !e.empty())
      broken("an accepted checkpoint does not match a model of its own params: " + e);
    const std::string again = to_json(m);
    if (to_json(meta_from_json(again, "fuzz/again.json")) != again)
      broken("to_json of an accepted checkpoint does not read back to itself");
  } catch (const Error& e) {
    broken(std::string("an accepted checkpoint's own metadata was refused: ") + e.what());
  } catch (...) {
    broken("an exception other than zero::Error");
  }
  return Outcome::ok;
}

}  // namespace zero::fuzz
