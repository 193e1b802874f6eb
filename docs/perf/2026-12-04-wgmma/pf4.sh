#!/usr/bin/env bash
# 2026-12-04: wgmma prefill GEMMs (NVFP4): GPU correctness, A/B vs main, sanitizers. carry: gpu-bundle
here="$(cd "$(dirname "$0")" && pwd)"; out="$OUT"
lib="$(find / -xdev -name 'libcublas.so.1[0-9]*' -not -path '/proc/*' 2>/dev/null | head -1)"
export LD_LIBRARY_PATH="$(dirname "$lib"):${LD_LIBRARY_PATH:-}"
T="$here/bin/test-gpu"
pack() { (cd "$out" && tar czf /tmp/all.tgz --exclude=all.tgz . && mv /tmp/all.tgz all.tgz); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$out/gpu.txt"
[ -f "$here/kernels.ptx" ] && ptxas -arch=sm_90a -v "$here/kernels.ptx" -o /tmp/k.cubin > "$out/ptxas13.log" 2>&1
grep -A3 "C75\|gemm_nvfp4_t_gate_up_act'\|gemm_nvfp4_t_down'" "$out/ptxas13.log" | head -20
timeout 150 "$T" --test-threads=1 --nocapture prefill > "$out/t-gpu.log" 2>&1; echo "test-gpu prefill rc=$?"
grep -E "test result|FAILED|panicked|worst|rel L2" "$out/t-gpu.log" | head -40
pack
A="bench --backend cuda --shapes 8b,70b --formats nvfp4 --m 1 --n 128,512,4096 --quick"
for b in denseffn-base denseffn; do timeout 60 "$here/bin/$b" $A --out "$out/$b" > "$out/$b.log" 2>&1; echo "$b rc=$?"; done
rm -f "$out"/*/*.svg
"$here/bin/denseffn" compare "$out/denseffn-base" "$out/denseffn" --out "$out/ab.md" >/dev/null; grep -i "prefill\|cublas" "$out/ab.md" | head -30
grep -ri "cublas" "$out/denseffn"/*.md | head -10
pack
for tool in racecheck memcheck; do
  timeout 90 compute-sanitizer --tool $tool --error-exitcode 1 "$T" --test-threads=1 prefill_split > "$out/san-$tool.log" 2>&1; echo "$tool rc=$?"; tail -n 2 "$out/san-$tool.log"
done
pack
