// Reading JSON objects with the error messages a user can act on: each value is read through an
// ObjectReader that knows its path ("zero_optimization.stage"), refuses unknown keys naming the
// nearest known one, warns about keys accepted without effect, and says what was expected and
// what was found ("expected 0..3, got 4"). Header-only, used by config.cpp; meant as well for
// any other JSON zero reads (checkpoint manifests).
#pragma once

#include <algorithm>
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

#include "zero/error.hpp"

namespace zero::detail {
namespace json = boost::json;

// Error::Where naming a config path (designated initializers would warn about the other fields).
inline Error::Where at_key(std::string key) {
  Error::Where w;
  w.key = std::move(key);
  return w;
}

inline constexpr std::int64_t kMaxInt = std::numeric_limits<std::int64_t>::max();

// A DeepSpeed key zero accepts without acting on it; `why` says what zero does instead.
struct Inert {
  std::string_view key;
  std::string_view why = {};
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

[[noreturn]] inline void fail(const std::string& path, const std::string& what) {
  throw Error(what, at_key(path));
}

// "expected <what>, got <value>", or, for DeepSpeed's Hugging Face "auto" placeholder, a
// sentence saying to write the value out: zero reads the file as it is, nothing fills it in.
[[noreturn]] inline void fail_expected(const std::string& path, std::string_view what,
                                       const json::value& got) {
  if (got.is_string() && got.get_string() == "auto")
    fail(path, cat("\"auto\" is a placeholder that only the Hugging Face Trainer integration "
                   "fills in; replace it with ",
                   what));
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
  const bool is_auto = v.is_string() && v.get_string() == "auto";
  fail_expected(path, v.is_number() || is_auto ? what : "an integer", v);
}

// The allowed range of a number, and the phrase that names it in errors.
enum class Num { nonneg, positive, unit_open, unit_closed };

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

// One JSON object of the configuration, at `path` ("" for the top level).
class ObjectReader {
 public:
  ObjectReader(const json::value& v, std::string path, std::span<const std::string_view> ours,
               std::span<const Inert> inert, std::vector<std::string>& warnings,
               std::string_view context = {})
      : path_(std::move(path)), warnings_(warnings) {
    if (!v.is_object()) fail_expected(path_, "an object", v);
    obj_ = &v.get_object();
    std::vector<std::string_view> known(ours.begin(), ours.end());
    for (const auto& i : inert) known.push_back(i.key);
    for (const auto& [key, value] : *obj_) {
      auto it = std::find_if(inert.begin(), inert.end(), [&](auto& i) { return i.key == key; });
      if (it != inert.end()) {
        warnings_.push_back(cat(path_of(key), " is accepted for compatibility and has no effect",
                                it->why.empty() ? "" : ": ", it->why));
      } else if (std::find(known.begin(), known.end(), key) == known.end()) {
        unknown(key, known, context);
      }
    }
  }
  ObjectReader(const json::value& v, std::string path, std::initializer_list<std::string_view> ours,
               std::span<const Inert> inert, std::vector<std::string>& warnings)
      : ObjectReader(v, std::move(path), std::span(ours.begin(), ours.size()), inert, warnings) {}

  const std::string& path() const { return path_; }
  std::string path_of(std::string_view key) const {
    return path_.empty() ? std::string(key) : cat(path_, '.', key);
  }
  std::vector<std::string>& warnings() const { return warnings_; }

  // The value of `key`, or nullptr when absent; null counts as absent (DeepSpeed's None).
  const json::value* get(std::string_view key) const {
    auto it = obj_->find(key);
    return it == obj_->end() || it->value().is_null() ? nullptr : &it->value();
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

  // A string naming one of `names` (exactly, or ignoring case when DeepSpeed does).
  template <class E>
  bool choice(std::string_view key, E& out,
              std::initializer_list<std::pair<std::string_view, E>> names,
              bool ignore_case = false) const {
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

  // A key DeepSpeed has whose true value zero cannot honour: refuse it rather than train
  // differently from what the file says.
  void refuse_true(std::string_view key, std::string_view why) const {
    bool on = false;
    if (flag(key, on) && on) fail(path_of(key), cat("true is not supported: ", why));
  }

 private:
  [[noreturn]] void unknown(std::string_view key, const std::vector<std::string_view>& known,
                            std::string_view context) const {
    std::string where = path_.empty() ? "at top level" : cat("in ", path_, context);
    std::string_view best = nearest(key, known);
    if (!best.empty())
      throw Error(cat("unknown key '", key, "' ", where, "; did you mean '", best, "'?"));
    std::string list;
    for (auto k : known) list += cat(list.empty() ? "" : ", ", k);
    throw Error(cat("unknown key '", key, "' ", where,
                    known.size() <= 12 ? cat("; expected one of: ", list)
                                       : std::string("; docs/config.md lists the known keys")));
  }

  std::string path_;
  const json::object* obj_ = nullptr;
  std::vector<std::string>& warnings_;
};

}  // namespace zero::detail
