#!/usr/bin/env bash
# 2026-12-04 (night): Q4_K fragments in 3 instructions a register (branch q4k-frag) vs main cc8f3d3:
# full-shape Q4_K overlay tests, A/B bench; then a decode refresh of main (bin/denseffn-base) on
# every built-in shape and format with the cuBLAS anchor. carry: gpu-bundle
here="$(cd "$(dirname "$0")" && pwd)"; out="$OUT"
lib="$(find / -xdev -name 'libcublas.so.1[0-9]*' -not -path '/proc/*' 2>/dev/null | head -1)"
export LD_LIBRARY_PATH="$(dirname "$lib"):${LD_LIBRARY_PATH:-}"
T="$here/bin/test-gpu"
pack() { (cd "$out" && tar czf /tmp/all.tgz --exclude=all.tgz . && mv /tmp/all.tgz all.tgz); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$out/gpu.txt"
DENSEFFN_GPU_TEST_OVERLAYS=q4k timeout 150 "$T" --test-threads=1 --nocapture overlays_match > "$out/t-q4k-full.log" 2>&1; echo "q4k full rc=$?"; grep -E "test result|panicked|Q4k" "$out/t-q4k-full.log" | cut -c1-220 | head -6
pack
A="bench --backend cuda --shapes 8b,70b --formats q4k --m 1,2,4,8 --n 512"
for b in denseffn-base denseffn; do timeout 100 "$here/bin/$b" $A --out "$out/$b" > "$out/$b.log" 2>&1; echo "$b rc=$?"; done
rm -f "$out"/*/*.svg
"$here/bin/denseffn" compare "$out/denseffn-base" "$out/denseffn" --out "$out/ab.md" >/dev/null; grep -E "forward|km" "$out/ab.md" | head -24
rm -f "$out"/*/bench.json
pack
R="bench --backend cuda --shapes 8b,32b,70b,27b --formats nvfp4,fp8,bf16,q2_0,q4k,nvfp4_lora16,nvfp4_lora64 --m 1,8 --n 128"
timeout 240 "$here/bin/denseffn-base" $R --out "$out/refresh" > "$out/refresh.log" 2>&1; echo "refresh rc=$?"
rm -f "$out"/refresh/*.svg "$out"/refresh/bench.json
grep -E "\| forward \|" "$out/refresh/bench.md" | cut -c1-200
pack
