// A bounded, seeded mutation run over the config reader and the planner's inputs: each case goes
// parse_config -> resolve_batch(world) -> plan_input_from_config(c, world) -> plan_memory, and
// must end in success or zero::Error: never a signal, std::bad_alloc, another exception type or
// a hang (the slowest case's CPU time is measured and must stay under kCaseLimit; CPU time, not
// the wall clock, so that a loaded machine does not fail it). Inputs are real DeepSpeed
// configs (ZERO_DEEPSPEED_CONFIGS) and the corpus of past crashers (ZERO_FUZZ_CORPUS), mutated by
// byte flips, insertions and deletions, numeric extremes, type swaps and deep nesting.
//
// ZERO_FUZZ_SEED and ZERO_FUZZ_CASES change the run (e.g. a longer one by hand); the case being
// run is written to ZERO_FUZZ_CURRENT (default: a temp file) first, so that a crash leaves its
// input behind for the corpus. Every file of the corpus is run as a regression test as well.
#include <catch2/catch.hpp>

#include <time.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "zero/config.hpp"
#include "base/error.hpp"
#include "zero/planner.hpp"

namespace {

// Seconds for one case, planner included; AddressSanitizer (scripts/sanitize) runs it ~5x slower.
#ifdef __SANITIZE_ADDRESS__
constexpr double kCaseLimit = 20.0;
#else
constexpr double kCaseLimit = 2.0;
#endif

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::string> files_in(const char* env) {
  std::vector<std::string> out;
  const char* dir = std::getenv(env);
  if (!dir) return out;
  std::vector<std::filesystem::path> paths;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".json") paths.push_back(e.path());
  std::sort(paths.begin(), paths.end());  // the same order everywhere: the run is seeded
  for (const auto& p : paths) out.push_back(read_file(p));
  return out;
}

// What a case ended in. Anything but ok and zero_error fails the test.
enum class Outcome { ok, zero_error, bad_alloc, other_exception };

struct Case {
  Outcome outcome = Outcome::ok;
  std::string what;
  double seconds = 0;
};

// This thread's CPU time: what a case costs, whatever else the machine is running.
double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// The pipeline a user's config goes through before a run: read, the batch rule at `world`
// ranks, the planner's inputs and the plan of a small model.
Case run_case(const std::string& text, int world, std::int64_t params, int units) {
  const double t0 = thread_cpu_seconds();
  Case out;
  try {
    zero::Config c = zero::parse_config(text, "fuzz.json");
    c.resolve_batch(world);
    zero::PlanInput in = zero::plan_input_from_config(c, world);
    in.units = zero::uniform_units(params, units);
    (void)zero::plan_memory(in);
  } catch (const zero::Error& e) {
    out.outcome = Outcome::zero_error;
    out.what = e.what();
  } catch (const std::bad_alloc&) {
    out.outcome = Outcome::bad_alloc;
    out.what = "std::bad_alloc";
  } catch (const std::exception& e) {
    out.outcome = Outcome::other_exception;
    out.what = e.what();
  }
  out.seconds = thread_cpu_seconds() - t0;
  return out;
}

// Values that break readers: integer and float limits, JSON's non-numbers, wrong types.
const std::vector<std::string> kExtremes = {"0",
                                            "-1",
                                            "1",
                                            "2147483647",
                                            "2147483648",
                                            "4294967297",
                                            "9223372036854775807",
                                            "9223372036854775808",
                                            "18446744073709551616",
                                            "-9223372036854775809",
                                            "1e308",
                                            "-1e308",
                                            "1e999",
                                            "1e-320",
                                            "1e-46",
                                            "-0",
                                            "0.5",
                                            "1e18",
                                            "NaN",
                                            "\"nan\"",
                                            "\"inf\"",
                                            "\"auto\"",
                                            "\"\"",
                                            "true",
                                            "false",
                                            "null",
                                            "[]",
                                            "{}",
                                            "[0.9]",
                                            "[1e308, -1e308]",
                                            "{\"enabled\": true}",
                                            "\"Adam\"",
                                            "\"OneCycle\"",
                                            "\"cpu\"",
                                            "\"bf16\"",
                                            "5e8",
                                            "3",
                                            "4"};

const std::vector<std::string> kWords = {"\"stage\"",
                                         "\"train_batch_size\"",
                                         "\"gradient_accumulation_steps\"",
                                         "\"auto\"",
                                         "{",
                                         "}",
                                         "[",
                                         "]",
                                         ",",
                                         ":",
                                         "\"",
                                         "\\",
                                         "//",
                                         "/*",
                                         "\"fp16\"",
                                         "\"enabled\"",
                                         "1e",
                                         "-",
                                         "\\u0000"};

class Mutator {
 public:
  explicit Mutator(std::uint64_t seed) : rng_(seed) {}

  std::size_t below(std::size_t n) {
    return n == 0 ? 0 : std::uniform_int_distribution<std::size_t>(0, n - 1)(rng_);
  }
  template <class T>
  const T& pick(const std::vector<T>& v) {
    return v[below(v.size())];
  }

  // One or two mutations; a quarter of the cases get byte-level ones (which mostly test the
  // JSON parser), the rest only value-level ones (which reach the readers and the planner).
  std::string mutate(std::string s) {
    const int rounds = 1 + static_cast<int>(below(2));
    const bool bytes = below(4) == 0;
    for (int r = 0; r < rounds; ++r) s = once(std::move(s), bytes ? below(9) : 4 + below(5));
    return s;
  }

 private:
  // The spans of number literals, strings, true/false/null, arrays and objects after a ':'.
  std::vector<std::pair<std::size_t, std::size_t>> values(const std::string& s) {
    std::vector<std::pair<std::size_t, std::size_t>> out;
    for (std::size_t i = 0; i < s.size(); ++i) {
      if (s[i] != ':') continue;
      std::size_t b = i + 1;
      while (b < s.size() && (s[b] == ' ' || s[b] == '\n')) ++b;
      std::size_t e = b;
      int depth = 0;
      bool in_string = false;
      for (; e < s.size(); ++e) {
        char ch = s[e];
        if (in_string) {
          if (ch == '\\')
            ++e;
          else if (ch == '"')
            in_string = false;
          continue;
        }
        if (ch == '"')
          in_string = true;
        else if (ch == '[' || ch == '{')
          ++depth;
        else if (ch == ']' || ch == '}') {
          if (depth == 0) break;
          --depth;
        } else if (ch == ',' && depth == 0)
          break;
      }
      if (e > b) out.push_back({b, e});
    }
    return out;
  }

  std::string once(std::string s, std::size_t op) {
    switch (op) {
      case 0:  // flip a byte
        if (!s.empty()) s[below(s.size())] ^= static_cast<char>(1 << below(8));
        return s;
      case 1:  // insert a random byte
        s.insert(s.begin() + static_cast<std::ptrdiff_t>(below(s.size() + 1)),
                 static_cast<char>(below(256)));
        return s;
      case 2: {  // delete a range
        if (s.empty()) return s;
        std::size_t at = below(s.size()), n = 1 + below(std::min<std::size_t>(16, s.size() - at));
        return s.erase(at, n);
      }
      case 3: {  // insert a JSON token
        s.insert(below(s.size() + 1), pick(kWords));
        return s;
      }
      case 4:
      case 5:
      case 6: {  // replace a value with an extreme (or a value of another type)
        auto v = values(s);
        if (v.empty()) return s;
        auto [b, e] = pick(v);
        return s.replace(b, e - b, pick(kExtremes));
      }
      case 7: {  // copy one value over another (type swaps between real keys)
        auto v = values(s);
        if (v.size() < 2) return s;
        auto [b1, e1] = pick(v);
        auto [b2, e2] = pick(v);
        std::string src = s.substr(b1, e1 - b1);
        return s.replace(b2, e2 - b2, src);
      }
      default: {  // deep nesting in place of a value
        auto v = values(s);
        if (v.empty()) return s;
        auto [b, e] = pick(v);
        const std::size_t depth = 1 + (below(8) == 0 ? below(5000) : below(60));
        std::string nest(depth, below(2) ? '[' : '{');
        if (nest[0] == '{') {
          nest.clear();
          for (std::size_t i = 0; i < depth; ++i) nest += "{\"stage\":";
          nest += "1" + std::string(depth, '}');
        } else {
          nest += "1" + std::string(depth, ']');
        }
        return s.replace(b, e - b, nest);
      }
    }
  }

  std::mt19937_64 rng_;
};

std::uint64_t env_or(const char* name, std::uint64_t fallback) {
  const char* v = std::getenv(name);
  return v ? std::strtoull(v, nullptr, 10) : fallback;
}

std::string current_path() {
  const char* p = std::getenv("ZERO_FUZZ_CURRENT");
  return p ? p : (std::filesystem::temp_directory_path() / "zero_fuzz_current.json").string();
}

const char* name_of(Outcome o) {
  switch (o) {
    case Outcome::ok:
      return "ok";
    case Outcome::zero_error:
      return "zero::Error";
    case Outcome::bad_alloc:
      return "std::bad_alloc";
    case Outcome::other_exception:
      return "another exception";
  }
  return "?";
}

}  // namespace

TEST_CASE("Every fuzz corpus file ends in success or zero::Error, in bounded time") {
  const auto corpus = files_in("ZERO_FUZZ_CORPUS");
  REQUIRE_FALSE(corpus.empty());
  for (const auto& text : corpus) {
    INFO(text.substr(0, 400));
    for (int world : {1, 2, 3, 8}) {
      const Case c = run_case(text, world, 10'000, 8);
      INFO("world " << world << ": " << name_of(c.outcome) << ": " << c.what);
      CHECK((c.outcome == Outcome::ok || c.outcome == Outcome::zero_error));
      CHECK(c.seconds < kCaseLimit);
    }
  }
}

TEST_CASE("Mutated DeepSpeed configs end in success or zero::Error, never a crash or a hang") {
  std::vector<std::string> seeds = files_in("ZERO_DEEPSPEED_CONFIGS");
  for (auto& c : files_in("ZERO_FUZZ_CORPUS")) seeds.push_back(std::move(c));
  REQUIRE(seeds.size() >= 10);
  const std::uint64_t seed = env_or("ZERO_FUZZ_SEED", 20261202);
  const std::uint64_t cases = env_or("ZERO_FUZZ_CASES", 8000);
  Mutator m(seed);
  const std::vector<int> worlds = {1, 2, 3, 4, 7, 8, 64, 1 << 20};
  const std::string current = current_path();
  int ok = 0, refused = 0, failures = 0;
  double slowest = 0;
  std::string slowest_input;
  for (std::uint64_t i = 0; i < cases; ++i) {
    const std::string text = m.mutate(m.pick(seeds));
    const int world = m.pick(worlds);
    const std::int64_t params = 1 + static_cast<std::int64_t>(m.below(1'000'000));
    const int units = 1 + static_cast<int>(m.below(std::min<std::int64_t>(params, 64)));
    std::ofstream(current, std::ios::binary | std::ios::trunc) << text;  // left by a crash
    const Case c = run_case(text, world, params, units);
    if (c.seconds > slowest) slowest = c.seconds, slowest_input = text;
    if (std::getenv("ZERO_FUZZ_VERBOSE")) std::cerr << name_of(c.outcome) << ": " << c.what << '\n';
    if (c.outcome == Outcome::ok)
      ++ok;
    else if (c.outcome == Outcome::zero_error)
      ++refused;
    else if (++failures <= 5)
      FAIL_CHECK("case " << i << " (seed " << seed << ", world " << world << ", " << params
                         << " params in " << units << " units) ended in " << name_of(c.outcome)
                         << ": " << c.what << "\ninput:\n"
                         << text);
  }
  std::filesystem::remove(current);
  WARN(cases << " fuzz cases (seed " << seed << "): " << ok << " ran, " << refused
             << " refused with zero::Error, " << failures << " failed; slowest case " << slowest
             << " s");
  CHECK(failures == 0);
  INFO("slowest input:\n" << slowest_input.substr(0, 2000));
  CHECK(slowest < kCaseLimit);
  // A mutation run that never gets past the reader tests nothing downstream.
  CHECK(ok > static_cast<int>(cases / 20));
}
