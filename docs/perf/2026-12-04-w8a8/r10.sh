#!/usr/bin/env bash
# 2026-12-04 (evening): BF16 decode on every model shape (main d85a4cb = bin/denseffn of the r9 bundle), cuBLAS in the same run. carry: gpu-bundle
here="$(cd "$(dirname "$0")" && pwd)"; out="$OUT"
lib="$(find / -xdev -name 'libcublas.so.1[0-9]*' -not -path '/proc/*' 2>/dev/null | head -1)"
export LD_LIBRARY_PATH="$(dirname "$lib"):${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$out/gpu.txt"
timeout 150 "$here/bin/denseffn" bench --backend cuda --shapes all --formats bf16 --m 1 --n 128 --quick --out "$out/bench" > "$out/bench.log" 2>&1; echo "bench rc=$?"
rm -f "$out"/bench/*.svg "$out"/bench/bench.json
grep -E "\| forward \|" "$out/bench/bench.md" | cut -c1-200
