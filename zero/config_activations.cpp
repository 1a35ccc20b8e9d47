// DeepSpeed's `activation_checkpointing` section (zero/config_activations.hpp). In DeepSpeed the
// model's code calls deepspeed.checkpointing.checkpoint around each layer and this section
// configures that call; zero's GPT trainer is its own model, so the section's presence is the
// call: every block keeps only its input and runs its forward again in backward.
#include "zero/config_activations.hpp"

namespace zero::detail {
namespace {

// The keys whose asked-for behaviour zero already has, or which cannot apply (no model
// parallelism), with what zero does; silent at DeepSpeed's defaults.
constexpr Inert kActivationCheckpointingInert[] = {
    {"partition_activations",
     "zero has no model parallelism to split a checkpoint over; each rank keeps its blocks' "
     "inputs whole",
     "false"},
    {"contiguous_memory_optimization",
     "each block's input has a buffer of its own, allocated once before the first step", "false"},
    {"synchronize_checkpoint_boundary",
     "zero adds no device synchronization at block boundaries (it times recomputation with events)",
     "false"},
    {"profile",
     "zero train always measures the recomputation and prints its time per step and its share "
     "of compute",
     "false"}};

}  // namespace

void read_activation_checkpointing(const ObjectReader& top, Config& c) {
  const json::value* v = top.get("activation_checkpointing");
  if (!v) return;
  // DeepSpeed reads this section with dict.get: other keys are ignored (with a warning).
  const ObjectReader s(*v, top.path_of("activation_checkpointing"),
                       {"cpu_checkpointing", "number_checkpoints"}, kActivationCheckpointingInert,
                       top.log(), Unknown::ignore);
  c.activation_checkpointing = true;
  bool cpu = false;
  if (s.flag("cpu_checkpointing", cpu) && cpu)
    top.log().lacks(s.path_of("cpu_checkpointing"), "checkpointed activations in host memory");
  int count = 0;
  if (s.integer("number_checkpoints", count, 1, 2147483647))
    s.warnings().push_back(cat(s.path_of("number_checkpoints"), " ", count,
                               " has no effect: zero checkpoints every block's input, one per "
                               "layer (DeepSpeed reads it only to size a contiguous buffer)"));
}

}  // namespace zero::detail
