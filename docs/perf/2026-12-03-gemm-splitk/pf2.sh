#!/usr/bin/env bash
# Second GPU check of the split-K prefill GEMMs (separate *_splitk entry points), one short call
# (carry: gpu-bundle). Build: cargo xtask gpu-bundle --gpu-only --base <main before the change>;
# cp docs/perf/2026-12-03-gemm-splitk/pf2.sh gpu-bundle/. Run there: bash gpu-bundle/pf2.sh.
here="$(cd "$(dirname "$0")" && pwd)"; out="$OUT"
lib="$(find / -xdev -name 'libcublas.so.1[0-9]*' -not -path '/proc/*' 2>/dev/null | head -1)"
export LD_LIBRARY_PATH="$(dirname "$lib"):${LD_LIBRARY_PATH:-}"
T="$here/bin/test-gpu"
pack() { (cd "$out" && tar czf /tmp/all.tgz --exclude=all.tgz . && mv /tmp/all.tgz all.tgz); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$out/gpu.txt"
timeout 60 "$T" --test-threads=1 --nocapture prefill_split every_kernel > "$out/t-gpu.log" 2>&1; echo "test-gpu rc=$?"
grep -E "rel L2|test result|FAILED|panicked" "$out/t-gpu.log" | head -20
pack
A="bench --backend cuda --shapes 8b --formats nvfp4,q2_0,fp8 --m 1 --n 128,512,4096"
for b in denseffn-base denseffn; do timeout 45 "$here/bin/$b" $A --out "$out/$b" > "$out/$b.log" 2>&1; echo "$b rc=$?"; done
rm -f "$out"/*/*.svg
"$here/bin/denseffn" compare "$out/denseffn-base" "$out/denseffn" --out "$out/ab.md"
grep prefill "$out/ab.md"
pack
for tool in racecheck memcheck; do
  timeout 50 compute-sanitizer --tool $tool --error-exitcode 1 "$T" --test-threads=1 prefill_split > "$out/san-$tool.log" 2>&1; echo "$tool rc=$?"; tail -n 2 "$out/san-$tool.log"
done
pack
