#!/usr/bin/env bash
# 2026-12-04 (evening): Nsight Compute of the BF16 decode GEMVs (main's kernels) beside cuBLAS's bf16 GEMV kernels, 8B m = 1,
# for issue 7's BF16 decode target (0.96 of cuBLAS on 8B). carry: gpu-bundle
here="$(cd "$(dirname "$0")" && pwd)"; out="$OUT"
lib="$(find / -xdev -name 'libcublas.so.1[0-9]*' -not -path '/proc/*' 2>/dev/null | head -1)"
export LD_LIBRARY_PATH="$(dirname "$lib"):${LD_LIBRARY_PATH:-}"
pack() { (cd "$out" && tar czf /tmp/all.tgz --exclude=all.tgz . && mv /tmp/all.tgz all.tgz); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$out/gpu.txt"
B="$here/bin/denseffn bench --backend cuda --shapes 8b --formats bf16 --m 1 --n 128 --quick --out /tmp/b"
timeout 200 ncu --clock-control none -k regex:'bf16_gemv|gemv|gemm' -c 12 --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,launch__grid_size,launch__block_size,launch__registers_per_thread $B > "$out/ncu-bf16-decode.txt" 2>&1; echo "ncu rc=$?"
grep -E "^  [a-zA-Z_0-9<>:, ]+\(|duration|dram__|warps_active|issue_active|long_scoreboard|grid_size|block_size|registers" "$out/ncu-bf16-decode.txt" | cut -c1-150 | head -120
pack
