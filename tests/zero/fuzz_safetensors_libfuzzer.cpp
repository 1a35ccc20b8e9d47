// A libFuzzer target over the safetensors reader (zero/safetensors.hpp): the header's length from
// the first bytes, the header against the data section, and the same bytes read as a file
// (tests/zero/fuzz_cases.hpp). Not built by the suite; bench/fuzz.sh builds it with clang
// -fsanitize=fuzzer,address,undefined and runs it from tests/zero/fuzz_corpus_safetensors/.
// Anything but success or zero::Error aborts (libFuzzer then saves the input): add each such
// input to that corpus, which the suite runs (test_fuzz_files.cpp).
#include <cstddef>
#include <cstdint>

#include "tests/zero/fuzz_cases.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  (void)zero::fuzz::safetensors_case(std::span(reinterpret_cast<const std::byte*>(data), size),
                                     true);
  return 0;
}
