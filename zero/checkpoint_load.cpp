// Loading a checkpoint into an engine, at any rank count and stage (zero/checkpoint.hpp): every
// rank reads and checks its part into host staging, the ranks agree, and only then is anything
// stored, so a failure leaves the engine as it was.
#include <algorithm>
#include <boost/json.hpp>
#include <cmath>
#include <filesystem>
#include <map>

#include "zero/checkpoint_impl.hpp"
#include "zero/checkpoint_residual.hpp"

namespace zero {
namespace fs = std::filesystem;
using checkpoint_detail::agree;
using checkpoint_detail::require_between_steps;

namespace {

// The model's params against the checkpoint's: the first mismatch as a sentence, or "".
std::string compare_params(const std::vector<ParamSpec>& params, const CheckpointMeta& m,
                           const std::string& where, std::vector<int>& index_of) {
  std::map<std::string, int> by_name;
  for (std::size_t i = 0; i < m.params.size(); ++i) by_name[m.params[i].name] = static_cast<int>(i);
  index_of.assign(params.size(), -1);
  std::vector<std::string> missing, extra;
  for (std::size_t p = 0; p < params.size(); ++p) {
    const ParamSpec& pl = params[p];
    const auto it = by_name.find(pl.name);
    if (it == by_name.end()) {
      missing.push_back(pl.name);
      continue;
    }
    const CheckpointParam& cp = m.params[static_cast<std::size_t>(it->second)];
    std::int64_t numel = 1;
    for (std::int64_t d : pl.shape) numel *= d;
    if (cp.shape != pl.shape && cp.numel != numel)
      return cat(where, ": param '", pl.name, "' has shape ", shape_text(cp.shape),
                 " in the checkpoint but ", shape_text(pl.shape), " in the model");
    if (cp.shape != pl.shape)
      return cat(where, ": param '", pl.name, "' has shape ", shape_text(cp.shape),
                 " in the checkpoint but ", shape_text(pl.shape),
                 " in the model (the same elements, another shape)");
    index_of[p] = it->second;
    by_name.erase(it);
  }
  for (const auto& [name, i] : by_name) extra.push_back(name);
  auto list = [](const std::vector<std::string>& v) {
    std::string t;
    for (std::size_t i = 0; i < v.size() && i < 3; ++i) t += (i ? ", '" : "'") + v[i] + "'";
    return v.size() > 3 ? cat(t, " and ", v.size() - 3, " more") : t;
  };
  if (!missing.empty())
    return cat(where, ": the model's param", missing.size() > 1 ? "s " : " ", list(missing),
               missing.size() > 1 ? " are" : " is", " not in the checkpoint (it holds ",
               m.params.size(), " params of another model?)");
  if (!extra.empty())
    return cat(where, ": the checkpoint holds param", extra.size() > 1 ? "s " : " ", list(extra),
               " that the model does not have");
  return "";
}

// The state Adam resumes from: finite master weights and moments, and second moments >= 0 (a
// mean of squares; a negative one would make the update's square root NaN steps later). Throws
// zero::Error naming the param, the element within it and the value.
void check_values(std::span<const float> v, StateTensor t, const std::string& param,
                  std::int64_t begin, const std::string& where) {
  for (std::size_t j = 0; j < v.size(); ++j) {
    const float x = v[j];
    const bool finite = std::isfinite(x);
    if (finite && !(t == StateTensor::exp_avg_sq && x < 0)) continue;
    throw Error(cat(where, ": param '", param, "' holds ",
                    finite ? "a negative second moment" : "a value that is not finite", " (",
                    name_of(t), " ", x, ") at its element ", begin + static_cast<std::int64_t>(j),
                    "; the checkpoint is damaged: resume from another one"));
  }
}

// Whether the run that saved `m` trained with Muon (its config's optimizer type).
bool saved_by_muon(const CheckpointMeta& m) {
  try {
    const boost::json::value c = boost::json::parse(m.config);
    const boost::json::value* type = c.as_object().at("optimizer").as_object().if_contains("type");
    return type && type->is_string() && type->as_string() == name_of(OptimizerType::muon);
  } catch (const std::exception&) {
    return false;
  }
}

// Each param's state tensors against the checkpoint's (Muon keeps no exp_avg_sq for its
// matrices): the first mismatch as a sentence, or "".
std::string compare_tensors(const EngineState& s, const CheckpointMeta& m,
                            const std::vector<int>& index_of, const std::string& where) {
  if (m.tensors != s.tensors())
    return cat(where, ": holds ", m.tensors - 1, " optimizer state tensor",
               m.tensors == 2 ? "" : "s", " per parameter, and this run's ",
               name_of(s.config().optimizer.type), " keeps ", s.tensors() - 1,
               ": resume with the optimizer that saved it");
  for (std::size_t p = 0; p < index_of.size(); ++p) {
    const int mine = s.tensors(static_cast<int>(p)), theirs = m.tensors_of(index_of[p]);
    if (mine == theirs) continue;
    const std::string& name = s.layout().params[p].name;
    if (mine < theirs && saved_by_muon(m))
      return cat(where, ": param '", name, "' holds an exp_avg_sq beside Muon's momentum, as "
                 "checkpoints of an older zero's Muon did; this zero keeps none for Muon's "
                 "matrices and cannot resume it: resume with the zero that saved it, or start "
                 "from its weights (zero ckpt export, then zero train --init)");
    if (mine < theirs)
      return cat(where, ": param '", name, "' holds Adam's two moments, but this run updates it "
                 "with Muon (one momentum): resume with the optimizer that saved it");
    return cat(where, ": param '", name, "' holds Muon's momentum alone (no exp_avg_sq), but "
               "this run's ", name_of(s.config().optimizer.type), " keeps two moments for it: "
               "resume with the optimizer (and muon_params) that saved it");
  }
  return "";
}

std::vector<ParamSpec> specs_of(const Layout& layout) {
  std::vector<ParamSpec> out;
  for (const ParamLayout& p : layout.params) out.push_back({p.name, p.shape});
  return out;
}

}  // namespace

std::string checkpoint_mismatch(const CheckpointMeta& meta, const std::vector<UnitSpec>& units,
                                const std::string& where) {
  std::vector<ParamSpec> params;
  for (const UnitSpec& u : units) params.insert(params.end(), u.params.begin(), u.params.end());
  std::vector<int> index_of;
  return compare_params(params, meta, where, index_of);
}

LoadResult load_checkpoint(Engine& engine, const std::string& path) {
  EngineState s = CheckpointAccess::state(engine);
  require_between_steps(s, "load");
  LoadResult out;
  std::vector<float> state[kStateTensors];
  std::vector<float> residual;
  std::string error;
  try {
    out.path = find_checkpoint(path);
    out.meta = read_checkpoint_meta(out.path);
    std::vector<int> index_of;
    const std::string where = (fs::path(out.path) / kCheckpointMeta).string();
    error = compare_params(specs_of(s.layout()), out.meta, where, index_of);
    if (error.empty()) error = compare_tensors(s, out.meta, index_of, where);
    if (error.empty()) {
      for (int t = 0; t < s.tensors(); ++t)
        state[t].assign(static_cast<std::size_t>(s.elements(t)), 0.0f);
      CheckpointReader reader(out.path, out.meta);
      // Elements [begin, +count) of param, at unit_pos of its unit.
      auto read = [&](int param, std::int64_t begin, std::int64_t count, std::int64_t unit_pos) {
        const int u = s.layout().params[static_cast<std::size_t>(param)].unit;
        for (int t = 0; t < s.tensors(param); ++t) {
          const std::span<float> into = std::span(state[t]).subspan(
              static_cast<std::size_t>(s.index(t, u, unit_pos)), static_cast<std::size_t>(count));
          reader.read(index_of[static_cast<std::size_t>(param)], static_cast<StateTensor>(t), begin,
                      into);
          check_values(into, static_cast<StateTensor>(t),
                       s.layout().params[static_cast<std::size_t>(param)].name, begin, out.path);
        }
      };
      for (int u = 0; u < static_cast<int>(s.layout().units.size()); ++u) {
        const auto& U = s.layout().units[static_cast<std::size_t>(u)];
        if (s.sharded()) {
          for (const ShardPiece& p : s.layout().shard_pieces(u, s.shard_rank()))
            read(p.param, p.param_offset, p.count,
                 U.shard_range(s.shard_rank()).begin + p.shard_offset);
        } else {
          for (int p = U.first_param; p < U.first_param + U.param_count; ++p)
            read(p, 0, s.layout().params[static_cast<std::size_t>(p)].numel,
                 s.layout().params[static_cast<std::size_t>(p)].offset);
        }
      }
    }
    if (error.empty()) residual = checkpoint_detail::read_residual(s, out.path);
  } catch (const std::exception& e) {
    error = e.what();
  }
  // All ranks or none: nothing is stored until every rank has read and checked its part.
  const std::string agreed = agree(s, error);
  if (!agreed.empty()) throw Error(cat("cannot load checkpoint: ", agreed));

  for (int t = 0; t < s.tensors(); ++t)
    s.upload(t, state[t].data(), static_cast<std::int64_t>(state[t].size()));
  const CheckpointMeta& m = out.meta;
  s.restore({m.step, m.skipped_steps, m.consecutive_skipped});
  std::optional<LossScaler>& scaler = s.scaler();
  if (scaler && m.loss_scaler) {
    scaler->restore(*m.loss_scaler);
  } else if (scaler) {
    s.log(cat("checkpoint ", out.path, " was saved by a ", m.precision,
              " run: the fp16 loss scaler starts afresh at ", loss_scale_text(scaler->scale())));
  }
  checkpoint_detail::restore_residual(s, residual);
  s.params_from_master();
  out.step = m.step;
  out.trainer_state = m.trainer;
  return out;
}

}  // namespace zero
