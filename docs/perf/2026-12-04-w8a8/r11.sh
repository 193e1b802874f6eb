#!/usr/bin/env bash
# 2026-12-04 (evening): w8a8 down with double-buffered per-stage accumulators (branch w8a8-db) vs main cb81cc1:
# GPU test (small shapes: odd and even stage counts), A/B bench, full-shape test if time is left. carry: gpu-bundle
here="$(cd "$(dirname "$0")" && pwd)"; out="$OUT"
lib="$(find / -xdev -name 'libcublas.so.1[0-9]*' -not -path '/proc/*' 2>/dev/null | head -1)"
export LD_LIBRARY_PATH="$(dirname "$lib"):${LD_LIBRARY_PATH:-}"
T="$here/bin/test-gpu"
pack() { (cd "$out" && tar czf /tmp/all.tgz --exclude=all.tgz . && mv /tmp/all.tgz all.tgz); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$out/gpu.txt"
DENSEFFN_GPU_TEST_SMALL=1 timeout 40 "$T" --test-threads=1 --nocapture w8a8 > "$out/t-gpu-w8a8-small.log" 2>&1; echo "test-gpu w8a8 (small) rc=$?"; grep -E "test result|FAILED|panicked|worst" "$out/t-gpu-w8a8-small.log" | cut -c1-200 | head
A="bench --backend cuda --shapes 8b,70b --formats fp8_w8a8 --m 1 --n 512,4096 --quick"
for b in denseffn-base denseffn; do timeout 70 "$here/bin/$b" $A --out "$out/$b" > "$out/$b.log" 2>&1; echo "$b rc=$?"; done
rm -f "$out"/*/*.svg
"$here/bin/denseffn" compare "$out/denseffn-base" "$out/denseffn" --out "$out/ab.md" >/dev/null; grep -i "prefill" "$out/ab.md" | head
rm -f "$out"/*/bench.json
pack
timeout 80 "$T" --test-threads=1 --nocapture w8a8 > "$out/t-gpu-w8a8.log" 2>&1; echo "test-gpu w8a8 (full) rc=$?"; grep -E "test result|FAILED|panicked|worst" "$out/t-gpu-w8a8.log" | cut -c1-200 | head
pack
