// Reading JSON objects with the error messages a user can act on: each value is read through an
// ObjectReader that knows its path ("zero_optimization.stage"), refuses a misspelt key naming the
// nearest known one, ignores (with one warning) or refuses other unknown keys as DeepSpeed does
// in that object, warns about keys accepted without effect unless they are set to their off
// value, sets Hugging Face "auto" placeholders aside, and says what was expected and what was
// found ("expected 0..3, got 4"). Header-only, used by config_read.cpp; meant as well for any
// other JSON zero reads (checkpoint manifests).
#pragma once

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/json.hpp>

#include "base/error.hpp"

namespace zero::detail {
namespace json = boost::json;

// Error::Where naming a config path (designated initializers would warn about the other fields).
inline Error::Where at_key(std::string key) {
  Error::Where w;
  w.key = std::move(key);
  return w;
}

inline constexpr std::int64_t kMaxInt = std::numeric_limits<std::int64_t>::max();

// A DeepSpeed key zero accepts without acting on it; `why` says what zero does instead. `off` is
// the value at which DeepSpeed behaves as zero does, so that setting it needs no warning: a JSON
// literal ("false", "1e9"), "*" for any value (the key cannot change what zero would do), or
// empty (always warn). An object whose "enabled" is false is off as well.
struct Inert {
  std::string_view key;
  std::string_view why = {};
  std::string_view off = {};
};

// What reading one configuration collects besides the values: warnings, the "auto" placeholders
// (fillable or not), and the features the text asks for that zero lacks. parse_config raises the
// last two as one error each once everything is read, so that a user sees every key at once.
struct ParseLog {
  std::vector<std::string>& warnings;
  std::vector<std::string>& auto_keys;            // fillable "auto" paths, in text order
  std::span<const std::string_view> fillable;     // the paths that may be "auto"
  std::vector<std::string> unfillable_auto = {};  // "auto" where nothing can fill it
  std::vector<std::string> lacking = {};          // "the Lamb optimizer (optimizer.type)"
  void lacks(const std::string& path, std::string_view what) {
    lacking.push_back(cat(what, " (", path, ")"));
  }
};

// What an object does with an unknown key that is not a likely misspelling of a known one.
enum class Unknown {
  refuse,  // an error listing the known keys (DeepSpeed's pydantic blocks, constructor kwargs)
  ignore   // one warning naming them all (DeepSpeed reads these objects with dict.get)
};

// Shortest text that reads back as the same double; JSON has no inf or nan, callers check.
inline std::string format_number(double d) {
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof buf, d);
  return std::string(buf, r.ptr);
}

// One line, for error messages ("got [0.9, 1]").
inline std::string describe(const json::value& v) {
  switch (v.kind()) {
    case json::kind::null:
      return "null";
    case json::kind::bool_:
      return v.get_bool() ? "true" : "false";
    case json::kind::int64:
      return std::to_string(v.get_int64());
    case json::kind::uint64:
      return std::to_string(v.get_uint64());
    case json::kind::double_:
      return format_number(v.get_double());
    case json::kind::string:
      return cat("string \"", std::string_view(v.get_string()), '"');
    case json::kind::object:
      return "an object";
    case json::kind::array: {
      std::string s = "[";
      for (const auto& e : v.get_array()) s += (s.size() > 1 ? ", " : "") + describe(e);
      return s + "]";
    }
  }
  return "?";
}

// Throws zero::Error (naming `source`) when an object in `text` holds a key twice, with the
// key's path, the line and column of both, and `why` (what the reader of that file does with
// them): Boost.JSON would keep the last one silently. `text` must already parse (comments are
// skipped). In config_duplicates.cpp.
void refuse_duplicate_keys(std::string_view text, std::string_view source, std::string_view why);

[[noreturn]] inline void fail(const std::string& path, const std::string& what) {
  throw Error(what, at_key(path));
}

inline bool is_auto(const json::value& v) {
  return v.is_string() && v.get_string() == "auto";
}

// "expected <what>, got <value>", or, for a Hugging Face "auto" placeholder where none can be
// filled (inside an array, say), a sentence asking for the value.
[[noreturn]] inline void fail_expected(const std::string& path, std::string_view what,
                                       const json::value& got) {
  if (is_auto(got)) fail(path, cat("\"auto\" cannot be filled in here; replace it with ", what));
  fail(path, cat("expected ", what, ", got ", describe(got)));
}

inline bool to_bool(const json::value& v, const std::string& path) {
  if (!v.is_bool()) fail_expected(path, "true or false", v);
  return v.get_bool();
}

// Any JSON number; 1e999 parses as infinity, which no field accepts.
inline double to_number(const json::value& v, const std::string& path, std::string_view what) {
  if (!v.is_number()) fail_expected(path, what, v);
  double d = v.to_number<double>();
  if (!std::isfinite(d)) fail_expected(path, what, v);
  return d;
}

// Integers may be written as doubles (5e8, as DeepSpeed configs often do) when integral.
inline std::int64_t to_integer(const json::value& v, const std::string& path,
                               std::string_view what) {
  if (v.is_int64()) return v.get_int64();
  if (v.is_uint64() && v.get_uint64() <= static_cast<std::uint64_t>(kMaxInt))
    return static_cast<std::int64_t>(v.get_uint64());
  if (v.is_double()) {
    double d = v.get_double();
    if (std::isfinite(d) && std::trunc(d) == d && std::abs(d) < 9.2e18)
      return static_cast<std::int64_t>(d);
    if (std::isfinite(d) && std::trunc(d) != d) fail_expected(path, "an integer", v);
  }
  fail_expected(path, v.is_number() || is_auto(v) ? what : "an integer", v);
}

// The allowed range of a number, and the phrase that names it in errors.
// The *_float ones are for values the kernels use as float: a positive one must be a normal float
// (1e-46 would become 0, 1e39 infinity).
enum class Num {
  nonneg,
  positive,
  unit_open,
  unit_closed,
  nonneg_float,
  positive_float,
  zero_or_positive_float
};

inline std::string_view phrase(Num r) {
  switch (r) {
    case Num::nonneg:
      return "a number >= 0";
    case Num::positive:
      return "a number > 0";
    case Num::unit_open:
      return "a number in [0, 1)";
    case Num::unit_closed:
      return "a number in [0, 1]";
    case Num::nonneg_float:
      return "a number in [0, 3.4e38]";
    case Num::positive_float:
      return "a number in [1.2e-38, 3.4e38] (a normal float)";
    case Num::zero_or_positive_float:
      return "0 or a number in [1.2e-38, 3.4e38] (a normal float)";
  }
  return "";
}

inline bool in_range(double d, Num r) {
  switch (r) {
    case Num::nonneg:
      return d >= 0;
    case Num::positive:
      return d > 0;
    case Num::unit_open:
      return d >= 0 && d < 1;
    case Num::unit_closed:
      return d >= 0 && d <= 1;
    case Num::nonneg_float:
      return d >= 0 && d <= std::numeric_limits<float>::max();
    case Num::positive_float:
      return d >= std::numeric_limits<float>::min() && d <= std::numeric_limits<float>::max();
    case Num::zero_or_positive_float:
      return d == 0 || in_range(d, Num::positive_float);
  }
  return false;
}

inline std::string integer_phrase(std::int64_t lo, std::int64_t hi) {
  if (hi != kMaxInt) return cat(lo, "..", hi);
  if (lo == 1) return "a positive integer";
  return cat("an integer >= ", lo);
}

inline bool iequals(std::string_view a, std::string_view b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](char x, char y) {
    return std::tolower(static_cast<unsigned char>(x)) ==
           std::tolower(static_cast<unsigned char>(y));
  });
}

// Levenshtein distance, ignoring case.
inline std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t up = row[j];
      bool same = std::tolower(static_cast<unsigned char>(a[i - 1])) ==
                  std::tolower(static_cast<unsigned char>(b[j - 1]));
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (same ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// The known key a misspelling most likely meant: a few edits away, or containing it whole
// ("prefetch_bucket_size" for "stage3_prefetch_bucket_size").
inline std::string_view nearest(std::string_view key, const std::vector<std::string_view>& known) {
  std::string_view best;
  std::size_t best_d = std::max<std::size_t>(2, key.size() / 3) + 1;
  for (auto k : known) {
    std::size_t d = edit_distance(key, k);
    if (key.size() >= 4 && k.find(key) != std::string_view::npos) d = std::min<std::size_t>(d, 2);
    if (d < best_d) best = k, best_d = d;
  }
  return best;
}

// Whether `v` is the value at which inert key `i` changes nothing (see Inert::off).
inline bool is_off(const Inert& i, const json::value& v) {
  if (i.off == "*") return true;
  if (v.is_object()) {
    const auto* e = v.get_object().if_contains("enabled");
    return e && e->is_bool() && !e->get_bool();
  }
  if (i.off.empty()) return false;
  if (v.is_bool()) return i.off == (v.get_bool() ? "true" : "false");
  if (v.is_number()) {
    double want = 0;
    auto r = std::from_chars(i.off.data(), i.off.data() + i.off.size(), want);
    return r.ec == std::errc() && v.to_number<double>() == want;
  }
  return false;
}

// One JSON object of the configuration, at `path` ("" for the top level).
class ObjectReader {
 public:
  ObjectReader(const json::value& v, std::string path, std::span<const std::string_view> ours,
               std::span<const Inert> inert, ParseLog& log, Unknown policy = Unknown::refuse,
               std::string_view context = {})
      : path_(std::move(path)), log_(log) {
    if (!v.is_object()) fail_expected(path_, "an object", v);
    obj_ = &v.get_object();
    std::vector<std::string_view> known(ours.begin(), ours.end());
    for (const auto& i : inert) known.push_back(i.key);
    std::vector<std::string_view> ignored;
    for (const auto& kv : *obj_) {
      // Not a structured binding: clang before 16 cannot capture one in the lambda.
      const std::string_view key = kv.key();
      const json::value& value = kv.value();
      auto it = std::find_if(inert.begin(), inert.end(), [&](auto& i) { return i.key == key; });
      if (it != inert.end()) {
        if (!is_off(*it, value))
          log_.warnings.push_back(cat(path_of(key),
                                      " is accepted for compatibility and has no effect",
                                      it->why.empty() ? "" : ": ", it->why));
      } else if (std::find(known.begin(), known.end(), key) == known.end()) {
        if (policy == Unknown::refuse || !nearest(key, known).empty()) unknown(key, known, context);
        ignored.push_back(key);
      } else if (is_auto(value)) {
        // Set aside: the field keeps its default until the caller fills it (or it is an error).
        const std::string p = path_of(key);
        const bool ok =
            std::find(log_.fillable.begin(), log_.fillable.end(), p) != log_.fillable.end();
        (ok ? log_.auto_keys : log_.unfillable_auto).push_back(p);
        autos_.push_back(key);
      }
    }
    if (!ignored.empty()) {
      std::string list;
      for (auto k : ignored) list += cat(list.empty() ? "'" : ", '", k, "'");
      log_.warnings.push_back(cat(ignored.size() == 1 ? "unknown key " : "unknown keys ", list, " ",
                                  where(context), " ", ignored.size() == 1 ? "is" : "are",
                                  " ignored, as DeepSpeed ignores ",
                                  ignored.size() == 1 ? "it" : "them"));
    }
  }
  ObjectReader(const json::value& v, std::string path, std::initializer_list<std::string_view> ours,
               std::span<const Inert> inert, ParseLog& log, Unknown policy = Unknown::refuse)
      : ObjectReader(v, std::move(path), std::span(ours.begin(), ours.size()), inert, log, policy) {
  }

  const std::string& path() const { return path_; }
  std::string path_of(std::string_view key) const {
    return path_.empty() ? std::string(key) : cat(path_, '.', key);
  }
  std::vector<std::string>& warnings() const { return log_.warnings; }
  ParseLog& log() const { return log_; }

  // The value of `key`, or nullptr when absent; null counts as absent (DeepSpeed's None), and so
  // does "auto" (set aside by the constructor).
  const json::value* get(std::string_view key) const {
    auto it = obj_->find(key);
    if (it == obj_->end() || it->value().is_null() || is_auto_key(key)) return nullptr;
    return &it->value();
  }
  bool is_auto_key(std::string_view key) const {
    return std::find(autos_.begin(), autos_.end(), key) != autos_.end();
  }
  bool has(std::string_view key) const { return get(key) != nullptr; }

  // Each reader leaves `out` alone when the key is absent and says whether it was present.
  bool flag(std::string_view key, bool& out) const {
    const json::value* v = get(key);
    if (v) out = to_bool(*v, path_of(key));
    return v;
  }

  bool number(std::string_view key, double& out, Num range) const {
    const json::value* v = get(key);
    if (!v) return false;
    double d = to_number(*v, path_of(key), "a number");
    if (!in_range(d, range)) fail_expected(path_of(key), phrase(range), *v);
    out = d;
    return true;
  }

  template <class Int>
  bool integer(std::string_view key, Int& out, std::int64_t lo, std::int64_t hi = kMaxInt) const {
    const json::value* v = get(key);
    if (!v) return false;
    std::string what = integer_phrase(lo, hi);
    std::int64_t i = to_integer(*v, path_of(key), what);
    if (i < lo || i > hi) fail_expected(path_of(key), what, *v);
    out = static_cast<Int>(i);
    return true;
  }

  // A string naming one of `names` (exactly, or ignoring case when DeepSpeed does): listed here,
  // or a table the enum's name_of and parse_ read too.
  template <class E>
  bool choice(std::string_view key, E& out,
              std::initializer_list<std::pair<std::string_view, E>> names,
              bool ignore_case = false) const {
    return choose(key, out,
                  std::span<const std::pair<std::string_view, E>>(names.begin(), names.size()),
                  ignore_case);
  }
  template <class E, std::size_t N>
  bool choice(std::string_view key, E& out,
              const std::array<std::pair<std::string_view, E>, N>& names,
              bool ignore_case = false) const {
    return choose(key, out, std::span<const std::pair<std::string_view, E>>(names), ignore_case);
  }

  // A key DeepSpeed has whose true value zero cannot honour: refuse it rather than train
  // differently from what the file says.
  void refuse_true(std::string_view key, std::string_view why) const {
    bool on = false;
    if (flag(key, on) && on) fail(path_of(key), cat("true is not supported: ", why));
  }

 private:
  template <class E>
  bool choose(std::string_view key, E& out, std::span<const std::pair<std::string_view, E>> names,
              bool ignore_case) const {
    const json::value* v = get(key);
    if (!v) return false;
    std::string what;
    std::size_t i = 0;
    for (const auto& [name, e] : names) {
      what += i == 0 ? "" : i + 1 == names.size() ? " or " : ", ";
      what += cat('"', name, '"');
      ++i;
    }
    if (!v->is_string()) fail_expected(path_of(key), what, *v);
    std::string_view s = v->get_string();
    for (const auto& [name, e] : names) {
      if (s == name || (ignore_case && iequals(s, name))) {
        out = e;
        return true;
      }
    }
    fail_expected(path_of(key), what, *v);
  }
  std::string where(std::string_view context) const {
    return path_.empty() ? "at top level" : cat("in ", path_, context);
  }

  [[noreturn]] void unknown(std::string_view key, const std::vector<std::string_view>& known,
                            std::string_view context) const {
    std::string_view best = nearest(key, known);
    if (!best.empty())
      throw Error(cat("unknown key '", key, "' ", where(context), "; did you mean '", best, "'?"));
    std::string list;
    for (auto k : known) list += cat(list.empty() ? "" : ", ", k);
    throw Error(cat("unknown key '", key, "' ", where(context),
                    known.size() <= 12 ? cat("; expected one of: ", list)
                                       : std::string("; docs/config.md lists the known keys")));
  }

  std::string path_;
  const json::object* obj_ = nullptr;
  ParseLog& log_;
  std::vector<std::string_view> autos_;  // our keys whose value is "auto"
};

}  // namespace zero::detail
