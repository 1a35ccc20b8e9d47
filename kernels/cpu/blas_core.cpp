// OpenBLAS core detection and the re-exec fix (kernels/cpu/blas_core.hpp, docs/blas.md).
#include "kernels/cpu/blas_core.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

extern "C" char* openblas_get_config(void);
extern "C" char* openblas_get_corename(void);

namespace zero::kernels::cpu {
namespace {

constexpr const char* kCoretypeVar = "OPENBLAS_CORETYPE";
constexpr const char* kAppliedVar = "ZERO_BLAS_FIX_APPLIED";  // the loop guard, and the source
constexpr const char* kDisableVar = "ZERO_NO_BLAS_FIX";
// Tests only: OPENBLAS_CORETYPE stands for OpenBLAS's own detection, as if it were unset. On a
// CPU that OpenBLAS detects right, OPENBLAS_CORETYPE=Prescott plus this reproduces the bug.
constexpr const char* kAsDetectedVar = "ZERO_BLAS_FIX_AS_DETECTED";

// The class of kernels behind each x86-64 core name OpenBLAS reports (driver/others/dynamic.c):
// 1 SSE-SSE3, 2 AVX, 3 AVX2 + FMA, 4 AVX-512, 5 AVX-512 + BF16, 6 AMX. Names missing here get 0:
// unknown, left alone. Steamroller and Excavator (AVX2-era AMD with their own kernels) count as
// AVX2 so that zero never replaces a kernel OpenBLAS chose on purpose.
struct CoreClass {
  std::string_view name;
  int rank;
};
constexpr CoreClass kCores[] = {
    {"Katmai", 1},        {"Coppermine", 1},     {"Northwood", 1},  {"Prescott", 1},
    {"Banias", 1},        {"Atom", 1},           {"Core2", 1},      {"Penryn", 1},
    {"Dunnington", 1},    {"Nehalem", 1},        {"Athlon", 1},     {"Opteron", 1},
    {"Opteron(SSE3)", 1}, {"Barcelona", 1},      {"Nano", 1},       {"Bobcat", 1},
    {"Sandybridge", 2},   {"Bulldozer", 2},      {"Piledriver", 2}, {"Haswell", 3},
    {"Steamroller", 3},   {"Excavator", 3},      {"Zen", 3},        {"SkylakeX", 4},
    {"Cooperlake", 5},    {"SapphireRapids", 6},
};

int rank_of(std::string_view corename) {
  for (const auto& c : kCores)
    if (c.name.size() == corename.size() &&
        strncasecmp(c.name.data(), corename.data(), corename.size()) == 0)
      return c.rank;
  return 0;
}

// Set and not empty: OpenBLAS, too, detects the CPU when OPENBLAS_CORETYPE is empty.
bool env_set(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0';
}

bool fix_disabled() {
  const char* v = std::getenv(kDisableVar);
  return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
}

// Who chose the core: OPENBLAS_CORETYPE is the user's unless zero set it (it equals the marker)
// or a test says it stands for OpenBLAS's own detection.
CoretypeSource coretype_source() {
  if (!env_set(kCoretypeVar)) return CoretypeSource::detected;
  const char* applied = std::getenv(kAppliedVar);
  if (applied != nullptr && std::strcmp(std::getenv(kCoretypeVar), applied) == 0)
    return CoretypeSource::zero;
  return env_set(kAsDetectedVar) ? CoretypeSource::detected : CoretypeSource::user;
}

BlasFixEnv fix_env() {
  return {coretype_source() == CoretypeSource::user, env_set(kAppliedVar), fix_disabled()};
}

}  // namespace

std::string_view best_coretype(const CpuFeatures& f) {
  const bool avx512 = f.avx512f && f.avx512cd && f.avx512bw && f.avx512dq && f.avx512vl;
  if (avx512 && f.avx512bf16) return "Cooperlake";
  if (avx512) return "SkylakeX";
  if (f.avx2 && f.fma) return "Haswell";
  if (f.avx) return "Sandybridge";
  return {};
}

std::string_view recommended_coretype(const CpuFeatures& f, std::string_view corename) {
  const std::string_view best = best_coretype(f);
  const int running = rank_of(corename);
  if (best.empty() || running == 0) return {};
  return running < rank_of(best) ? best : std::string_view{};
}

std::string_view coretype_to_set(const BlasFixEnv& env, std::string_view recommended) {
  if (env.coretype_set || env.reexeced || env.disabled) return {};
  return recommended;
}

std::string_view name_of(CoretypeSource s) {
  switch (s) {
    case CoretypeSource::detected:
      return "detected";
    case CoretypeSource::user:
      return "user";
    case CoretypeSource::zero:
      return "zero";
  }
  return "?";
}

BlasCoreStatus blas_core_status() {
  BlasCoreStatus s;
  std::string config = openblas_get_config();  // "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ..."
  if (auto sp = config.find(' '); sp != std::string::npos) {
    if (auto sp2 = config.find(' ', sp + 1); sp2 != std::string::npos) config.resize(sp2);
  }
  s.library = config;
  s.running = openblas_get_corename();
  const CpuFeatures& f = cpu_features();
  s.best = best_coretype(f);
  s.recommended = recommended_coretype(f, s.running);
  const char* set = std::getenv(kCoretypeVar);
  s.source = coretype_source();
  s.fix_disabled = fix_disabled();
  if (!s.recommended.empty()) {
    s.warning = "OpenBLAS runs its " + s.running + " kernels but this CPU can run " +
                s.recommended + "'s, whose sgemm is up to 6x faster (docs/blas.md); ";
    if (s.source == CoretypeSource::user)
      s.warning += "OPENBLAS_CORETYPE=" + std::string(set) +
                   " is set in the environment (zero respects it); unset it to let zero choose";
    else if (s.source == CoretypeSource::zero)
      s.warning +=
          "zero set OPENBLAS_CORETYPE=" + std::string(set) + " but OpenBLAS did not take it";
    else if (s.fix_disabled)
      s.warning += "ZERO_NO_BLAS_FIX is set; set OPENBLAS_CORETYPE=" + s.recommended + " to fix it";
    else
      s.warning += "set OPENBLAS_CORETYPE=" + s.recommended +
                   ", or call zero::kernels::cpu::fix_blas_coretype(argc, argv) first in main "
                   "(docs/blas.md)";
  }
  return s;
}

void fix_blas_coretype(int argc, char** argv) {
  const CpuFeatures& f = cpu_features();
  const std::string target(
      coretype_to_set(fix_env(), recommended_coretype(f, openblas_get_corename())));
  if (target.empty() || argc < 1 || argv == nullptr) return;
  // The marker first: should the exec succeed and OPENBLAS_CORETYPE somehow be lost, the new
  // process still does not exec again.
  if (setenv(kAppliedVar, target.c_str(), 1) != 0 || setenv(kCoretypeVar, target.c_str(), 1) != 0)
    return;
  std::vector<char*> args(argv, argv + argc);
  args.push_back(nullptr);
  std::fflush(nullptr);
  execv("/proc/self/exe", args.data());
  // Still here: run on with the detected kernels, and say so once.
  const int err = errno;
  unsetenv(kCoretypeVar);
  std::fprintf(stderr,
               "zero: could not re-execute with OPENBLAS_CORETYPE=%s (%s); running with "
               "OpenBLAS's %s kernels\n",
               target.c_str(), std::strerror(err), openblas_get_corename());
}

}  // namespace zero::kernels::cpu
