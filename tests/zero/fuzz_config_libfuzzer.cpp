// A libFuzzer target over the same pipeline as test_fuzz.cpp (parse_config -> resolve_batch ->
// plan_input_from_config -> plan_memory), for runs longer than the suite's. Not built by default;
// build it by hand with clang against a configured build's libzero.a, e.g.:
//
//   clang++ -std=c++20 -g -O1 -fsanitize=fuzzer -I. -Ibuild-config \
//     tests/zero/fuzz_config_libfuzzer.cpp build-config/zero/libzero.a \
//     -lmpi -lopenblas -lboost_json -lpthread -o /tmp/fuzz_config
//   mkdir -p /tmp/fuzz_work && /tmp/fuzz_config -max_total_time=600 /tmp/fuzz_work \
//     tests/zero/deepspeed_configs tests/zero/fuzz_corpus
//
// (The first directory receives the new inputs libFuzzer finds: keep it outside the tree.)
// Anything but success or zero::Error aborts (libFuzzer then saves the input): add each such
// input to tests/zero/fuzz_corpus/, which the suite runs.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "zero/config.hpp"
#include "base/error.hpp"
#include "zero/planner.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  // The first byte picks the world size, as the suite's run does.
  const int worlds[] = {1, 2, 3, 4, 7, 8, 64, 1 << 20};
  const int world = size ? worlds[data[0] % 8] : 1;
  try {
    zero::Config c = zero::parse_config(text, "fuzz.json");
    c.resolve_batch(world);
    zero::PlanInput in = zero::plan_input_from_config(c, world);
    in.units = zero::uniform_units(100'000, 8);
    (void)zero::plan_memory(in);
  } catch (const zero::Error&) {
    // the expected refusal
  } catch (...) {
    std::abort();  // bad_alloc or another exception type: a crasher
  }
  return 0;
}
