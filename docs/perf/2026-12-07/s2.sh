#!/usr/bin/env bash
# 2026-12-07 s2: the landing checks of the build in bin/ (test-gpu, denseffn): every GPU test, the
# BF16 overlay test on small shapes under racecheck and memcheck, then `denseffn bench` of the
# BF16 format on 8B and 70B (not --quick: the README's figures), cuBLAS in the same process.
here="$(cd "$(dirname "$0")" && pwd)"; out="$OUT"
libs="$(find / -xdev -name 'libcublas.so.1[0-9]*' -not -path '/proc/*' 2>/dev/null)"
export LD_LIBRARY_PATH="$(dirname "$(echo "$libs" | head -1)"):${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee "$out/gpu.txt"
t() { local name=$1 lim=$2; shift 2; local s=$SECONDS; timeout "$lim" "$@" > "$out/$name.log" 2>&1; echo "== $name rc=$? $((SECONDS-s))s"; grep -E "test result|panicked|worst|FAILED|SUMMARY" "$out/$name.log" | cut -c1-200 | tail -6; }
t test-gpu ${TLIM:-240} "$here/bin/test-gpu" --test-threads=1 --nocapture
export DENSEFFN_GPU_TEST_OVERLAYS=bf16 DENSEFFN_GPU_TEST_SMALL=1
t racecheck 90 compute-sanitizer --tool racecheck "$here/bin/test-gpu" --test-threads=1 overlays_match prefill_gate_up_tail prefill_split_k
t memcheck 90 compute-sanitizer --tool memcheck "$here/bin/test-gpu" --test-threads=1 overlays_match prefill_gate_up_tail prefill_split_k
unset DENSEFFN_GPU_TEST_OVERLAYS DENSEFFN_GPU_TEST_SMALL
s=$SECONDS; timeout 150 "$here/bin/denseffn" bench --backend cuda --shapes 8b,70b --formats bf16 --out "$out/rep" > "$out/rep.log" 2>&1; echo "== bench rc=$? $((SECONDS-s))s"
cp "$out/rep/bench.md" "$out/bf16-bench.md"; cp "$out/rep/bench.json" "$out/bf16-bench.json"; rm -rf "$out/rep"; grep -E "forward|prefill" "$out/bf16-bench.md" | cut -d'|' -f2,4,5,7,8,10,11 | head -30
