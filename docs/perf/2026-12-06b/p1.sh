#!/usr/bin/env bash
# 2026-12-06 p1: where the BF16 prefill GEMMs and the Q2_0 decode GEMVs spend their time (ncu).
here="$(cd "$(dirname "$0")" && pwd)"; out="$OUT"
libs="$(find / -xdev -name 'libcublas.so.1[0-9]*' -not -path '/proc/*' 2>/dev/null)"
export LD_LIBRARY_PATH="$(dirname "$(echo "$libs" | head -1)"):${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"
b="$here/bin/denseffn"
sec="--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis"
s=$SECONDS
timeout 240 ncu $sec -k 'regex:bf16_gemm|nvjet|sm90|gemm' --launch-count 6 "$b" bench --backend cuda --quick --shapes 8b --formats bf16 --m 1 --n 4096 --out /tmp/r1 > "$out/ncu-bf16.txt" 2>&1
echo "== ncu bf16 rc=$? $((SECONDS-s))s"
grep -E "^  [a-z_0-9]+.*\(|Duration|Compute \(SM\) Throughput|Memory Throughput|Registers Per|Issue Slots Busy|No Eligible|Tensor|Stall|Warp Cycles Per Issued" "$out/ncu-bf16.txt" | head -80
s=$SECONDS
timeout 200 ncu $sec -k 'regex:q2_0_gemv' --launch-count 2 "$b" bench --backend cuda --quick --shapes 8b --formats q2_0 --m 1 --n 128 --out /tmp/r2 > "$out/ncu-q2.txt" 2>&1
echo "== ncu q2 rc=$? $((SECONDS-s))s"
grep -E "^  [a-z_0-9]+.*\(|Duration|Compute \(SM\) Throughput|Memory Throughput|DRAM Throughput|Registers Per|Issue Slots Busy|No Eligible|Stall|Warp Cycles Per Issued|Achieved Occupancy" "$out/ncu-q2.txt" | head -60
