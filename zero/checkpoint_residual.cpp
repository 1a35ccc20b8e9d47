// TopK's residual in a checkpoint (zero/checkpoint_residual.hpp).
#include "zero/checkpoint_residual.hpp"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "base/error.hpp"
#include "zero/ledger.hpp"

namespace zero::checkpoint_detail {

namespace {

std::string file_of(const EngineState& s, const std::string& folder) {
  return (std::filesystem::path(folder) / cat("residual_rank_", s.rank(), ".bin")).string();
}

}  // namespace

std::string save_residual(EngineState& s, const std::string& folder) {
  const Allocation* r = s.residual();
  if (!r) return "";
  const std::string path = file_of(s, folder);
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(static_cast<const char*>(r->data()), static_cast<std::streamsize>(r->bytes()));
  f.flush();
  if (!f) return cat("cannot write the TopK residual to ", path, ": ", std::strerror(errno));
  return "";
}

std::vector<float> read_residual(EngineState& s, const std::string& folder) {
  const Allocation* r = s.residual();
  if (!r) return {};
  std::vector<float> v(r->bytes() / 4, 0.0f);
  const std::string path = file_of(s, folder);
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    s.log(cat("checkpoint ", folder, " holds no TopK residual for rank ", s.rank(),
              " (saved without error feedback): the residual starts at zero"));
    return v;
  }
  const auto size = std::filesystem::file_size(path, ec);
  if (ec || size != r->bytes())
    throw Error(cat(path, " holds ", ec ? 0 : size, " bytes of TopK residual where this run keeps ",
                    r->bytes(),
                    ": it was saved at another rank count or model; resume with the "
                    "same ones, or turn compression.error_feedback off"));
  std::ifstream f(path, std::ios::binary);
  f.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(r->bytes()));
  if (!f) throw Error(cat("cannot read the TopK residual ", path, ": ", std::strerror(errno)));
  return v;
}

void restore_residual(EngineState& s, const std::vector<float>& values) {
  Allocation* r = s.residual();
  if (r && !values.empty()) std::memcpy(r->data(), values.data(), r->bytes());
}

}  // namespace zero::checkpoint_detail
