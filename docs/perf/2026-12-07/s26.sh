#!/usr/bin/env bash
# 2026-12-07 s26 (tenth session; `BUDGET=<s> bash s26.sh`, default 560; best on the H200): the
# FP8 × FP8 GEMMs' consumers with two accumulator sets (one `wgmma` group runs while the warp
# rescales the other). Bundle:
#   git apply docs/perf/2026-12-07/w8a8-pipe.patch docs/perf/2026-12-07/w8a8-pipe-sc.patch
#   cargo xtask gpu-bundle --gpu-only --base HEAD --variant v1=docs/perf/2026-12-07/w8a8-pipe.patch
#   rm gpu-bundle/bin/test-gpu_lora* gpu-bundle/bin/test-gpu-v1; cp docs/perf/2026-12-07/{s26.sh,lib.sh} gpu-bundle/
# bin/denseffn: both patches' change (two accumulator sets, and the scale words converted where
# used, so the load a stage ahead is not waited for at once); -v1: the two sets only; -base: main.
# In order, each step only if it fits the budget: the w8a8 GPU test on small shapes; FP8 × FP8
# prefill 8B / 70B, N = 512 / 4096 with this build and main's (cuBLAS bf16 in each process); the
# w8a8 test on full shapes (odd K tiles, SiLU and GELU, N = 1 / 64 / 511 / 4096); memcheck of the test (small shapes); the
# two-sets-only build; racecheck; this build again; ncu durations at 8B N = 512.
. "$(dirname "$0")/lib.sh"
budget=${BUDGET:-560}
fits() { [ $((SECONDS + $1)) -lt "$budget" ]; }
bench() {
  local run=$1 s0=$SECONDS bin="$here/bin/denseffn"; [ "$run" != new ] && [ "$run" != new2 ] && bin="$here/bin/denseffn-$run"
  DENSEFFN_FFN_W8A8=1 timeout 50 "$bin" bench --backend cuda --shapes 8b,70b --formats fp8 --m 1 --n 512,4096 --out "$out/$run" > "$out/$run.log" 2>&1; echo "== $run rc=$? $((SECONDS-s0))s"
  rm -f "$out"/$run/*.svg; grep -E "prefill" "$out/$run/bench.md" | cut -d'|' -f2,4,5,6,7,8,9,10
}
DENSEFFN_GPU_TEST_SMALL=1 t w8a8-small 60 "$here/bin/test-gpu" --test-threads=1 --nocapture w8a8_matches_cpu_reference
fits 50 && bench new
fits 50 && bench base
fits 150 && t w8a8 150 "$here/bin/test-gpu" --test-threads=1 --nocapture w8a8_matches_cpu_reference
fits 60 && { DENSEFFN_GPU_TEST_SMALL=1 t memcheck 60 compute-sanitizer --tool memcheck --error-exitcode 1 "$here/bin/test-gpu" --test-threads=1 w8a8_matches_cpu_reference; grep -E "ERROR SUMMARY" "$out/memcheck.log" | tail -1; }
fits 50 && bench v1
fits 60 && { DENSEFFN_GPU_TEST_SMALL=1 t racecheck 60 compute-sanitizer --tool racecheck --error-exitcode 1 "$here/bin/test-gpu" --test-threads=1 w8a8_matches_cpu_reference; grep -E "RACECHECK SUMMARY|ERROR SUMMARY" "$out/racecheck.log" | tail -1; }
fits 50 && bench new2
for run in new base; do
  fits 40 || break
  bin="$here/bin/denseffn"; [ $run = base ] && bin="$here/bin/denseffn-base"
  DENSEFFN_FFN_W8A8=1 timeout 40 ncu -k regex:w8a8_gemm --metrics gpu__time_duration.sum,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active "$bin" bench --backend cuda --shapes 8b --formats fp8 --m 1 --n 512 --quick > "$out/ncu-$run.txt" 2>&1; echo "== ncu-$run rc=$?"
  grep -E "w8a8_gemm|duration|gmma" "$out/ncu-$run.txt" | head -12
done
tar czf /tmp/r.tgz -C "$out" . && rm -rf "${out:?}"/* && mv /tmp/r.tgz "$out/"
