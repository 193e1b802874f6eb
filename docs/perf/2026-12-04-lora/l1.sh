#!/usr/bin/env bash
# 2026-12-04 (night): LoRA decode overhead ablation on branch lora-abl (hack, not landed):
# DENSEFFN_X_NO_SHRINK2 (down's shrink skipped: wrong results, timing bound for a fused shrink),
# DENSEFFN_X_SHRINK2_PDL (down's shrink launched as gate+up's dependent, waiting first). carry: gpu-bundle
here="$(cd "$(dirname "$0")" && pwd)"; out="$OUT"
lib="$(find / -xdev -name 'libcublas.so.1[0-9]*' -not -path '/proc/*' 2>/dev/null | head -1)"
export LD_LIBRARY_PATH="$(dirname "$lib"):${LD_LIBRARY_PATH:-}"
pack() { (cd "$out" && tar czf /tmp/all.tgz --exclude=all.tgz . && mv /tmp/all.tgz all.tgz); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$out/gpu.txt"
A="bench --backend cuda --shapes 8b --formats nvfp4,nvfp4_lora16,nvfp4_lora64 --m 1,8 --n 128"
timeout 80 "$here/bin/denseffn-base" $A --out "$out/base" > "$out/base.log" 2>&1; echo "base rc=$?"
timeout 80 "$here/bin/denseffn" $A --out "$out/new" > "$out/new.log" 2>&1; echo "new rc=$?"
DENSEFFN_X_NO_SHRINK2=1 timeout 80 "$here/bin/denseffn" $A --out "$out/noshrink2" > "$out/noshrink2.log" 2>&1; echo "noshrink2 rc=$?"
DENSEFFN_X_SHRINK2_PDL=1 timeout 80 "$here/bin/denseffn" $A --out "$out/pdl2" > "$out/pdl2.log" 2>&1; echo "pdl2 rc=$?"
rm -f "$out"/*/*.svg
for v in new noshrink2 pdl2; do "$here/bin/denseffn" compare "$out/base" "$out/$v" --out "$out/ab-$v.md" >/dev/null; echo "== $v"; grep -E "forward|km" "$out/ab-$v.md" | head -12; done
rm -f "$out"/*/bench.json
pack
DENSEFFN_X_SHRINK2_PDL=1 DENSEFFN_GPU_TEST_SMALL=1 timeout 120 "$here/bin/test-gpu_lora" --test-threads=1 > "$out/t-lora-pdl2.log" 2>&1; echo "lora tests pdl2 rc=$?"; grep -E "test result|FAILED|panicked" "$out/t-lora-pdl2.log" | head
pack
