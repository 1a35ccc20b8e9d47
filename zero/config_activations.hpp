// DeepSpeed's `activation_checkpointing` section as zero reads it (docs/config.md): present, it
// turns on the GPT trainer's recomputation of every block (as `--recompute`); its keys are
// inert with a warning where zero already behaves as they ask or they cannot apply, refused
// where zero lacks what they ask (checkpoints in host memory).
#pragma once

#include "zero/config.hpp"
#include "zero/json_reader.hpp"

namespace zero::detail {

// Reads top-level `activation_checkpointing` into c.activation_checkpointing.
void read_activation_checkpointing(const ObjectReader& top, Config& c);

}  // namespace zero::detail
