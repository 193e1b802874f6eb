#!/usr/bin/env bash
# GPU check + A/B of the split-K prefill GEMM, in one device call (carry: gpu-bundle). Build here:
#   cargo xtask gpu-bundle --gpu-only --base <main before the change>
#   cp docs/perf/2026-12-03-gemm-splitk/pf.sh gpu-bundle/
# Run there: bash gpu-bundle/pf.sh. $OUT/all.tgz is refreshed after each phase.
here="$(cd "$(dirname "$0")" && pwd)"; out="$OUT"
lib="$(find / -xdev -name 'libcublas.so.1[0-9]*' -not -path '/proc/*' 2>/dev/null | head -1)"
export LD_LIBRARY_PATH="$(dirname "$lib"):${LD_LIBRARY_PATH:-}"
T="$here/bin/test-gpu"
pack() { (cd "$out" && tar czf /tmp/all.tgz --exclude=all.tgz . && mv /tmp/all.tgz all.tgz); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$out/gpu.txt"
# 1. Correctness: NVFP4 prefill (N in 1, 7, 64, 511, 512, 4096; splits at N <= 512), the W4A4
#    arm's down, every entry point, two streams on one layer.
timeout 200 "$T" --test-threads=1 --nocapture prefill_matches nvfp4_mmq_matches every_kernel two_streams > "$out/t-gpu.log" 2>&1; echo "test-gpu rc=$?"
grep -E "test result|worst|FAILED|panicked" "$out/t-gpu.log" | head -20
pack
# 2. A/B: main vs this change, prefill at N = 128, 512, 4096 (and m = 1 decode paths).
A="--backend cuda --shapes 8b,70b --formats nvfp4,fp8,q2_0 --m 1 --n 128,512,4096"
timeout 100 "$here/bin/denseffn-base" bench $A --out "$out/ab-base" > "$out/ab-base.log" 2>&1; echo "base rc=$?"
timeout 100 "$here/bin/denseffn" bench $A --out "$out/ab-new" > "$out/ab-new.log" 2>&1; echo "new rc=$?"
"$here/bin/denseffn" compare "$out/ab-base" "$out/ab-new" --out "$out/ab.md"
rm -f "$out"/ab-*/*.svg
grep -E "prefill" "$out/ab.md"
grep -A12 "^## Prefill" "$out/ab-new/bench.md" | grep -E "\| (512|4096) \|"
pack
# 3. Sanitizers on the small shapes, then the overlay formats' GEMMs (small shapes).
for tool in racecheck memcheck; do
  DENSEFFN_GPU_TEST_SMALL=1 timeout 60 compute-sanitizer --tool $tool --error-exitcode 1 "$T" --test-threads=1 prefill_matches > "$out/san-$tool.log" 2>&1; echo "$tool rc=$?"; tail -n 2 "$out/san-$tool.log"
done
DENSEFFN_GPU_TEST_SMALL=1 timeout 60 "$T" --test-threads=1 --nocapture overlays > "$out/t-overlays-small.log" 2>&1; echo "overlays(small) rc=$?"
grep -E "test result|FAILED|panicked" "$out/t-overlays-small.log" | head -5
pack
