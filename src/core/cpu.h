// CPU feature detection and the instruction-set level kernels run at.
//
// The ISA is chosen once, at first use, from CPUID (and XGETBV: the OS must
// save the wide registers), unless TESSERA_ISA=scalar|avx2|avx512 forces one.
// Forcing an ISA the machine lacks is an error, not a silent fallback.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tessera {

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool bmi2 = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512dq = false;
  bool avx512vnni = false;
  bool avx512bf16 = false;
  // Byte compress / expand (VPEXPANDB: the sparse kernels, kernels/sparse.h).
  bool avx512vbmi2 = false;
  // AMX tiles with int8 dot products (Sapphire Rapids and later), the
  // tile state enabled in XCR0. Using them also needs the kernel's
  // permission for the process: see amx_usable().
  bool amx_int8 = false;
};

enum class Isa { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };
constexpr int kNumIsas = 3;

const CpuFeatures& cpu_features();

std::string_view isa_name(Isa isa);
std::optional<Isa> parse_isa(std::string_view name);

// Whether this machine can run kernels built for `isa`.
bool isa_supported(Isa isa);

// Every ISA this machine can run, scalar first. Tests iterate over these.
std::vector<Isa> supported_isas();

// The ISA kernels dispatch to: TESSERA_ISA if set (throws if unsupported or
// unknown), otherwise the best supported one. Fixed after the first call.
Isa active_isa();

// Whether the AMX int8 tile kernels may run: the CPU has AMX-INT8, Linux
// granted this process the tile data state (arch_prctl ARCH_REQ_XCOMP_PERM,
// asked once, for every thread of the process), and TESSERA_AMX is not 0.
// TESSERA_AMX=1 on a machine without it is an error. The AMX kernels are
// an AVX-512 table (kernels/matmul_amx.cc): only used when that ISA is.
bool amx_usable();

// One line for logs: "avx2 (fma f16c)" and the like.
std::string cpu_summary();

}  // namespace tessera
