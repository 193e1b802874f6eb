#!/usr/bin/env bash
# 2026-12-04 (evening): bf16_gemv with launch bounds (64 registers, 4 blocks/SM; branch bf16-lb) vs main 7e41a4c:
# A/B decode of the BF16 overlay, GPU overlay tests (small), memcheck. carry: gpu-bundle
here="$(cd "$(dirname "$0")" && pwd)"; out="$OUT"
lib="$(find / -xdev -name 'libcublas.so.1[0-9]*' -not -path '/proc/*' 2>/dev/null | head -1)"
export LD_LIBRARY_PATH="$(dirname "$lib"):${LD_LIBRARY_PATH:-}"
T="$here/bin/test-gpu"
pack() { (cd "$out" && tar czf /tmp/all.tgz --exclude=all.tgz . && mv /tmp/all.tgz all.tgz); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$out/gpu.txt"
DENSEFFN_GPU_TEST_SMALL=1 timeout 60 "$T" --test-threads=1 --nocapture overlays_match > "$out/t-gpu-overlays-small.log" 2>&1; echo "test-gpu overlays (small) rc=$?"; grep -E "test result|FAILED|panicked|Bf16" "$out/t-gpu-overlays-small.log" | cut -c1-200 | head
A="bench --backend cuda --shapes 8b,32b,70b --formats bf16 --m 1,2,4,8 --n 128 --quick"
for b in denseffn-base denseffn; do timeout 100 "$here/bin/$b" $A --out "$out/$b" > "$out/$b.log" 2>&1; echo "$b rc=$?"; done
rm -f "$out"/*/*.svg
"$here/bin/denseffn" compare "$out/denseffn-base" "$out/denseffn" --out "$out/ab.md" >/dev/null; grep -E "forward|km" "$out/ab.md" | head -30
grep -E "\| forward \|" "$out/denseffn/bench.md" "$out/denseffn-base/bench.md" | cut -c1-220
rm -f "$out"/*/bench.json
pack
DENSEFFN_GPU_TEST_SMALL=1 timeout 60 compute-sanitizer --tool memcheck --error-exitcode 1 "$T" --test-threads=1 overlays_match > "$out/san-memcheck.log" 2>&1; echo "memcheck rc=$?"; tail -n 1 "$out/san-memcheck.log"
pack
