#!/usr/bin/env bash
# 2026-12-06c h1: every GPU test of main on full shapes (the overlay test one format a process),
# then ncu of main's two BF16 prefill GEMMs (8B, N = 4096).
here="$(cd "$(dirname "$0")" && pwd)"; out="$OUT"
libs="$(find / -xdev \( -name 'libcublas.so.1[0-9]*' -o -name 'libnccl.so.2*' \) -not -path '/proc/*' 2>/dev/null)"
export LD_LIBRARY_PATH="$(dirname "$(echo "$libs" | grep libcublas | head -1)"):$(dirname "$(echo "$libs" | grep libnccl | head -1)"):${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
t() { local name=$1 lim=$2; shift 2; local s=$SECONDS; timeout "$lim" "$@" > "$out/$name.log" 2>&1; echo "== $name rc=$? $((SECONDS-s))s"; grep -E "test result|panicked|FAILED|failed" "$out/$name.log" | cut -c1-200 | tail -8; }
t test-gpu 250 "$here/bin/test-gpu" --test-threads=1 --nocapture --skip overlays_match
t test-gpu_lora 60 "$here/bin/test-gpu_lora" --test-threads=1 --nocapture
for f in q2 q4k fp8 bf16; do DENSEFFN_GPU_TEST_OVERLAYS=$f t overlays-$f 55 "$here/bin/test-gpu" --test-threads=1 --nocapture overlays_match; done
sec="--section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy"
s=$SECONDS
timeout 70 ncu $sec -k 'regex:^bf16_gemm' --launch-count 2 "$here/bin/denseffn" bench --backend cuda --quick --shapes 8b --formats bf16 --m 1 --n 4096 --out /tmp/r1 > "$out/ncu-bf16.txt" 2>&1
echo "== ncu rc=$? $((SECONDS-s))s"
grep -E "^  [a-zA-Z_0-9]+.*\(|Duration|Throughput|Pipe|Busy|Eligible|Issued|Bank|Stall|Hit Rate|Occupancy" "$out/ncu-bf16.txt" | head -60
