// The file fuzzers' corpora run through the same cases as their libFuzzer targets
// (tests/zero/fuzz_cases.hpp), without libFuzzer: every seed and every past crasher of
// fuzz_corpus_safetensors/ and fuzz_corpus_checkpoint/ ends in success or zero::Error, with the
// reader's promises kept. The valid seeds must stay accepted, so that a reader grown too strict
// fails here as well (a seed named ok_* is valid).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/zero/fuzz_cases.hpp"

namespace zero {
namespace {
namespace fs = std::filesystem;

std::vector<fs::path> corpus(const char* env) {
  const char* dir = std::getenv(env);
  REQUIRE(dir != nullptr);
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file()) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

std::string bytes_of(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

bool valid_seed(const fs::path& p) {
  return p.filename().string().starts_with("ok_");
}

TEST_CASE("Every safetensors seed and past crasher ends in success or one zero::Error") {
  const auto files = corpus("ZERO_FUZZ_SAFETENSORS");
  CHECK(files.size() >= 10);
  int ok = 0;
  for (const auto& p : files) {
    CAPTURE(p.filename().string());
    const std::string b = bytes_of(p);
    const auto outcome = fuzz::safetensors_case(
        std::span(reinterpret_cast<const std::byte*>(b.data()), b.size()), true);
    if (valid_seed(p)) CHECK(outcome == fuzz::Outcome::ok);
    ok += outcome == fuzz::Outcome::ok;
  }
  CHECK(ok >= 3);
}

TEST_CASE("Every checkpoint metadata seed and past crasher ends in success or one zero::Error") {
  const auto files = corpus("ZERO_FUZZ_CHECKPOINT");
  CHECK(files.size() >= 10);
  int ok = 0;
  for (const auto& p : files) {
    CAPTURE(p.filename().string());
    const auto outcome = fuzz::checkpoint_meta_case(bytes_of(p));
    if (valid_seed(p)) CHECK(outcome == fuzz::Outcome::ok);
    ok += outcome == fuzz::Outcome::ok;
  }
  CHECK(ok >= 2);
}

}  // namespace
}  // namespace zero
