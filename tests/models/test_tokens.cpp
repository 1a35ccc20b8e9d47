// Tests of the token files and the sampler (models/tokens.hpp): llm.c and nanoGPT files written
// here byte by byte and read back, one sentence for each bad file, and the sampler's promises
// (deterministic, every window once per epoch, the same global batch on every split, resumable).
#include "models/tokens.hpp"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "tests/temp_dir.hpp"

using namespace zero::models;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

struct TempDir : zero::testing::TempDir {
  TempDir() : zero::testing::TempDir("zero-tokens-") {}
};

using Bytes = std::vector<unsigned char>;

template <class T>
void append(Bytes& out, T value) {
  const std::size_t at = out.size();
  out.resize(at + sizeof(T));
  std::memcpy(out.data() + at, &value, sizeof(T));  // little-endian hosts, as the reader requires
}

// An llm.c header (256 int32: magic, version, count, zeros) followed by `tokens` of type T.
template <class T>
Bytes llmc(std::int32_t magic, std::int32_t version, std::int32_t count,
           const std::vector<T>& tokens) {
  Bytes out;
  append(out, magic);
  append(out, version);
  append(out, count);
  for (int i = 3; i < 256; ++i) append(out, std::int32_t{0});
  for (T t : tokens) append(out, t);
  return out;
}

Bytes raw(const std::vector<std::uint16_t>& tokens) {
  Bytes out;
  for (auto t : tokens) append(out, t);
  return out;
}

std::string write(const TempDir& dir, const std::string& name, const Bytes& bytes) {
  const std::string path = dir.file(name);
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
  return path;
}

// Tokens 0, 1, 2, ... (mod 65536): a token's value tells where in the file it was.
std::vector<std::uint16_t> counting(std::int64_t n) {
  std::vector<std::uint16_t> t(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) t[i] = static_cast<std::uint16_t>(i);
  return t;
}

// The message of the zero::Error that `open` throws (fails the test if none).
template <class F>
std::string error_of(F open) {
  try {
    open();
  } catch (const zero::Error& e) {
    return e.what();
  }
  FAIL("no zero::Error thrown");
  return {};
}

std::vector<std::int32_t> tokens_of(const TokenSampler& s, std::int64_t i) {
  std::vector<std::int32_t> in(s.seq_len()), out(s.seq_len());
  s.sequence(i, in, out);
  in.push_back(out.back());  // the whole window: inputs and the last target
  return in;
}

}  // namespace

TEST_CASE("An llm.c GPT-2 shard (magic 20240520, version 1) reads back token for token") {
  TempDir dir;
  const std::vector<std::uint16_t> tokens = {50256, 0, 1, 65535, 464, 318};
  const TokenFile f(write(dir, "gpt2.bin", llmc(20240520, 1, 6, tokens)));
  CHECK(f.format() == TokenFormat::llmc_uint16);
  CHECK(f.version() == 1);
  CHECK(f.path() == dir.file("gpt2.bin"));
  REQUIRE(f.size() == 6);
  for (int i = 0; i < 6; ++i) CHECK(f[i] == tokens[i]);
  std::vector<std::int32_t> some(3);
  f.copy(2, some);
  CHECK(some == std::vector<std::int32_t>{1, 65535, 464});
}

TEST_CASE("An llm.c LLaMA-3 shard (magic 20240801, version 7) reads uint32 tokens") {
  TempDir dir;
  const std::vector<std::uint32_t> tokens = {128000, 70000, 0, 128255};
  const TokenFile f(write(dir, "llama3.bin", llmc(20240801, 7, 4, tokens)));
  CHECK(f.format() == TokenFormat::llmc_uint32);
  CHECK(f.version() == 7);
  REQUIRE(f.size() == 4);
  for (int i = 0; i < 4; ++i) CHECK(f[i] == tokens[i]);
  CHECK_NOTHROW(f.check_vocab(128256));
  CHECK_THAT(error_of([&] { f.check_vocab(100000); }),
             Contains("token 128000 at position 0") && Contains("vocabulary of 100000"));
}

TEST_CASE("A nanoGPT train.bin (raw uint16 tokens, no header) reads back") {
  TempDir dir;
  const std::vector<std::uint16_t> tokens = {15496, 11, 995, 0, 65535};
  const TokenFile f(write(dir, "train.bin", raw(tokens)));
  CHECK(f.format() == TokenFormat::raw_uint16);
  CHECK(f.version() == 0);
  REQUIRE(f.size() == 5);
  for (int i = 0; i < 5; ++i) CHECK(f[i] == tokens[i]);
  CHECK(format_name(f.format()) == "nanoGPT (uint16, no header)");
}

TEST_CASE("write_llmc_shard writes llm.c's version-1 header and leaves no temporary file") {
  TempDir dir;
  const std::string path = dir.file("shard.bin");
  const std::vector<std::uint16_t> tokens = {7, 8, 9};
  write_llmc_shard(path, tokens);
  std::ifstream in(path, std::ios::binary);
  const Bytes bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(bytes == llmc(20240520, 1, 3, tokens));
  CHECK_FALSE(fs::exists(path + ".tmp"));
  const TokenFile f(path);
  CHECK((f.size() == 3 && f[0] == 7 && f[2] == 9));
}

TEST_CASE("A shard that cannot be written names the file and leaves nothing behind") {
  TempDir dir;
  const std::string path = dir.file("missing-dir/shard.bin");
  const std::vector<std::uint16_t> tokens = {1, 2};
  CHECK_THAT(error_of([&] { write_llmc_shard(path, tokens); }),
             Contains(path) && Contains("No such file or directory"));
  CHECK(fs::is_empty(dir.path));
  fs::create_directory(dir.file("taken"));  // refused before anything is written
  CHECK_THAT(error_of([&] { write_llmc_shard(dir.file("taken"), tokens); }),
             Contains(dir.file("taken")) && Contains("is a folder"));
  CHECK_FALSE(fs::exists(dir.file("taken.tmp")));
}

TEST_CASE("Each bad token file gets one sentence naming the file and what is wrong") {
  TempDir dir;
  auto open = [](const std::string& path) { return [path] { TokenFile f(path); }; };

  SECTION("missing") {
    const std::string path = dir.file("nope.bin");
    CHECK_THAT(error_of(open(path)), Contains(path) && Contains("No such file or directory"));
  }
  SECTION("a directory") {
    CHECK_THAT(error_of(open(dir.path.string())),
               Contains(dir.path.string()) && Contains("not a regular file"));
  }
  SECTION("empty") {
    const std::string path = write(dir, "empty.bin", {});
    CHECK_THAT(error_of(open(path)), Contains(path) && Contains("is empty"));
  }
  SECTION("an llm.c header of an unknown version") {
    const std::string path = write(dir, "v2.bin", llmc<std::uint16_t>(20240520, 2, 2, {1, 2}));
    CHECK_THAT(error_of(open(path)), Contains(path) && Contains("unknown version 2"));
    const std::string llama = write(dir, "v1.bin", llmc<std::uint32_t>(20240801, 1, 1, {1}));
    CHECK_THAT(error_of(open(llama)),
               Contains(llama) && Contains("unknown version 1") && Contains("known version is 7"));
  }
  SECTION("the llm.c magic but less than a header") {
    Bytes bytes = llmc<std::uint16_t>(20240520, 1, 0, {});
    bytes.resize(100);
    const std::string path = write(dir, "short.bin", bytes);
    CHECK_THAT(error_of(open(path)),
               Contains(path) && Contains("only 100 bytes") && Contains("1024-byte header"));
  }
  SECTION("truncated: fewer tokens than the header promises") {
    const std::string path = write(dir, "cut.bin", llmc(20240520, 1, 1000, counting(300)));
    CHECK_THAT(error_of(open(path)), Contains(path) && Contains("truncated") &&
                                         Contains("promises 1000 tokens") &&
                                         Contains("only 600 bytes"));
  }
  SECTION("more bytes than the header's count") {
    const std::string path = write(dir, "long.bin", llmc(20240520, 1, 10, counting(12)));
    CHECK_THAT(error_of(open(path)),
               Contains(path) && Contains("4 bytes more") && Contains("10 tokens"));
  }
  SECTION("a negative count in the header") {
    const std::string path = write(dir, "neg.bin", llmc(20240520, 1, -3, counting(4)));
    CHECK_THAT(error_of(open(path)), Contains(path) && Contains("negative token count"));
  }
  SECTION("an odd byte count for a raw uint16 file") {
    const std::string path = write(dir, "odd.bin", Bytes(1001, 'a'));
    CHECK_THAT(error_of(open(path)), Contains(path) && Contains("odd size, 1001 bytes"));
  }
  SECTION("too short for one training sequence of seq_len + 1 tokens") {
    const TokenFile f(write(dir, "ten.bin", raw(counting(10))));
    CHECK_THAT(error_of([&] { TokenSampler(f, 10, 1); }), Contains(f.path()) &&
                                                              Contains("holds 10 tokens") &&
                                                              Contains("seq_len + 1 = 11 tokens"));
    CHECK_NOTHROW(TokenSampler(f, 9, 1));
  }
}

TEST_CASE("check_vocab names the first token outside the vocabulary, wherever it is") {
  TempDir dir;
  std::vector<std::uint16_t> tokens(300000, 255);
  tokens[199999] = 256;  // in a later chunk than the first offender
  tokens[70001] = 300;
  tokens[200000] = 9000;
  const TokenFile f(write(dir, "vocab.bin", raw(tokens)));
  CHECK_THAT(error_of([&] { f.check_vocab(256); }), Contains(f.path()) &&
                                                        Contains("token 300 at position 70001") &&
                                                        Contains("vocabulary of 256"));
  CHECK_THAT(error_of([&] { f.check_vocab(301); }), Contains("token 9000 at position 200000"));
  CHECK_NOTHROW(f.check_vocab(9001));
  CHECK_NOTHROW(f.check_vocab(50257));
  std::vector<std::uint16_t> edge(100000, 3);
  edge[65537] = 256;  // equal to the vocabulary: already outside it
  const TokenFile g(write(dir, "edge.bin", raw(edge)));
  CHECK_THAT(error_of([&] { g.check_vocab(256); }), Contains("token 256 at position 65537"));
  CHECK_NOTHROW(g.check_vocab(257));
}

TEST_CASE("shuffle_index is a permutation of [0, n) for every n") {
  for (std::int64_t n : {1, 2, 3, 4, 5, 7, 15, 16, 17, 100, 1000, 4095, 4096, 4097}) {
    std::vector<int> seen(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) {
      const std::int64_t j = shuffle_index(i, n, 42);
      REQUIRE((j >= 0 && j < n));
      ++seen[static_cast<std::size_t>(j)];
    }
    CHECK(std::all_of(seen.begin(), seen.end(), [](int c) { return c == 1; }));
  }
  // A billion windows need no table: distinct and in range for a sample of them.
  const std::int64_t n = 1'000'000'007;
  std::set<std::int64_t> got;
  for (std::int64_t i = 0; i < 100000; ++i) got.insert(shuffle_index(i * 10007 % n, n, 7));
  CHECK(got.size() == 100000);
  CHECK((*got.begin() >= 0 && *got.rbegin() < n));
}

TEST_CASE("A sequence is a window of T + 1 tokens at k*T: targets are the inputs shifted by one") {
  TempDir dir;
  const TokenFile f(write(dir, "count.bin", raw(counting(1001))));
  const TokenSampler s(f, 16, 3);
  CHECK(s.windows() == 1000 / 16);
  // W * T + 1 tokens make W windows, the last one ending at the file's last token; one less, W - 1.
  CHECK(TokenSampler(TokenFile(write(dir, "33.bin", raw(counting(33)))), 8, 3).windows() == 4);
  CHECK(TokenSampler(TokenFile(write(dir, "32.bin", raw(counting(32)))), 8, 3).windows() == 3);
  std::vector<std::int32_t> in(16), out(16);
  for (std::int64_t i = 0; i < 200; ++i) {
    s.sequence(i, in, out);
    const std::int64_t start = s.window(i) * 16;
    for (int j = 0; j < 16; ++j) {
      REQUIRE(in[j] == start + j);
      REQUIRE(out[j] == start + j + 1);
    }
  }
}

TEST_CASE("Every window is read exactly once per epoch, in a new order each epoch") {
  TempDir dir;
  const TokenFile f(write(dir, "count.bin", raw(counting(4 * 997 + 3))));
  const TokenSampler s(f, 4, 11);
  const std::int64_t w = s.windows();
  REQUIRE(w == 997);
  std::vector<std::vector<std::int64_t>> orders(3);
  for (int e = 0; e < 3; ++e) {
    for (std::int64_t k = 0; k < w; ++k) orders[e].push_back(s.window(e * w + k));
    std::vector<std::int64_t> sorted = orders[e];
    std::sort(sorted.begin(), sorted.end());
    for (std::int64_t k = 0; k < w; ++k) REQUIRE(sorted[k] == k);
  }
  CHECK(orders[0] != orders[1]);
  CHECK(orders[1] != orders[2]);
  std::vector<std::int64_t> identity(w);
  for (std::int64_t k = 0; k < w; ++k) identity[k] = k;
  CHECK(orders[0] != identity);
}

TEST_CASE("Without shuffling the windows come in file order, epoch after epoch") {
  TempDir dir;
  const TokenFile f(write(dir, "count.bin", raw(counting(41))));
  const TokenSampler s(f, 8, 5, /*shuffle=*/false);
  REQUIRE(s.windows() == 5);
  for (std::int64_t i = 0; i < 15; ++i) CHECK(s.window(i) == i % 5);
}

TEST_CASE("The same seed gives the same sequences; another seed another order") {
  TempDir dir;
  const TokenFile f(write(dir, "count.bin", raw(counting(8 * 500 + 1))));
  const TokenSampler a(f, 8, 1234), b(TokenFile(f.path()), 8, 1234), c(f, 8, 1235);
  std::vector<std::int64_t> wa, wc;
  for (std::int64_t i = 0; i < 1000; ++i) {
    REQUIRE(tokens_of(a, i) == tokens_of(b, i));
    wa.push_back(a.window(i));
    wc.push_back(c.window(i));
  }
  CHECK(wa != wc);
}

TEST_CASE("A run resumed at any index reads what the uninterrupted run read there") {
  TempDir dir;
  const std::string path = write(dir, "count.bin", raw(counting(8 * 50 + 5)));
  const TokenSampler whole(TokenFile(path), 8, 99);
  std::vector<std::vector<std::int32_t>> seen;
  for (std::int64_t i = 0; i < 180; ++i) seen.push_back(tokens_of(whole, i));  // 3.6 epochs
  for (std::int64_t resume : {0, 1, 49, 50, 51, 137}) {
    const TokenSampler again(TokenFile(path), 8, 99);  // a new process: nothing carried over
    for (std::int64_t i = resume; i < 180; ++i) REQUIRE(tokens_of(again, i) == seen[i]);
  }
}

TEST_CASE("The ranks' micro-batches of a step are the step's global batch, on every split") {
  TempDir dir;
  const TokenFile f(write(dir, "count.bin", raw(counting(6 * 37 + 1))));
  const TokenSampler s(f, 6, 21);
  constexpr int kGlobal = 8;
  std::map<std::pair<int, int>, std::vector<std::multiset<std::vector<std::int32_t>>>> by_split;
  for (int ranks : {1, 2, 4}) {
    for (int accum : {1, 2}) {
      const BatchSplit split{ranks, accum, kGlobal / (ranks * accum)};
      REQUIRE(split.global_batch() == kGlobal);
      const std::size_t n = static_cast<std::size_t>(split.micro_batch) * 6;
      auto& steps = by_split[{ranks, accum}];
      for (std::int64_t step = 0; step < 10; ++step) {  // 80 sequences: past the first epoch
        std::multiset<std::vector<std::int32_t>> got, want;
        for (int micro = 0; micro < accum; ++micro) {
          for (int rank = 0; rank < ranks; ++rank) {
            std::vector<std::int32_t> in(n), out(n);
            s.micro_batch(step, micro, rank, split, in, out);
            for (int b = 0; b < split.micro_batch; ++b) {
              std::vector<std::int32_t> seq(in.begin() + b * 6, in.begin() + b * 6 + 6);
              REQUIRE(std::equal(out.begin() + b * 6, out.begin() + b * 6 + 5, seq.begin() + 1));
              seq.push_back(out[b * 6 + 5]);
              got.insert(seq);
            }
          }
        }
        for (int k = 0; k < kGlobal; ++k) want.insert(tokens_of(s, step * kGlobal + k));
        REQUIRE(got == want);
        steps.push_back(got);
      }
    }
  }
  for (const auto& [split, steps] : by_split) CHECK(steps == by_split.begin()->second);
}

TEST_CASE("A micro-batch outside its split is refused") {
  TempDir dir;
  const TokenFile f(write(dir, "count.bin", raw(counting(100))));
  const TokenSampler s(f, 4, 1);
  std::vector<std::int32_t> in(8), out(8);
  const BatchSplit split{2, 1, 2};
  CHECK_THAT(error_of([&] { s.micro_batch(0, 0, 2, split, in, out); }), Contains("rank 2"));
  CHECK_THAT(error_of([&] { s.micro_batch(0, 1, 0, split, in, out); }), Contains("micro-batch 1"));
  std::vector<std::int32_t> small(4);
  CHECK_THAT(error_of([&] { s.micro_batch(0, 0, 0, split, small, out); }), Contains("needs 8"));
}
