#!/usr/bin/env bash
# 2026-12-06 w1: the BF16 single-projection GEMM with 256-row blocks (branch bf16-wide):
# correctness on the GPU, A/B against main, then ncu of both BF16 GEMMs and cuBLAS (new binary).
here="$(cd "$(dirname "$0")" && pwd)"; out="$OUT"
libs="$(find / -xdev -name 'libcublas.so.1[0-9]*' -not -path '/proc/*' 2>/dev/null)"
export LD_LIBRARY_PATH="$(dirname "$(echo "$libs" | head -1)"):${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"
t() { local name=$1 lim=$2; shift 2; local s=$SECONDS; timeout "$lim" "$@" > "$out/$name.log" 2>&1; echo "== $name rc=$? $((SECONDS-s))s"; grep -E "test result|panicked|ERROR SUMMARY|RACECHECK SUMMARY|worst|rel" "$out/$name.log" | cut -c1-200 | tail -6; }
export DENSEFFN_GPU_TEST_OVERLAYS=bf16
DENSEFFN_GPU_TEST_SMALL=1 t small 60 "$here/bin/test-gpu" --test-threads=1 --nocapture overlays_match
grep -q "test result: ok" "$out/small.log" || { echo "small failed: stop"; exit 1; }
DENSEFFN_GPU_TEST_SMALL=1 t racecheck 90 compute-sanitizer --tool racecheck --racecheck-report all "$here/bin/test-gpu" --test-threads=1 overlays_match
t full 150 "$here/bin/test-gpu" --test-threads=1 --nocapture overlays_match prefill_split_k
unset DENSEFFN_GPU_TEST_OVERLAYS
s=$SECONDS; timeout 220 bash "$here/run.sh" ab --shapes 8b,70b --formats bf16 --m 1 --n 128,512,4096 --quick > "$out/ab.log" 2>&1; echo "== ab rc=$? $((SECONDS-s))s"
cp "$here/out/ab.md" "$out/" 2>/dev/null; cp "$here/out/ab-new/bench.md" "$out/bench-new.md" 2>/dev/null; cp "$here/out/ab-base/bench.md" "$out/bench-base.md" 2>/dev/null
grep -E "prefill|forward\(" "$out/ab.md" 2>/dev/null | head -20
grep -iE "cublas|prefill" "$out/bench-new.md" | head -30
[ $SECONDS -gt 430 ] && { echo "no time for ncu"; exit 0; }
sec="--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis"
s=$SECONDS
timeout $((570 - SECONDS)) ncu $sec -k 'regex:bf16_gemm|nvjet|sm90_' --launch-count 4 "$here/bin/denseffn" bench --backend cuda --quick --shapes 8b --formats bf16 --m 1 --n 4096 --out /tmp/r1 > "$out/ncu-bf16.txt" 2>&1
echo "== ncu rc=$? $((SECONDS-s))s"
grep -E "^  [a-zA-Z_0-9]+.*\(|Duration|Compute \(SM\) Throughput|Memory Throughput|L2 Cache Throughput|DRAM Throughput|Issue Slots Busy|No Eligible|Warp Cycles Per Issued" "$out/ncu-bf16.txt" | head -60
