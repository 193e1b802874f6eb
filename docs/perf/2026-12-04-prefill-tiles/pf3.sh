#!/usr/bin/env bash
# 2026-12-04: split-K v2 GPU check + prefill variant timing (rt1nf8, f16hack). carry: gpu-bundle
here="$(cd "$(dirname "$0")" && pwd)"; out="$OUT"
lib="$(find / -xdev -name 'libcublas.so.1[0-9]*' -not -path '/proc/*' 2>/dev/null | head -1)"
export LD_LIBRARY_PATH="$(dirname "$lib"):${LD_LIBRARY_PATH:-}"
T="$here/bin/test-gpu"
pack() { (cd "$out" && tar czf /tmp/all.tgz --exclude=all.tgz . && mv /tmp/all.tgz all.tgz); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$out/gpu.txt"
timeout 90 "$T" --test-threads=1 --nocapture prefill > "$out/t-gpu.log" 2>&1; echo "test-gpu prefill rc=$?"
grep -E "test result|FAILED|panicked" "$out/t-gpu.log" | head -20
pack
A="bench --backend cuda --shapes 8b,70b --formats nvfp4,q2_0 --m 1 --n 128,512,4096 --quick"
for b in denseffn-base denseffn denseffn-rt1nf8 denseffn-f16hack; do timeout 60 "$here/bin/$b" $A --out "$out/$b" > "$out/$b.log" 2>&1; echo "$b rc=$?"; done
rm -f "$out"/*/*.svg
for b in denseffn denseffn-rt1nf8 denseffn-f16hack; do "$here/bin/denseffn" compare "$out/denseffn-base" "$out/$b" --out "$out/ab-$b.md" >/dev/null; echo "== $b"; grep prefill "$out/ab-$b.md"; done
pack
for tool in racecheck memcheck; do
  timeout 60 compute-sanitizer --tool $tool --error-exitcode 1 "$T" --test-threads=1 prefill_split > "$out/san-$tool.log" 2>&1; echo "$tool rc=$?"; tail -n 2 "$out/san-$tool.log"
done
pack
