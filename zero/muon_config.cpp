// Muon's optimizer params in the config (zero/muon_config.hpp).
#include "zero/muon_config.hpp"

#include <string>

namespace zero {

namespace json = boost::json;
using detail::fail_expected;
using detail::Num;

void read_muon_params(const detail::ObjectReader& p, OptimizerConfig& o) {
  p.number("muon_lr", o.muon_lr, Num::nonneg_float);
  p.number("momentum", o.momentum, Num::unit_open);
  p.flag("nesterov", o.nesterov);
  if (const json::value* f = p.get("adjust_lr_fn")) {
    const std::string path = p.path_of("adjust_lr_fn");
    constexpr std::string_view what = "\"original\" or \"match_rms_adamw\"";
    if (!f->is_string() || (f->get_string() != "original" && f->get_string() != "match_rms_adamw"))
      fail_expected(path, what, *f);
    o.match_rms_adamw = f->get_string() == "match_rms_adamw";
  }
  if (const json::value* g = p.get("muon_params")) {
    const std::string path = p.path_of("muon_params");
    constexpr std::string_view what = "an array of parameter-name globs";
    if (!g->is_array()) fail_expected(path, what, *g);
    o.muon_params.clear();
    for (const json::value& x : g->get_array()) {
      if (!x.is_string() || x.get_string().empty()) fail_expected(path, what, *g);
      o.muon_params.emplace_back(x.get_string());
    }
  }
}

void write_muon_params(const OptimizerConfig& o, json::object& op) {
  op["muon_lr"] = o.muon_lr;
  op["momentum"] = o.momentum;
  op["nesterov"] = o.nesterov;
  op["adjust_lr_fn"] = o.match_rms_adamw ? "match_rms_adamw" : "original";
  if (!o.muon_params.empty()) {
    json::array globs;
    for (const std::string& g : o.muon_params) globs.emplace_back(g);
    op["muon_params"] = std::move(globs);
  }
}

}  // namespace zero
