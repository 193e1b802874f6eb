#!/usr/bin/env bash
# 2026-12-07 s18 (≤ 300 s). s17's racecheck still found s16's 6 hazards in `w8a16_gemm(_x2)`:
# ptxas drops the `bar.warp.sync` of a converged warp (a NOP in the SASS), so racecheck sees no
# order between lanes 1–31's `LDS` of a stage and lane 0's release. Now every lane of the FP8
# consumers arrives on the empty barrier (`BulkFormat::RELEASE_LANES` = 32, `d7b4abb`). The
# working tree adds one `wgmma.fence` a stage in `w8a16_gemm*` (A registers of all 4 steps made
# first: ptxas had closed a scoreboard group per step, so `wait_group 1` kept only the last
# step in flight). Bundle of the working tree with `--base HEAD` (`d7b4abb`) and
# `--variant d3=q4k-depth/q4kd3.patch` (HEAD with the Q4_K dual GEMV 3 chunks deep):
# (1) w8a8 + FP8 overlay tests (small) and both under racecheck / memcheck; (2) FP8 prefill
# A/B base → this; (3) Q4_K decode A/B base → d3 on 8B, 32B, 70B, 27B (m = 1, 8).
. "$(dirname "$0")/lib.sh"
export DENSEFFN_GPU_TEST_SMALL=1 DENSEFFN_GPU_TEST_OVERLAYS=fp8
t tests 60 "$here/bin/test-gpu" --test-threads=1 --nocapture overlays_match every_kernel w8a8
t racecheck 90 compute-sanitizer --tool racecheck --error-exitcode 1 "$here/bin/test-gpu" --test-threads=1 overlays_match w8a8
t memcheck 90 compute-sanitizer --tool memcheck --error-exitcode 1 "$here/bin/test-gpu" --test-threads=1 overlays_match w8a8
grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$out/racecheck.log" "$out/memcheck.log" | tail -3
unset DENSEFFN_GPU_TEST_SMALL DENSEFFN_GPU_TEST_OVERLAYS
for v in -base "" -base ""; do
  s0=$SECONDS; timeout 60 "$here/bin/denseffn$v" bench --backend cuda --shapes 8b,70b --formats fp8 --m 1 --n 512,4096 --out "$out/fp8$v" > "$out/fp8$v.log" 2>&1; echo "== fp8$v rc=$? $((SECONDS-s0))s"
  rm -f "$out"/fp8$v/*.svg; grep -E "prefill" "$out/fp8$v/bench.md" | cut -d'|' -f2,4,6,7,8,9
done
for v in -base -d3; do
  s0=$SECONDS; timeout 90 "$here/bin/denseffn$v" bench --backend cuda --shapes 8b,32b,70b,27b --formats q4k --m 1,8 --n 128 --out "$out/q4k$v" > "$out/q4k$v.log" 2>&1; echo "== q4k$v rc=$? $((SECONDS-s0))s"
  rm -f "$out"/q4k$v/*.svg; grep -E "\\| forward \\||forward_km\\(8\\)" "$out/q4k$v/bench.md" | cut -d'|' -f2,4,5,7,8,10,11
done
# (4) stall reasons of the W8A16 and BF16 gate+up GEMMs, 8B N = 4096 (one launch each).
M="--metrics gpu__time_duration.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio"
for f in fp8:w8a16_gemm_gate_up bf16:bf16_gemm_gate_up; do
  timeout 60 ncu -k regex:"${f#*:}" -c 1 $M "$here/bin/denseffn" bench --backend cuda --shapes 8b --formats "${f%%:*}" --m 1 --n 4096 --quick > "$out/ncu-${f%%:*}.txt" 2>&1; echo "== ncu ${f%%:*} rc=$?"
  grep -E "duration|tensor_op|stalled" "$out/ncu-${f%%:*}.txt" | awk '$NF+0 > 0.05' | cut -c1-120
done
tar czf /tmp/r.tgz -C "$out" . && rm -rf "${out:?}"/* && mv /tmp/r.tgz "$out/"
