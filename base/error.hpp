// zero::Error: the one exception type of the project. It carries what failed and where
// (rank, unit, config key), so that every layer reports a sentence a user can act on.
// Header-only and dependency-free so that every layer, precision/ and comm/ included, may use it.
#pragma once

#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace zero {

class Error : public std::runtime_error {
 public:
  // Where the failure happened; every field is optional.
  struct Where {
    std::optional<int> rank;
    std::optional<int> unit;
    std::string key;  // config path such as "zero_optimization.stage", or a file name
  };

  explicit Error(const std::string& what, Where where = {})
      : std::runtime_error(compose(what, where)), where_(std::move(where)) {}

  const Where& where() const noexcept { return where_; }

 private:
  static std::string compose(const std::string& what, const Where& w) {
    std::ostringstream s;
    if (w.rank) s << "rank " << *w.rank << ": ";
    if (w.unit) s << "unit " << *w.unit << ": ";
    if (!w.key.empty()) s << w.key << ": ";
    s << what;
    return s.str();
  }
  Where where_;
};

// Builds a message from streamable parts: throw Error(cat("expected ", n, ", got ", m)).
template <class... Parts>
std::string cat(const Parts&... parts) {
  std::ostringstream s;
  (s << ... << parts);
  return s.str();
}

}  // namespace zero
