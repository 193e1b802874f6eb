#!/usr/bin/env bash
# 2026-12-04 (night): bin/denseffn-pf = branch lora-pf (+ L2 prefetch of LoRA epilogue operands); branch fp8-chunk at 74a3b86 (FP8 single-projection GEMV per-tile scale; LoRA
# down shrink fused into decode gate+up) vs main c201295: GPU tests, A/B bench, sanitizers. carry: gpu-bundle
here="$(cd "$(dirname "$0")" && pwd)"; out="$OUT"
lib="$(find / -xdev -name 'libcublas.so.1[0-9]*' -not -path '/proc/*' 2>/dev/null | head -1)"
export LD_LIBRARY_PATH="$(dirname "$lib"):${LD_LIBRARY_PATH:-}"
T="$here/bin/test-gpu"; L="$here/bin/test-gpu_lora"
pack() { (cd "$out" && tar czf /tmp/all.tgz --exclude=all.tgz . && mv /tmp/all.tgz all.tgz); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$out/gpu.txt"
timeout 200 "$L" --test-threads=1 --nocapture > "$out/t-lora-full.log" 2>&1; echo "lora full rc=$?"; grep -E "test result|panicked|worst" "$out/t-lora-full.log" | cut -c1-200 | head -12
pack
timeout 150 "$T" --test-threads=1 --nocapture decode_matches verify_paths chained_paths > "$out/t-decode.log" 2>&1; echo "decode/verify rc=$?"; grep -E "test result|panicked" "$out/t-decode.log" | head -5
DENSEFFN_GPU_TEST_OVERLAYS=fp8 timeout 150 "$T" --test-threads=1 --nocapture overlays_match > "$out/t-fp8-full.log" 2>&1; echo "fp8 full rc=$?"; grep -E "test result|panicked|Fp8" "$out/t-fp8-full.log" | cut -c1-220 | head -6
pack
A="bench --backend cuda --shapes 8b,70b --formats nvfp4,nvfp4_lora16,nvfp4_lora64,fp8 --m 1,8 --n 128"
for b in denseffn-base denseffn denseffn-pf; do timeout 120 "$here/bin/$b" $A --out "$out/$b" > "$out/$b.log" 2>&1; echo "$b rc=$?"; done
rm -f "$out"/*/*.svg
"$here/bin/denseffn" compare "$out/denseffn-base" "$out/denseffn" --out "$out/ab.md" >/dev/null; grep -E "forward \||km\(" "$out/ab.md" | head -40
"$here/bin/denseffn" compare "$out/denseffn" "$out/denseffn-pf" --out "$out/ab-pf.md" >/dev/null; grep -E "lora.*forward \|" "$out/ab-pf.md" | head -8
rm -f "$out"/*/bench.json
pack
DENSEFFN_GPU_TEST_SMALL=1 timeout 100 compute-sanitizer --tool memcheck --error-exitcode 1 "$L" --test-threads=1 lora_matches > "$out/san-memcheck.log" 2>&1; echo "memcheck rc=$?"; tail -n 1 "$out/san-memcheck.log"
DENSEFFN_GPU_TEST_SMALL=1 timeout 100 compute-sanitizer --tool racecheck --error-exitcode 1 "$L" --test-threads=1 lora_matches > "$out/san-racecheck.log" 2>&1; echo "racecheck rc=$?"; tail -n 1 "$out/san-racecheck.log"
pack
