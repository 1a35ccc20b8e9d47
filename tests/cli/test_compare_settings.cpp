// zero compare --compress's names (cli/compare_settings.hpp): every spelling of an encoding, a
// reduction dtype, qwZ and hpZ reads as what it names, in any case; a name that is none, or one
// that names two of a kind, is one sentence naming the item.
#include <catch2/catch.hpp>

#include <string>

#include "cli/compare_settings.hpp"

using namespace zero;
using namespace zero::cli;
using Catch::Matchers::Contains;

namespace {

WireSetting one(const std::string& name) {
  const std::vector<WireSetting> s = parse_wire_settings(name);
  REQUIRE(s.size() == 1);
  CHECK(s[0].name == name);
  return s[0];
}

std::string refusal(const std::string& list) {
  try {
    parse_wire_settings(list);
  } catch (const Error& e) {
    return e.what();
  }
  return "accepted";
}

}  // namespace

TEST_CASE("dense and the reduction dtypes, by their flag names and bench's dense- names") {
  const WireSetting dense = one("dense");
  CHECK_FALSE(dense.reduce);
  CHECK(dense.gradients == GradCompression::none);
  CHECK_FALSE(dense.compresses());
  for (const auto& [name, dtype] : {std::pair{"fp32", DType::f32}, {"dense-fp32", DType::f32},
                                    {"bf16", DType::bf16}, {"dense-bf16", DType::bf16},
                                    {"fp16", DType::f16}, {"DENSE-FP16", DType::f16}}) {
    const WireSetting s = one(name);
    CHECK(s.reduce == dtype);
    CHECK_FALSE(s.compresses());
  }
}

TEST_CASE("the gradient encodings, by their flag names and bench's qgZ- names; qgZ alone is int4") {
  for (const auto& [name, g] :
       {std::pair{"int8", GradCompression::int8}, {"qgZ-int8", GradCompression::int8},
        {"int4", GradCompression::int4}, {"qgZ-int4", GradCompression::int4},
        {"qgZ", GradCompression::int4}, {"INT8", GradCompression::int8},
        {"topk", GradCompression::topk}}) {
    const WireSetting s = one(name);
    CHECK(s.gradients == g);
    CHECK_FALSE(s.reduce);
    CHECK_FALSE(s.weights_int8);
  }
}

TEST_CASE("TopK's ratio and error feedback, after colons or as a percentage") {
  WireSetting s = one("topk:0.05:noef");
  CHECK(s.topk_ratio == 0.05);
  CHECK(s.error_feedback == false);
  s = one("topk-1%-ef");
  CHECK(s.topk_ratio == 0.01);
  CHECK(s.error_feedback == true);
  s = one("topk:noef");
  CHECK_FALSE(s.topk_ratio);
  CHECK(s.error_feedback == false);
}

TEST_CASE("qwZ, hpZ and settings joined by +") {
  CHECK(one("qwZ").weights_int8);
  CHECK(one("qwZ-int8").weights_int8);
  CHECK(one("hpZ").hpz == kDefaultHpz);
  CHECK(one("hpZ:4").hpz == 4);
  const WireSetting s = one("qwZ+qgZ+hpZ");
  CHECK(s.weights_int8);
  CHECK(s.gradients == GradCompression::int4);
  CHECK(s.hpz == kDefaultHpz);
  const WireSetting t = one("bf16+int8");
  CHECK(t.reduce == DType::bf16);
  CHECK(t.gradients == GradCompression::int8);
}

TEST_CASE("a name that is none is one sentence naming the item and the grammar") {
  for (const char* name : {"none", "int3", "qgZ-none", "qgZ-topk", "qgZ-fp32", "qwZ-none",
                           "qwZ-int4", "dense-int8", "dense-dense", "fp64", "qgz-qgz-int8",
                           "topkk", "hpZ-2"}) {
    CAPTURE(name);
    const std::string why = refusal(name);
    CHECK_THAT(why, Contains(std::string("--compress: '") + name + "'"));
    if (std::string(name) != "hpZ-2")
      CHECK_THAT(why, Contains("is not a setting: give dense, fp32, bf16, int8, int4, qgZ, "
                               "topk[:RATIO[:ef|:noef]] (or topk-P%[-ef|-noef]), qwZ or hpZ[:H], "
                               "joined by + (qwZ+qgZ+hpZ), comma-separated"));
  }
  CHECK_THAT(refusal("hpZ-2"), Contains("needs hpZ's group size as a whole number of ranks"));
}

TEST_CASE("two of a kind in one setting are refused, naming the item") {
  CHECK_THAT(refusal("int8+qgZ-int4"), Contains("'int8+qgZ-int4' names two gradient encodings"));
  CHECK_THAT(refusal("int8+topk"), Contains("names two gradient encodings; a setting has one"));
  CHECK_THAT(refusal("fp32+dense-bf16"), Contains("'fp32+dense-bf16' names two reduction dtypes"));
  CHECK_THAT(refusal("int8,INT8"), Contains("'INT8' is listed twice"));
  CHECK_THAT(refusal("int8+"), Contains("'int8+' has an empty part between its +"));
  CHECK_THAT(refusal("dense,,int8"), Contains("--compress: an empty setting in 'dense,,int8'"));
  CHECK_THAT(refusal("topk:1.5"), Contains("needs a TopK ratio in (0, 1]"));
  CHECK_THAT(refusal("int8:0.1"), Contains("is not a setting"));
}
