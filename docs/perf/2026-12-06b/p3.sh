#!/usr/bin/env bash
# 2026-12-06 p3: ncu of main's BF16 prefill GEMMs (bin/denseffn-base, 8B N = 4096), then the A/B
# of two chunks of wgmma in flight (branch bf16-depth2) against main.
here="$(cd "$(dirname "$0")" && pwd)"; out="$OUT"
libs="$(find / -xdev -name 'libcublas.so.1[0-9]*' -not -path '/proc/*' 2>/dev/null)"
export LD_LIBRARY_PATH="$(dirname "$(echo "$libs" | head -1)"):${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"
sec="--section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section WarpStateStats"
s=$SECONDS
timeout 150 ncu $sec -k 'regex:^bf16_gemm' --launch-count 2 "$here/bin/denseffn-base" bench --backend cuda --quick --shapes 8b --formats bf16 --m 1 --n 4096 --out /tmp/r1 > "$out/ncu-ours.txt" 2>&1
echo "== ncu rc=$? $((SECONDS-s))s"
grep -vE "^==PROF==|^    -+ |^\s*$" "$out/ncu-ours.txt" | grep -E "^  [a-zA-Z_0-9]+.*\(|Duration|Throughput|Pipe|Busy|Eligible|Issued|Bank|Shared|Stall|Hit" | head -70
s=$SECONDS; "$here/bin/test-gpu" --test-threads=1 prefill_gate_up_tail prefill_split_k > "$out/t.log" 2>&1; echo "== tests rc=$? $((SECONDS-s))s"; grep "test result" "$out/t.log"
s=$SECONDS; OUT="$out/ab" timeout 150 bash "$here/run.sh" ab --shapes 8b,70b --formats bf16 --m 1 --n 512,4096 --quick > "$out/ab.log" 2>&1; echo "== ab rc=$? $((SECONDS-s))s"
cp "$out/ab/ab.md" "$out/ab.md"; cp "$out/ab/ab-new/bench.md" "$out/bench-new.md"; rm -rf "$out/ab"
grep -E "prefill" "$out/ab.md"; grep -E "prefill" "$out/bench-new.md" | head
