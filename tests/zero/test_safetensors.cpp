// Safetensors files (zero/safetensors.hpp): what the writer puts on disk, byte for byte as the
// format's specification says; fp32 back bitwise, bf16 and fp16 rounded to nearest even; and
// every malformed file refused by the reader with one sentence naming the file and the tensor.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "zero/zero.hpp"
#include "tests/temp_dir.hpp"

namespace zero {
namespace {
namespace fs = std::filesystem;

struct TempDir : testing::TempDir {
  TempDir() : testing::TempDir("zero-st-") {}
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::uint32_t bits(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}
float from_bits(std::uint32_t u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

// A raw file: the 8-byte length (given, or the header's), the header, then `data`.
fs::path raw_file(const fs::path& dir, const std::string& header, const std::string& data,
                  std::optional<std::uint64_t> length = std::nullopt) {
  static int n = 0;
  const fs::path p = dir / ("raw" + std::to_string(n++) + ".safetensors");
  std::ofstream out(p, std::ios::binary);
  const std::uint64_t len = length.value_or(header.size());
  out.write(reinterpret_cast<const char*>(&len), 8);
  out << header << data;
  return p;
}

// The file is refused with one sentence (no line break) that names it and holds `needle`.
void refused(const fs::path& p, const std::string& needle) {
  CAPTURE(p.string(), needle);
  try {
    SafetensorsFile f(p.string());
    FAIL("the file was accepted");
  } catch (const Error& e) {
    const std::string what = e.what();
    CAPTURE(what);
    CHECK(what.find(p.string()) != std::string::npos);
    CHECK(what.find(needle) != std::string::npos);
    CHECK(what.find('\n') == std::string::npos);
  }
}

TEST_CASE("An fp32 file reads back bitwise, laid out as the specification says") {
  TempDir dir;
  const std::string path = (dir.path / "a.safetensors").string();
  const std::vector<float> a = {1.5f,
                                -0.0f,
                                std::numeric_limits<float>::infinity(),
                                std::numeric_limits<float>::denorm_min(),
                                3.1415926f,
                                -2e-38f};
  const std::vector<float> scalar = {42.0f};
  {
    SafetensorsWriter w(
        path, {{"a", DType::f32, {2, 3}}, {"empty", DType::f32, {0, 4}}, {"s", DType::f32, {}}},
        {{"format", "pt"}, {"note", "x"}});
    w.write(std::span(a).first(4));  // writes may split a tensor anywhere
    w.write(std::span(a).subspan(4));
    w.write(scalar);
    w.commit();
  }
  const std::string bytes = slurp(path);
  std::uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  CHECK(n % 8 == 0);
  CHECK(bytes.size() == 8 + n + 7 * 4);
  const std::string header = bytes.substr(8, n);
  CHECK(header.front() == '{');
  CHECK(header.find("\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}") !=
        std::string::npos);
  CHECK(header.find("\"empty\":{\"dtype\":\"F32\",\"shape\":[0,4],\"data_offsets\":[24,24]}") !=
        std::string::npos);
  CHECK(header.find("\"s\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[24,28]}") !=
        std::string::npos);
  CHECK(header.find("\"__metadata__\":{\"format\":\"pt\",\"note\":\"x\"}") != std::string::npos);
  CHECK(std::memcmp(bytes.data() + 8 + n, a.data(), 24) == 0);  // little-endian, as in memory
  CHECK(!fs::exists(path + ".tmp"));

  SafetensorsFile f(path);
  REQUIRE(f.tensors().size() == 3);
  CHECK(f.metadata().size() == 2);
  const std::vector<float> back = f.read("a");
  for (std::size_t i = 0; i < a.size(); ++i) CHECK(bits(back[i]) == bits(a[i]));
  CHECK(f.read("s") == scalar);
  CHECK(f.read("empty").empty());
  std::vector<float> part(2);
  f.read(*f.find("a"), 3, part);
  CHECK(bits(part[0]) == bits(a[3]));
  CHECK(bits(part[1]) == bits(a[4]));
}

TEST_CASE("Values written as bf16 are rounded to nearest, ties to even, and read back exactly") {
  TempDir dir;
  const std::string path = (dir.path / "b.safetensors").string();
  // ulp(1) in bf16 is 2^-7: 1 + 2^-8 is a tie (to 1, even); 1 + 3·2^-8 a tie (to 1 + 2^-6, even);
  // 1 + 2^-8 + 2^-20 is past the tie (up); float's largest overflows to infinity.
  std::vector<float> x = {1.0f + 0x1p-8f,
                          1.0f + 3 * 0x1p-8f,
                          1.0f + 0x1p-8f + 0x1p-20f,
                          -1.0f - 0x1p-8f,
                          std::numeric_limits<float>::max(),
                          0.1f};
  const std::vector<std::uint16_t> want = {0x3f80, 0x3f82, 0x3f81, 0xbf80, 0x7f80, 0x3dcd};
  for (std::uint32_t i = 0; i < 1000; ++i) x.push_back(from_bits(0x3c000000u + i * 0x9e3779u));
  {
    SafetensorsWriter w(
        path, {{"w", DType::bf16, {static_cast<std::int64_t>(x.size())}}, {"h", DType::f16, {3}}});
    w.write(x);
    w.write(std::vector<float>{1.0f + 0x1p-11f, 65520.0f, 1e-8f});
    w.commit();
  }
  const std::string bytes = slurp(path);
  std::uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  for (std::size_t i = 0; i < want.size(); ++i) {
    std::uint16_t got = 0;
    std::memcpy(&got, bytes.data() + 8 + n + 2 * i, 2);
    CAPTURE(i);
    CHECK(got == want[i]);
  }
  SafetensorsFile f(path);
  CHECK(f.find("w")->dtype == "BF16");
  const std::vector<float> back = f.read("w");
  for (std::size_t i = 0; i < x.size(); ++i) CHECK(bits(back[i]) == bits(to_float(to_bf16(x[i]))));
  // fp16: 1 + 2^-11 is a tie (to 1), 65520 overflows to infinity, 1e-8 is below half the smallest
  // subnormal (to 0).
  CHECK(f.read("h") == std::vector<float>{1.0f, std::numeric_limits<float>::infinity(), 0.0f});
}

TEST_CASE("A file left unfinished never takes the final name") {
  TempDir dir;
  const std::string path = (dir.path / "c.safetensors").string();
  {
    SafetensorsWriter w(path, {{"a", DType::f32, {4}}});
    w.write(std::vector<float>{1, 2});
    CHECK(fs::exists(path + ".tmp"));
    CHECK_THROWS_WITH(w.commit(), Catch::Contains("tensor 'a' has 2 of its 4 values"));
  }
  CHECK(!fs::exists(path));
  CHECK(!fs::exists(path + ".tmp"));
  SafetensorsWriter w(path, {{"a", DType::f32, {1}}});
  CHECK_THROWS_WITH(w.write(std::vector<float>{1, 2}), Catch::Contains("more values"));
}

TEST_CASE("The writer refuses two tensors of one name and dtypes it cannot write") {
  TempDir dir;
  const std::string path = (dir.path / "d.safetensors").string();
  CHECK_THROWS_WITH(SafetensorsWriter(path, {{"a", DType::f32, {1}}, {"a", DType::f32, {1}}}),
                    Catch::Contains("two tensors are named 'a'"));
  CHECK_THROWS_WITH(SafetensorsWriter(path, {{"a", DType::i64, {1}}}),
                    Catch::Contains("cannot be written"));
  CHECK_THROWS_WITH(SafetensorsWriter(path, {{"__metadata__", DType::f32, {1}}}),
                    Catch::Contains("cannot be named"));
  CHECK_THROWS_WITH(
      SafetensorsWriter((dir.path / "no" / "e.safetensors").string(), {{"a", DType::f32, {1}}}),
      Catch::Contains("cannot create"));
}

TEST_CASE("Every malformed file is refused with one sentence naming the file and the tensor") {
  TempDir dir;
  const fs::path d = dir.path;
  const std::string t4 = R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  const std::string eight(8, '\0');
  CHECK_NOTHROW(SafetensorsFile(raw_file(d, t4 + "}   ", eight).string()));  // the valid one

  {
    const fs::path p = d / "short.safetensors";
    std::ofstream(p, std::ios::binary) << "abc";
    refused(p, "too short");
  }
  refused(raw_file(d, t4 + "}", eight, 1000), "the header length says 1000 bytes");
  refused(raw_file(d, t4, eight), "not a JSON object");
  refused(raw_file(d, "[1, 2]", ""), "does not start with '{'");
  refused(raw_file(d, R"({"t":[1]})", ""), "tensor 't' is not an object");
  refused(raw_file(d, R"({"t":{"dtype":"F32","shape":[2]}})", eight),
          "tensor 't' lacks \"dtype\", \"shape\" or \"data_offsets\"");
  refused(raw_file(d, R"({"t":{"dtype":"F12","shape":[2],"data_offsets":[0,8]}})", eight),
          "tensor 't': dtype 'F12' is not one of the format's");
  refused(raw_file(d, R"({"t":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", eight),
          "tensor 't': the shape holds a value that is not an integer >= 0");
  refused(
      raw_file(d, R"({"t":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})",
               eight),
      "tensor 't': shape [4294967296, 4294967296] overflows");
  refused(raw_file(d, R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[8]}})", eight),
          "tensor 't': \"data_offsets\" is not [begin, end]");
  refused(raw_file(d, R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", eight),
          "tensor 't': \"data_offsets\" is not [begin, end] with 0 <= begin <= end");
  refused(raw_file(d, R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", eight),
          "tensor 't': data_offsets [0, 8] hold 8 bytes, but shape [3] of F32 needs 3 x 4");
  refused(raw_file(d, R"({"t":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", eight),
          "tensor 't': data_offsets [0, 16] end past the data section's 8 bytes");
  refused(raw_file(d,
                   R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                   R"("u":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                   eight),
          "tensors 't' and 'u' overlap");
  refused(raw_file(d, R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", eight),
          "bytes 0..4 of the data section, before tensor 't', belong to no tensor");
  refused(raw_file(d, t4 + "}", eight + "xyz"),
          "the tensors end at byte 8 of the data section, but it has 11 bytes");
  refused(raw_file(d, R"({"__metadata__":{"k":1},)" + t4.substr(1) + "}", eight),
          "\"__metadata__\" key 'k' is not a string");
  refused(d, "is a folder");
  refused(d / "missing.safetensors", "cannot be opened");
}

TEST_CASE("Reading a tensor that is not a float, or past its end, is one sentence") {
  TempDir dir;
  const fs::path p = raw_file(dir.path, R"({"i":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})",
                              std::string(8, '\0'));
  SafetensorsFile f(p.string());
  CHECK(f.tensors().at(0).dtype == "I64");
  CHECK_THROWS_WITH(f.read("i"), Catch::Contains("'i' is I64; only F32, BF16 and F16"));
  CHECK_THROWS_WITH(f.read("j"), Catch::Contains("has no tensor 'j'"));
  std::vector<float> two(2);
  CHECK_THROWS_WITH(f.read(f.tensors()[0], 0, two),
                    Catch::Contains("elements 0..2 were asked for"));
}

}  // namespace
}  // namespace zero
