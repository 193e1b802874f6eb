#!/usr/bin/env bash
# 2026-12-07 s17 (≤ 400 s): the FP8 overlay's default prefill on the persistent kernel as landed
# (w8a16-bulk.patch plus a `bar.warp.sync` before each consumer warp's lane-0 release of a stage
# its lanes read with ld.shared: s16's racecheck found 6 WAR hazards, 31 lanes × 128 each,
# between those reads and the producer's next bulk copy into the stage). Bundle of main:
#   cargo xtask gpu-bundle --gpu-only; rm gpu-bundle/bin/test-gpu_lora*; cp s17.sh lib.sh gpu-bundle/
# (1) w8a8 test and the FP8 overlay (every path, every entry point), small shapes, and both under
# racecheck and memcheck; (2) FP8 prefill bench (cuBLAS bf16 in the process); (3) ncu sections
# of the w8a16 GEMMs (8B, N = 4096) and of the Q4_K and Q2_0 decode GEMVs (8B, m = 1).
. "$(dirname "$0")/lib.sh"
export DENSEFFN_GPU_TEST_SMALL=1 DENSEFFN_GPU_TEST_OVERLAYS=fp8
t w8a8 60 "$here/bin/test-gpu" --test-threads=1 --nocapture w8a8
t fp8-small 60 "$here/bin/test-gpu" --test-threads=1 --nocapture overlays_match every_kernel
t racecheck 90 compute-sanitizer --tool racecheck --error-exitcode 1 "$here/bin/test-gpu" --test-threads=1 overlays_match w8a8
t memcheck 90 compute-sanitizer --tool memcheck --error-exitcode 1 "$here/bin/test-gpu" --test-threads=1 overlays_match w8a8
grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$out/racecheck.log" "$out/memcheck.log" | tail -3
unset DENSEFFN_GPU_TEST_SMALL DENSEFFN_GPU_TEST_OVERLAYS
s0=$SECONDS; timeout 60 "$here/bin/denseffn" bench --backend cuda --shapes 8b,70b --formats fp8 --m 1 --n 512,4096 --out "$out/fp8" > "$out/fp8.log" 2>&1; echo "== fp8 rc=$? $((SECONDS-s0))s"
grep -E "prefill" "$out/fp8/bench.md" | cut -d'|' -f2,3,4,6,7,8,9,10
rm -f "$out"/fp8/*.svg
# (4) Q4_K decode: the dual GEMV's load depth (UNROLL_DUAL 1 on main; q4k-depth/*.patch: 2 at
# 96 registers, 2 with launch bounds for 3 blocks per SM, 3 at 127), 8B and 70B, m = 1 and 8.
tar xzf "$here/variants.tgz" -C "$here/bin"
for v in "" -d2 -d2b3 -d3; do
  s0=$SECONDS; timeout 60 "$here/bin/denseffn$v" bench --backend cuda --shapes 8b,70b --formats q4k --m 1,8 --n 128 --out "$out/q4k$v" > "$out/q4k$v.log" 2>&1; echo "== q4k$v rc=$? $((SECONDS-s0))s"
  rm -f "$out"/q4k$v/*.svg; grep -E "\| forward \||forward_km\(8\)" "$out/q4k$v/bench.md" | cut -d'|' -f2,4,5,7,8,10,11
done
for v in -d2 -d2b3 -d3; do
  DENSEFFN_GPU_TEST_SMALL=1 DENSEFFN_GPU_TEST_OVERLAYS=q4k t q4k-test$v 60 "$here/bin/test-gpu$v" --test-threads=1 --nocapture overlays_match
done
S="--section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats --section SchedulerStats --section LaunchStats --section InstructionStats --section ComputeWorkloadAnalysis"
D="$here/bin/denseffn"
timeout 90 ncu -k regex:'w8a16_gemm' -c 2 $S $D bench --backend cuda --shapes 8b --formats fp8 --m 1 --n 4096 --quick > "$out/ncu-w8a16.txt" 2>&1; echo "== ncu w8a16 rc=$?"
for f in q4k q2_0; do
  timeout 60 ncu -k regex:"^${f}_gemv(_gate_up)?\$" -c 2 $S $D bench --backend cuda --shapes 8b --formats $f --m 1 --n 128 --quick > "$out/ncu-$f.txt" 2>&1; echo "== ncu $f rc=$?"
done
grep -E "^  [a-z0-9_]+\(|Duration|DRAM Throughput|Memory Throughput|Compute \(SM\) Throughput|Registers Per|Achieved Occupancy|Issue Slots Busy|Warp Cycles Per Issued" "$out"/ncu-*.txt | cut -c1-160
tar czf /tmp/r.tgz -C "$out" . && rm -rf "${out:?}"/* && mv /tmp/r.tgz "$out/"
