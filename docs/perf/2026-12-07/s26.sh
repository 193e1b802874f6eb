#!/usr/bin/env bash
# 2026-12-07 s26 (tenth session, ≤ 560 s; best on the H200): the FP8 × FP8 GEMMs' consumers with
# two accumulator sets (one `wgmma` group runs while the warp rescales the other). Bundle:
#   git apply docs/perf/2026-12-07/w8a8-pipe-sc.patch
#   cargo xtask gpu-bundle --gpu-only --base HEAD --variant v1=docs/perf/2026-12-07/w8a8-pipe.patch
#   rm gpu-bundle/bin/test-gpu_lora*; cp docs/perf/2026-12-07/{s26.sh,lib.sh} gpu-bundle/
# bin/denseffn: both patches' change (two accumulator sets, and the scale words converted where
# used, so the load a stage ahead is not waited for at once); -v1: the two sets only; -base: main.
# (1) the w8a8 GPU test (full shapes, odd K tiles, SiLU and GELU, N = 1 / 64 / 511 / 4096) and
#     racecheck + memcheck of it on small shapes; (2) FP8 × FP8 prefill 8B / 70B, N = 512 / 4096,
#     this build, main's (`-base`), the two sets only (`-v1`), this build again, cuBLAS bf16 in
#     each process;
#     (3) ncu durations of the w8a8 kernels at 8B N = 512, both builds.
. "$(dirname "$0")/lib.sh"
t w8a8 200 "$here/bin/test-gpu" --test-threads=1 --nocapture w8a8_matches_cpu_reference
DENSEFFN_GPU_TEST_SMALL=1 t racecheck 60 compute-sanitizer --tool racecheck --error-exitcode 1 "$here/bin/test-gpu" --test-threads=1 w8a8_matches_cpu_reference
grep -E "RACECHECK SUMMARY|ERROR SUMMARY" "$out/racecheck.log" | tail -1
DENSEFFN_GPU_TEST_SMALL=1 t memcheck 60 compute-sanitizer --tool memcheck --error-exitcode 1 "$here/bin/test-gpu" --test-threads=1 w8a8_matches_cpu_reference
grep -E "ERROR SUMMARY" "$out/memcheck.log" | tail -1
for run in new base v1 new2; do
  [ $SECONDS -gt 440 ] && break
  s0=$SECONDS; bin="$here/bin/denseffn"; [ $run = base ] && bin="$here/bin/denseffn-base"; [ $run = v1 ] && bin="$here/bin/denseffn-v1"
  DENSEFFN_FFN_W8A8=1 timeout 50 "$bin" bench --backend cuda --shapes 8b,70b --formats fp8 --m 1 --n 512,4096 --out "$out/$run" > "$out/$run.log" 2>&1; echo "== $run rc=$? $((SECONDS-s0))s"
  rm -f "$out"/$run/*.svg; grep -E "prefill" "$out/$run/bench.md" | cut -d'|' -f2,4,5,6,7,8,9,10
done
for run in new base; do
  [ $SECONDS -gt 500 ] && break
  bin="$here/bin/denseffn"; [ $run = base ] && bin="$here/bin/denseffn-base"
  DENSEFFN_FFN_W8A8=1 timeout 40 ncu -k regex:w8a8_gemm --metrics gpu__time_duration.sum,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active "$bin" bench --backend cuda --shapes 8b --formats fp8 --m 1 --n 512 --quick > "$out/ncu-$run.txt" 2>&1; echo "== ncu-$run rc=$?"
  grep -E "w8a8_gemm|duration|gmma" "$out/ncu-$run.txt" | head -12
done
tar czf /tmp/r.tgz -C "$out" . && rm -rf "${out:?}"/* && mv /tmp/r.tgz "$out/"
