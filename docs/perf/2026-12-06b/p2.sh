#!/usr/bin/env bash
# 2026-12-06 p2: ncu of the BF16 prefill GEMMs (8B, N = 4096): which pipe or memory bounds them.
here="$(cd "$(dirname "$0")" && pwd)"; out="$OUT"
libs="$(find / -xdev -name 'libcublas.so.1[0-9]*' -not -path '/proc/*' 2>/dev/null)"
export LD_LIBRARY_PATH="$(dirname "$(echo "$libs" | head -1)"):${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"
sec="--section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables --section WarpStateStats --section SchedulerStats"
s=$SECONDS
timeout 300 ncu $sec -k 'regex:^bf16_gemm' --launch-count 2 "$here/bin/denseffn" bench --backend cuda --quick --shapes 8b --formats bf16 --m 1 --n 4096 --out /tmp/r1 > "$out/ncu-ours.txt" 2>&1
echo "== ncu rc=$? $((SECONDS-s))s"
grep -vE "^==PROF==|^    -+ |^\s*$" "$out/ncu-ours.txt" | grep -E "^  [a-zA-Z_0-9]+.*\(|Duration|Throughput|Pipe|Busy|Eligible|Issued|Bank|Shared|Stall|Active|Hit|Registers" | head -120
