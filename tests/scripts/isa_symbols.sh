#!/usr/bin/env bash
# ODR rule check (docs/KERNELS.md): an object compiled for AVX2 / AVX-512
# (src/**/*_avx2.cc, *_avx512.cc, *_amx.cc) must define no weak, vague-linkage or
# unique global symbols; the linker could otherwise keep the wide-ISA copy of
# an inline function for the whole program and crash CPUs without that ISA.
# Usage: tests/scripts/isa_symbols.sh BUILD_DIR
set -euo pipefail
build="${1:-build}"
# One static library per layer (src/LAYERS): the kernels sit in tessera_kernels,
# but any layer may hold a per-ISA object, so look in every library's objects.
objs=$(find "$build/CMakeFiles" -path '*/tessera_*.dir/src/*' \( -name '*_avx2.cc.o' -o -name '*_avx512.cc.o' -o -name '*_amx.cc.o' \) | sort)
[ -n "$objs" ] || { echo "no per-ISA objects under $build"; exit 1; }
status=0
for o in $objs; do
  bad=$(nm -C "$o" | grep -E ' [WVu] ' || true)
  if [ -n "$bad" ]; then
    echo "FAIL: $o exports weak/vague symbols:"
    echo "$bad" | head -20
    status=1
  fi
done
[ $status -eq 0 ] && echo "ok: $(echo "$objs" | wc -l) per-ISA objects define only strong, non-inline symbols"
exit $status
