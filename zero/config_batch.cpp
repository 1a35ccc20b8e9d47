// DeepSpeed's batch rule and the other checks that need the world size (see config.hpp):
// train_batch_size = train_micro_batch_size_per_gpu x gradient_accumulation_steps x world.
#include <limits>

#include "zero/config.hpp"
#include "zero/settings.hpp"
#include "base/error.hpp"
#include "zero/json_reader.hpp"

namespace zero {
using detail::at_key;

namespace {

constexpr std::int64_t kMaxAccumulation = std::numeric_limits<int>::max();

// a * b, or nullopt when it does not fit in 64 bits.
std::optional<std::int64_t> times(std::int64_t a, std::int64_t b) {
  std::int64_t out = 0;
  if (__builtin_mul_overflow(a, b, &out)) return std::nullopt;
  return out;
}

}  // namespace

void Config::validate_world(int world) const {
  if (world < 1) throw Error(cat("the world size must be at least 1, got ", world));
  const std::int64_t micro = train_micro_batch_size_per_gpu, accum = gradient_accumulation_steps;
  if (train_batch_size) {
    const std::int64_t batch = *train_batch_size;
    std::int64_t per_rank = 0, total = 0;
    bool overflow = __builtin_mul_overflow(micro, accum, &per_rank) ||
                    __builtin_mul_overflow(per_rank, std::int64_t{world}, &total);
    if (overflow || total != batch) {
      // Say which value would fit this world size, as DeepSpeed would have derived it.
      std::string hint;
      if (batch % world != 0)
        hint = cat("; it must be a multiple of the world size ", world);
      else if ((batch / world) % accum == 0)
        hint = cat("; at this world size set train_micro_batch_size_per_gpu to ",
                   batch / world / accum);
      else if ((batch / world) % micro == 0)
        hint =
            cat("; at this world size set gradient_accumulation_steps to ", batch / world / micro);
      throw Error(cat(batch, " != train_micro_batch_size_per_gpu ", micro,
                      " * gradient_accumulation_steps ", accum, " * world size ", world,
                      overflow ? std::string(" (overflows)") : cat(" = ", total), hint),
                  at_key("train_batch_size"));
    }
  }
  check_groups(zero, world);
}

// DeepSpeed's _set_batch_related_parameters, with its floor divisions made exact (DeepSpeed's
// following assertion refuses an uneven split anyway, with less to go on) and, where it asserts
// that one of train_batch_size and train_micro_batch_size_per_gpu be given, zero's default of 1
// for a missing micro-batch size (docs/config.md).
void Config::resolve_batch(int world) {
  if (world < 1) throw Error(cat("the world size must be at least 1, got ", world));
  const std::int64_t W = world;
  std::int64_t& M = train_micro_batch_size_per_gpu;
  std::int64_t& A = gradient_accumulation_steps;
  if (M < 1)
    throw Error(cat("expected a positive integer, got ", M),
                at_key("train_micro_batch_size_per_gpu"));
  if (A < 1 || A > kMaxAccumulation)
    throw Error(cat("expected 1..", kMaxAccumulation, ", got ", A),
                at_key("gradient_accumulation_steps"));
  if (train_batch_size && *train_batch_size < 1)
    throw Error(cat("expected a positive integer, got ", *train_batch_size),
                at_key("train_batch_size"));

  if (train_batch_size && !(micro_batch_given && accumulation_given)) {
    const std::int64_t B = *train_batch_size;
    // The one (or two) missing values; when only train_batch_size is given, accumulation is 1.
    const bool derive_micro = !micro_batch_given;
    if (derive_micro && !accumulation_given) A = 1;
    const std::int64_t known = derive_micro ? A : M;
    const char* known_key =
        derive_micro ? "gradient_accumulation_steps" : "train_micro_batch_size_per_gpu";
    const char* derived_key =
        derive_micro ? "train_micro_batch_size_per_gpu" : "gradient_accumulation_steps";
    const auto per_step = times(known, W);
    if (!per_step || B % *per_step != 0)
      throw Error(cat(B, " is not divisible by ", known_key, " ", known, " x world size ", W,
                      per_step ? cat(" = ", *per_step) : std::string(" (overflows)"),
                      "; DeepSpeed's batch rule derives ", derived_key,
                      " from their quotient, so give a multiple or set ", derived_key, " yourself"),
                  at_key("train_batch_size"));
    const std::int64_t derived = B / *per_step;
    if (!derive_micro && derived > kMaxAccumulation)
      throw Error(
          cat(B, " / (train_micro_batch_size_per_gpu ", M, " x world size ", W,
              ") gives gradient_accumulation_steps ", derived, ", more than ", kMaxAccumulation),
          at_key("train_batch_size"));
    (derive_micro ? M : A) = derived;
  } else if (!train_batch_size) {
    // Only micro and/or accumulation given (or neither): the missing ones stay 1.
    const auto per_rank = times(M, A);
    const auto batch = per_rank ? times(*per_rank, W) : std::nullopt;
    if (!batch)
      throw Error(cat("train_micro_batch_size_per_gpu ", M, " x gradient_accumulation_steps ", A,
                      " x world size ", W, " overflows a 64-bit train_batch_size"),
                  at_key("train_batch_size"));
    train_batch_size = *batch;
  }
  // All three are known now; when all three were given, this is the agreement check.
  micro_batch_given = accumulation_given = true;
  validate_world(world);
}

}  // namespace zero
