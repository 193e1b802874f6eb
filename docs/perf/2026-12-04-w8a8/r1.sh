#!/usr/bin/env bash
# 2026-12-04 (evening): grouped block order of the wgmma prefill GEMMs (branch raster) vs main 6b1463e:
# A/B prefill, GPU prefill/overlay/LoRA tests. carry: gpu-bundle
here="$(cd "$(dirname "$0")" && pwd)"; out="$OUT"
lib="$(find / -xdev -name 'libcublas.so.1[0-9]*' -not -path '/proc/*' 2>/dev/null | head -1)"
export LD_LIBRARY_PATH="$(dirname "$lib"):${LD_LIBRARY_PATH:-}"
T="$here/bin/test-gpu"
pack() { (cd "$out" && tar czf /tmp/all.tgz --exclude=all.tgz . && mv /tmp/all.tgz all.tgz); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$out/gpu.txt"
A="bench --backend cuda --shapes 8b,70b --formats nvfp4,bf16,fp8,q2_0,q4k --m 1 --n 512,4096 --quick"
for b in denseffn-base denseffn; do timeout 100 "$here/bin/$b" $A --out "$out/$b" > "$out/$b.log" 2>&1; echo "$b rc=$?"; done
rm -f "$out"/*/*.svg
"$here/bin/denseffn" compare "$out/denseffn-base" "$out/denseffn" --out "$out/ab.md" >/dev/null; grep -i "prefill" "$out/ab.md" | head -30
grep -A22 "| model | format | path | N |" "$out/denseffn/bench.md" | head -24
pack
timeout 45 "$T" --test-threads=1 --nocapture prefill > "$out/t-gpu-prefill.log" 2>&1; echo "test-gpu prefill rc=$?"; grep -E "test result|FAILED|panicked|worst" "$out/t-gpu-prefill.log" | head
DENSEFFN_GPU_TEST_SMALL=1 timeout 60 "$T" --test-threads=1 --nocapture overlays_match > "$out/t-gpu-overlays-small.log" 2>&1; echo "test-gpu overlays (small) rc=$?"; grep -E "test result|FAILED|panicked" "$out/t-gpu-overlays-small.log" | head
pack
timeout 100 "$here/bin/test-gpu_lora" --test-threads=1 --nocapture > "$out/t-gpu_lora.log" 2>&1; echo "test-gpu_lora rc=$?"; grep -E "^test |test result|FAILED|panicked|worst" "$out/t-gpu_lora.log" | cut -c1-200 | head -20
pack
