#!/usr/bin/env bash
# 2026-12-05: dual gate+up GEMV loads its first chunks before staging (branch dual-preload) vs main
# 9f23935 (`cargo xtask gpu-bundle --gpu-only --base main`): GPU tests on small shapes, the base
# binary on 8B/70B, and the new binary on every built-in shape and format (the README refresh).
# carry: gpu-bundle
here="$(cd "$(dirname "$0")" && pwd)"; out="$OUT"
lib="$(find / -xdev -name 'libcublas.so.1[0-9]*' -not -path '/proc/*' 2>/dev/null | head -1)"
export LD_LIBRARY_PATH="$(dirname "$lib"):${LD_LIBRARY_PATH:-}"
pack() { (cd "$out" && tar czf /tmp/all.tgz --exclude=all.tgz . && mv /tmp/all.tgz all.tgz); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$out/gpu.txt"
for t in test-gpu test-gpu_lora; do DENSEFFN_GPU_TEST_SMALL=1 timeout 120 "$here/bin/$t" --test-threads=1 > "$out/$t.log" 2>&1; echo "$t rc=$?"; grep -E "test result|panicked|FAILED" "$out/$t.log" | cut -c1-200 | head -5; done
pack
A="bench --backend cuda --shapes 8b,70b --formats nvfp4,fp8,bf16,q2_0,q4k --m 1,8 --n 128"
timeout 120 "$here/bin/denseffn-base" $A --out "$out/base" > "$out/base.log" 2>&1; echo "base rc=$?"
R="bench --backend cuda --shapes 8b,32b,70b,27b --formats nvfp4,fp8,bf16,q2_0,q4k,nvfp4_lora16,nvfp4_lora64 --m 1,8 --n 128"
timeout 300 "$here/bin/denseffn" $R --out "$out/new" > "$out/new.log" 2>&1; echo "new rc=$?"
rm -f "$out"/*/*.svg
"$here/bin/denseffn" compare "$out/base" "$out/new" --out "$out/ab.md" >/dev/null; grep -E "\| forward|km" "$out/ab.md" | cut -c1-150 | head -40
rm -f "$out"/*/bench.json
pack
