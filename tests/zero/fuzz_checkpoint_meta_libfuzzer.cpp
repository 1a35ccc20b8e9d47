// A libFuzzer target over a checkpoint's meta.json (zero/checkpoint_format.hpp): meta_from_json's
// parse and checks, then the promises of an accepted one (tests/zero/fuzz_cases.hpp). Not built
// by the suite; bench/fuzz.sh builds it with clang -fsanitize=fuzzer,address,undefined and runs
// it from tests/zero/fuzz_corpus_checkpoint/. Anything but success or zero::Error aborts
// (libFuzzer then saves the input): add each such input to that corpus, which the suite runs
// (test_fuzz_files.cpp).
#include <cstddef>
#include <cstdint>

#include "tests/zero/fuzz_cases.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  (void)zero::fuzz::checkpoint_meta_case(
      std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
