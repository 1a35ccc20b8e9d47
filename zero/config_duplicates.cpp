// Duplicate keys in JSON a user gives (zero/json_reader.hpp): Boost.JSON keeps the last of two
// equal keys without a word, so this scan of the already-validated text finds them, with the
// key's path and the line and column of both.
#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "zero/json_reader.hpp"

namespace zero::detail {
namespace {

// An object or array open at the scan's position.
struct Frame {
  bool object = false;
  std::string path;                          // of this object or array ("" at top level)
  std::map<std::string, std::size_t> first;  // object: each key, at the offset of its quote
  std::string key;                           // object: the last key read
  bool expect_key = true;                    // object: the next string is a key
  std::int64_t index = 0;                    // array: the element being read
};

std::string place(std::string_view text, std::size_t at) {
  const std::string_view before = text.substr(0, at);
  const auto line = std::count(before.begin(), before.end(), '\n') + 1;
  const auto column = at - (before.rfind('\n') + 1) + 1;  // npos + 1 == 0
  return cat("line ", line, ", column ", column);
}

// The offset just past the string whose opening quote is at `i`.
std::size_t string_end(std::string_view text, std::size_t i) {
  for (++i; i < text.size(); ++i) {
    if (text[i] == '\\')
      ++i;
    else if (text[i] == '"')
      return i + 1;
  }
  return text.size();
}

// The offset just past the comment that starts at `i` ("//" to the line's end, or "/* */").
std::size_t comment_end(std::string_view text, std::size_t i) {
  if (text[i + 1] == '/') return std::min(text.size(), text.find('\n', i));
  const std::size_t end = text.find("*/", i + 2);
  return end == std::string_view::npos ? text.size() : end + 2;
}

// The path of the value being read in `f`: "zero_optimization.stage", "param_groups[1]".
std::string child_path(const Frame& f) {
  if (f.object) return f.path.empty() ? f.key : cat(f.path, '.', f.key);
  return cat(f.path, '[', f.index, ']');
}

// The key a string token stands for, its escapes decoded ("st\u0061ge" is "stage").
std::string key_of(std::string_view token) {
  json::error_code ec;
  const json::value v = json::parse(token, ec);
  if (ec || !v.is_string()) return std::string(token);
  return std::string(v.get_string());
}

}  // namespace

void refuse_duplicate_keys(std::string_view text, std::string_view source, std::string_view why) {
  std::vector<Frame> open;
  for (std::size_t i = 0; i < text.size();) {
    const char ch = text[i];
    if (ch == '"') {
      const std::size_t end = string_end(text, i);
      if (!open.empty() && open.back().object && open.back().expect_key) {
        Frame& f = open.back();
        f.key = key_of(text.substr(i, end - i));
        f.expect_key = false;
        if (const auto [it, fresh] = f.first.emplace(f.key, i); !fresh)
          throw Error(cat("key '", child_path(f), "' appears twice (at ", place(text, it->second),
                          " and ", place(text, i), "); ", why),
                      at_key(std::string(source)));
      }
      i = end;
      continue;
    }
    if (ch == '/' && i + 1 < text.size() && (text[i + 1] == '/' || text[i + 1] == '*')) {
      i = comment_end(text, i);
      continue;
    }
    if (ch == '{' || ch == '[') {
      Frame f;
      f.object = ch == '{';
      f.path = open.empty() ? std::string() : child_path(open.back());
      open.push_back(std::move(f));
    } else if ((ch == '}' || ch == ']') && !open.empty()) {
      open.pop_back();
    } else if (ch == ',' && !open.empty()) {
      if (open.back().object)
        open.back().expect_key = true;
      else
        ++open.back().index;
    }
    ++i;
  }
}

}  // namespace zero::detail
