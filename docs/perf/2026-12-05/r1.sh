#!/usr/bin/env bash
# 2026-12-05: decode refresh of main (1517026: Q2_0 1938fbc + Q4_K 3-instruction fragments) on every
# built-in shape and format, with the cuBLAS anchor in the same run, for the README table.
# Bundle: `cargo xtask gpu-bundle --gpu-only`. carry: gpu-bundle
here="$(cd "$(dirname "$0")" && pwd)"; out="$OUT"
lib="$(find / -xdev -name 'libcublas.so.1[0-9]*' -not -path '/proc/*' 2>/dev/null | head -1)"
export LD_LIBRARY_PATH="$(dirname "$lib"):${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$out/gpu.txt"
R="bench --backend cuda --shapes 8b,32b,70b,27b --formats nvfp4,fp8,bf16,q2_0,q4k,nvfp4_lora16,nvfp4_lora64 --m 1,8 --n 128"
timeout 300 "$here/bin/denseffn" $R --out "$out/refresh" > "$out/refresh.log" 2>&1; echo "refresh rc=$?"
rm -f "$out"/refresh/*.svg
grep -E "\| forward \|" "$out/refresh/bench.md" | cut -c1-200
