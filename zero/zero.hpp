// zero's public header: everything a trainer (and the `zero` command) may use.
#pragma once

#include "comm/abort.hpp"
#include "comm/communicator.hpp"
#include "comm/mpi_communicator.hpp"
#include "comm/mpi_runtime.hpp"
#include "kernels/cpu/gemm.hpp"
#include "precision/bf16.hpp"
#include "precision/convert.hpp"
#include "precision/fp16.hpp"
#include "zero/build_info.hpp"
#include "zero/config.hpp"
#include "zero/engine.hpp"
#include "zero/layout.hpp"
#include "zero/ledger.hpp"
#include "zero/planner.hpp"
#include "zero/schedule.hpp"
#include "zero/error.hpp"
