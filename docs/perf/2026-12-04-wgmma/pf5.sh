#!/usr/bin/env bash
# 2026-12-04: every prefill GEMM on wgmma: all GPU tests, A/B vs daf4a3f (mma.sync), sanitizers. carry: gpu-bundle
here="$(cd "$(dirname "$0")" && pwd)"; out="$OUT"
lib="$(find / -xdev -name 'libcublas.so.1[0-9]*' -not -path '/proc/*' 2>/dev/null | head -1)"
export LD_LIBRARY_PATH="$(dirname "$lib"):${LD_LIBRARY_PATH:-}"
T="$here/bin/test-gpu"
pack() { (cd "$out" && tar czf /tmp/all.tgz --exclude=all.tgz . && mv /tmp/all.tgz all.tgz); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$out/gpu.txt"
timeout 240 "$T" --test-threads=1 --nocapture > "$out/t-gpu.log" 2>&1; echo "test-gpu rc=$?"
grep -E "^test |test result|FAILED|panicked" "$out/t-gpu.log" | head -40
timeout 60 "$here/bin/test-gpu_lora" --test-threads=1 > "$out/t-gpu_lora.log" 2>&1; echo "test-gpu_lora rc=$?"; grep -E "test result|FAILED" "$out/t-gpu_lora.log"
pack
A="bench --backend cuda --shapes 8b,70b --formats bf16,fp8,q2_0,q4k --m 1 --n 512,4096 --quick"
for b in denseffn-base denseffn; do timeout 100 "$here/bin/$b" $A --out "$out/$b" > "$out/$b.log" 2>&1; echo "$b rc=$?"; done
rm -f "$out"/*/*.svg
"$here/bin/denseffn" compare "$out/denseffn-base" "$out/denseffn" --out "$out/ab.md" >/dev/null; grep -i "prefill" "$out/ab.md" | head -30
grep -A20 "| model | format | path | N |" "$out/denseffn/bench.md" | head -20
pack
for tool in racecheck memcheck; do
  timeout 90 compute-sanitizer --tool $tool --error-exitcode 1 "$T" --test-threads=1 prefill_split > "$out/san-$tool.log" 2>&1; echo "$tool rc=$?"; tail -n 2 "$out/san-$tool.log"
done
pack
