#include "core/cpu.h"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>

#include "core/error.h"

namespace tessera {
namespace {

uint64_t xgetbv0() {
  uint32_t eax, edx;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<uint64_t>(edx) << 32) | eax;
}

CpuFeatures detect() {
  CpuFeatures f;
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = (c >> 27) & 1;
  const bool avx = (c >> 28) & 1;
  f.fma = (c >> 12) & 1;
  f.f16c = (c >> 29) & 1;
  if (!osxsave || !avx) return CpuFeatures{};
  const uint64_t xcr0 = xgetbv0();
  const bool ymm_saved = (xcr0 & 0x6) == 0x6;
  const bool zmm_saved = (xcr0 & 0xe6) == 0xe6;
  if (!ymm_saved) return CpuFeatures{};
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return f;
  f.avx2 = (b >> 5) & 1;
  f.bmi2 = (b >> 8) & 1;
  if (zmm_saved) {
    f.avx512f = (b >> 16) & 1;
    f.avx512dq = (b >> 17) & 1;
    f.avx512bw = (b >> 30) & 1;
    f.avx512vl = (b >> 31) & 1;
    f.avx512vnni = (c >> 11) & 1;
    f.avx512vbmi2 = (c >> 6) & 1;
    unsigned a1, b1, c1, d1;
    if (__get_cpuid_count(7, 1, &a1, &b1, &c1, &d1)) f.avx512bf16 = (a1 >> 5) & 1;
    // AMX-TILE (EDX bit 24) and AMX-INT8 (bit 25), with XTILECFG and
    // XTILEDATA (XCR0 bits 17, 18) enabled by the OS.
    const bool tiles_saved = (xcr0 & 0x60000) == 0x60000;
    f.amx_int8 = tiles_saved && ((d >> 24) & 1) && ((d >> 25) & 1);
  }
  return f;
}

Isa choose_isa() {
  const char* forced = std::getenv("TESSERA_ISA");
  if (forced != nullptr && *forced != '\0') {
    auto isa = parse_isa(forced);
    TESSERA_CHECK(isa.has_value(), kInvalidArgument,
                  "TESSERA_ISA='{}' is not one of scalar, avx2, avx512", forced);
    TESSERA_CHECK(isa_supported(*isa), kInvalidArgument,
                  "TESSERA_ISA={} requested but this CPU does not support it ({})", forced,
                  cpu_summary());
    return *isa;
  }
  if (isa_supported(Isa::kAvx512)) return Isa::kAvx512;
  if (isa_supported(Isa::kAvx2)) return Isa::kAvx2;
  return Isa::kScalar;
}

// Linux keeps the 8 KiB of tile data out of a process's signal frames
// until it asks for them (Documentation/arch/x86/xstate.rst).
bool request_amx_permission() {
  constexpr int kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

bool choose_amx() {
  const char* forced = std::getenv("TESSERA_AMX");
  const bool off = forced != nullptr && std::string_view(forced) == "0";
  const bool on = forced != nullptr && std::string_view(forced) == "1";
  TESSERA_CHECK(forced == nullptr || *forced == '\0' || off || on, kInvalidArgument,
                "TESSERA_AMX='{}' is not 0 or 1", forced);
  if (off) return false;
  const bool usable = cpu_features().amx_int8 && request_amx_permission();
  TESSERA_CHECK(usable || !on, kInvalidArgument,
                "TESSERA_AMX=1 requested but this CPU or kernel does not allow AMX-INT8 ({})", cpu_summary());
  return usable;
}

}  // namespace

bool amx_usable() {
  static const bool usable = choose_amx();
  return usable;
}

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return "scalar";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
  }
  return "?";
}

std::optional<Isa> parse_isa(std::string_view name) {
  if (name == "scalar") return Isa::kScalar;
  if (name == "avx2") return Isa::kAvx2;
  if (name == "avx512") return Isa::kAvx512;
  return std::nullopt;
}

bool isa_supported(Isa isa) {
  const CpuFeatures& f = cpu_features();
  switch (isa) {
    case Isa::kScalar: return true;
    case Isa::kAvx2: return f.avx2 && f.fma && f.f16c && f.bmi2;
    case Isa::kAvx512:
      // The AVX-512 kernels use VNNI for int8 dots: Ice Lake, Zen 4 and later.
      return isa_supported(Isa::kAvx2) && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq &&
             f.avx512vnni;
  }
  return false;
}

std::vector<Isa> supported_isas() {
  std::vector<Isa> out;
  for (int i = 0; i < kNumIsas; ++i) {
    if (isa_supported(static_cast<Isa>(i))) out.push_back(static_cast<Isa>(i));
  }
  return out;
}

Isa active_isa() {
  static const Isa isa = choose_isa();
  return isa;
}

std::string cpu_summary() {
  const CpuFeatures& f = cpu_features();
  std::string s;
  auto add = [&](bool on, const char* name) {
    if (!on) return;
    if (!s.empty()) s += ' ';
    s += name;
  };
  add(f.avx2, "avx2");
  add(f.fma, "fma");
  add(f.f16c, "f16c");
  add(f.avx512f, "avx512f");
  add(f.avx512bw, "avx512bw");
  add(f.avx512vl, "avx512vl");
  add(f.avx512vnni, "avx512vnni");
  add(f.avx512bf16, "avx512bf16");
  add(f.avx512vbmi2, "avx512vbmi2");
  add(f.amx_int8, "amx-int8");
  return s.empty() ? std::string("no simd extensions") : s;
}

}  // namespace tessera
