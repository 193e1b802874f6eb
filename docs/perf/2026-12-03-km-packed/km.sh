#!/usr/bin/env bash
# The GPU check and A/B of the km-packed branch (packed verify staging + programmatic dependent
# launches between a call's kernels). Build here:
#   cargo xtask gpu-bundle --gpu-only --base <main's revision>
#   cp docs/perf/2026-12-03-km-packed/{km,ncu}.sh gpu-bundle/
# Run there (carry: gpu-bundle): bash gpu-bundle/km.sh [tests|bench|san] (default: all three).
# A call may run 600 s: `tests` and `san` together fit (about 380 + 180 s at most), `bench`
# (three runs, up to 160 s each) wants a call of its own. $OUT/all.tgz is refreshed after each.
#   tests: decode, verify (incl. the graded-magnitude test), chained/graph/back-to-back, non-finite,
#          entry points, two streams; overlays (small shapes); LoRA.
#   bench: base (main) vs this branch vs this branch with DENSEFFN_PDL=0 (PDL's share), 8B and
#          70B × nvfp4/q4k/fp8/q2_0, forward, k2/k3 and km at m = 1..5, 8.
#   san:   compute-sanitizer racecheck/synccheck/memcheck on the verify, chained and overlay tests.
here="$(cd "$(dirname "$0")" && pwd)"; out="$OUT"; phase="${1:-all}"  # all | tests | bench | san | tests+san
lib="$(find / -xdev -name 'libcublas.so.1[0-9]*' -not -path '/proc/*' 2>/dev/null | head -1)"
export LD_LIBRARY_PATH="$(dirname "$lib"):${LD_LIBRARY_PATH:-}"
T="$here/bin/test-gpu"; L="$here/bin/test-gpu_lora"
pack() { (cd "$out" && tar czf /tmp/all.tgz --exclude=all.tgz . && mv /tmp/all.tgz all.tgz); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$out/gpu.txt"
if [ "$phase" = all ] || [ "$phase" = tests ] || [ "$phase" = tests+san ]; then
  timeout 200 "$T" --test-threads=1 --nocapture decode_matches verify_paths chained non_finite every_kernel two_streams > "$out/t-gpu.log" 2>&1; echo "test-gpu rc=$?"
  grep -E "test result|worst|FAILED|panicked" "$out/t-gpu.log" | head -20
  DENSEFFN_GPU_TEST_SMALL=1 timeout 60 "$T" --test-threads=1 --nocapture overlays > "$out/t-overlays-small.log" 2>&1; echo "overlays(small) rc=$?"
  grep -E "test result|FAILED|panicked" "$out/t-overlays-small.log" | head -5
  timeout 120 "$L" --test-threads=1 --nocapture > "$out/t-lora.log" 2>&1; echo "test-gpu_lora rc=$?"
  grep -E "test result|FAILED|panicked" "$out/t-lora.log" | head
  pack
fi
if [ "$phase" = all ] || [ "$phase" = bench ]; then
  A="--backend cuda --shapes 8b,70b --formats nvfp4,q4k,fp8,q2_0 --m 1,2,3,4,5,8 --n 128"
  timeout 160 "$here/bin/denseffn-base" bench $A --out "$out/ab-base" > "$out/ab-base.log" 2>&1; echo "base rc=$?"
  timeout 160 "$here/bin/denseffn" bench $A --out "$out/ab-new" > "$out/ab-new.log" 2>&1; echo "new rc=$?"
  DENSEFFN_PDL=0 timeout 160 "$here/bin/denseffn" bench $A --out "$out/ab-nopdl" > "$out/ab-nopdl.log" 2>&1; echo "new, PDL off rc=$?"
  "$here/bin/denseffn" compare "$out/ab-base" "$out/ab-new" --out "$out/ab.md"
  "$here/bin/denseffn" compare "$out/ab-nopdl" "$out/ab-new" --out "$out/ab-pdl.md"
  grep -E "forward" "$out/ab.md" | head -60
  grep -A12 "forward_km scaling" "$out/ab-new/bench.md" | head -30
  pack
fi
if [ "$phase" = all ] || [ "$phase" = san ] || [ "$phase" = tests+san ]; then
  for tool in racecheck synccheck memcheck; do
    DENSEFFN_GPU_TEST_SMALL=1 timeout 60 compute-sanitizer --tool $tool --error-exitcode 1 "$T" --test-threads=1 verify_paths chained overlays > "$out/san-$tool.log" 2>&1; echo "$tool rc=$?"; tail -n 2 "$out/san-$tool.log"
  done
  pack
fi
