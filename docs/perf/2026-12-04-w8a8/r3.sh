#!/usr/bin/env bash
# 2026-12-04 (evening): FP8 x FP8 prefill arm (branch w8a8, stage i+1 opened under stage i's products): GPU tests, sanitizers, bench vs the W8A16 arm and cuBLAS. carry: gpu-bundle
here="$(cd "$(dirname "$0")" && pwd)"; out="$OUT"
lib="$(find / -xdev -name 'libcublas.so.1[0-9]*' -not -path '/proc/*' 2>/dev/null | head -1)"
export LD_LIBRARY_PATH="$(dirname "$lib"):${LD_LIBRARY_PATH:-}"
T="$here/bin/test-gpu"
pack() { (cd "$out" && tar czf /tmp/all.tgz --exclude=all.tgz . && mv /tmp/all.tgz all.tgz); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$out/gpu.txt"
DENSEFFN_GPU_TEST_SMALL=1 timeout 60 "$T" --test-threads=1 --nocapture w8a8 > "$out/t-gpu-w8a8-small.log" 2>&1; echo "test-gpu w8a8 (small) rc=$?"; grep -E "test result|FAILED|panicked|worst|differing" "$out/t-gpu-w8a8-small.log" | cut -c1-300 | head
pack
A="bench --backend cuda --shapes 8b,70b --formats fp8,fp8_w8a8 --m 1 --n 128,512,2048,4096 --quick"
timeout 120 "$here/bin/denseffn" $A --out "$out/bench" > "$out/bench.log" 2>&1; echo "bench rc=$?"
rm -f "$out"/*/*.svg
grep -A20 "| model | format | path | N |" "$out/bench/bench.md" | head -22
pack
timeout 90 "$T" --test-threads=1 --nocapture w8a8 > "$out/t-gpu-w8a8.log" 2>&1; echo "test-gpu w8a8 (full) rc=$?"; grep -E "test result|FAILED|panicked|worst|differing" "$out/t-gpu-w8a8.log" | cut -c1-300 | head
pack
for tool in racecheck memcheck; do
  DENSEFFN_GPU_TEST_SMALL=1 timeout 90 compute-sanitizer --tool $tool --error-exitcode 1 "$T" --test-threads=1 w8a8 > "$out/san-$tool.log" 2>&1; echo "$tool rc=$?"; tail -n 2 "$out/san-$tool.log"
done
pack
