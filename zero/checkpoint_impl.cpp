// What saving and loading share (zero/checkpoint_impl.hpp).
#include "zero/checkpoint_impl.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

namespace zero::checkpoint_detail {

std::string agree(EngineState& s, const std::string& mine, bool weak) {
  constexpr std::size_t kWords = 96;  // 767 bytes of message and a weak flag per rank
  std::int64_t buf[kWords] = {};
  auto* bytes = reinterpret_cast<char*>(buf);
  bytes[0] = mine.empty() ? 0 : weak ? 1 : 2;
  std::memcpy(bytes + 1, mine.data(), std::min(mine.size(), sizeof buf - 2));
  std::vector<std::int64_t> all(kWords * static_cast<std::size_t>(s.agreeing_ranks()));
  s.all_gather_host(buf, all.data(), kWords, DType::i64);
  for (const char level : {2, 1})
    for (int r = 0; r < s.agreeing_ranks(); ++r) {
      const char* b =
          reinterpret_cast<const char*>(all.data() + kWords * static_cast<std::size_t>(r));
      if (b[0] != level) continue;
      const std::string m(b + 1, strnlen(b + 1, sizeof buf - 1));
      return m.starts_with("rank ") ? m : cat("rank ", r, ": ", m);
    }
  return "";
}

void require_between_steps(const EngineState& s, const char* what) {
  if (s.counting()) throw Error(cat(what, ": a counting engine (count_only) holds no state"));
  if (!s.between_steps())
    throw Error(cat(what,
                    " between optimizer steps only: reduce_grads was called since the last "
                    "step(), so gradients are half accumulated"),
                {.rank = s.rank()});
}

}  // namespace zero::checkpoint_detail
