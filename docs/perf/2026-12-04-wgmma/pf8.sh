#!/usr/bin/env bash
# 2026-12-04: f16 scaled activations (branch f16x) vs main bad0384: A/B prefill, GPU tests, sanitizers. carry: gpu-bundle
here="$(cd "$(dirname "$0")" && pwd)"; out="$OUT"
lib="$(find / -xdev -name 'libcublas.so.1[0-9]*' -not -path '/proc/*' 2>/dev/null | head -1)"
export LD_LIBRARY_PATH="$(dirname "$lib"):${LD_LIBRARY_PATH:-}"
T="$here/bin/test-gpu"
pack() { (cd "$out" && tar czf /tmp/all.tgz --exclude=all.tgz . && mv /tmp/all.tgz all.tgz); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$out/gpu.txt"
timeout 45 "$T" --test-threads=1 --nocapture prefill > "$out/t-gpu-prefill.log" 2>&1; echo "test-gpu prefill rc=$?"; grep -E "test result|FAILED|panicked|worst" "$out/t-gpu-prefill.log" | head
DENSEFFN_GPU_TEST_SMALL=1 timeout 60 "$T" --test-threads=1 --nocapture overlays_match > "$out/t-gpu-overlays-small.log" 2>&1; echo "test-gpu overlays (small) rc=$?"; grep -E "test result|FAILED|panicked" "$out/t-gpu-overlays-small.log" | head
timeout 60 "$T" --test-threads=1 --nocapture nvfp4_mmq_matches non_finite every_kernel > "$out/t-gpu-misc.log" 2>&1; echo "test-gpu mmq/non-finite/entry points rc=$?"; grep -E "^test |test result|FAILED|panicked|worst" "$out/t-gpu-misc.log" | cut -c1-200 | head
pack
A="bench --backend cuda --shapes 8b,70b --formats nvfp4,bf16,fp8,q2_0,q4k --m 1 --n 512,4096 --quick"
for b in denseffn-base denseffn; do timeout 100 "$here/bin/$b" $A --out "$out/$b" > "$out/$b.log" 2>&1; echo "$b rc=$?"; done
rm -f "$out"/*/*.svg
"$here/bin/denseffn" compare "$out/denseffn-base" "$out/denseffn" --out "$out/ab.md" >/dev/null; grep -i "prefill" "$out/ab.md" | head -30
grep -A22 "| model | format | path | N |" "$out/denseffn/bench.md" | head -24
pack
[ -x "$here/bin/bench-prefill" ] && { DENSEFFN_BENCH_OUT="$out/bench-prefill.md" timeout 110 "$here/bin/bench-prefill" --bench > "$out/bench-prefill.log" 2>&1; echo "bench-prefill (criterion) rc=$?"; cat "$out/bench-prefill.md" | head -30; }
pack
timeout 80 "$here/bin/test-gpu_lora" --test-threads=1 --nocapture > "$out/t-gpu_lora.log" 2>&1; echo "test-gpu_lora rc=$?"; grep -E "^test |test result|FAILED|panicked|worst" "$out/t-gpu_lora.log" | cut -c1-200 | head -20
pack
for tool in racecheck memcheck; do
  timeout 60 compute-sanitizer --tool $tool --error-exitcode 1 "$T" --test-threads=1 prefill_split > "$out/san-$tool.log" 2>&1; echo "$tool rc=$?"; tail -n 2 "$out/san-$tool.log"
done
pack
