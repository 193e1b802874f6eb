#!/usr/bin/env bash
# 2026-12-07 s7: s6 with --quick benches (~240 s), for the last device seconds: pt (persistent + TMA activations)
# small then full BF16 tests; `denseffn bench` main and pt (bf16, 8B and 70B, N 512/4096).
here="$(cd "$(dirname "$0")" && pwd)"; out="$OUT"
libs="$(find / -xdev -name 'libcublas.so.1[0-9]*' -not -path '/proc/*' 2>/dev/null)"
export LD_LIBRARY_PATH="$(dirname "$(echo "$libs" | head -1)"):${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee "$out/gpu.txt"
t() { local name=$1 lim=$2; shift 2; local s=$SECONDS; timeout "$lim" "$@" > "$out/$name.log" 2>&1; echo "== $name rc=$? $((SECONDS-s))s"; grep -E "test result|panicked|worst|FAILED" "$out/$name.log" | cut -c1-200 | tail -6; }
b() { local name=$1 lim=$2; shift 2; local s=$SECONDS; timeout "$lim" "$here/bin/denseffn$name" bench --backend cuda --formats bf16 --m 1 --out "$out/b$name" "$@" > "$out/bench$name.log" 2>&1; echo "== bench$name rc=$? $((SECONDS-s))s"; cp "$out/b$name/bench.md" "$out/bench$name.md"; cp "$out/b$name/bench.json" "$out/bench$name.json"; rm -rf "$out/b$name"; grep -E "prefill" "$out/bench$name.md" | cut -d'|' -f2,5,7,8,10,11; }
export DENSEFFN_GPU_TEST_OVERLAYS=bf16
DENSEFFN_GPU_TEST_SMALL=1 t small-pt 40 "$here/bin/test-gpu-pt" --test-threads=1 --nocapture overlays_match prefill_gate_up_tail
grep -q "test result: ok" "$out/small-pt.log" && t full-pt 130 "$here/bin/test-gpu-pt" --test-threads=1 --nocapture overlays_match prefill_gate_up_tail prefill_split_k every_kernel prefill_matches
b "" 40 --quick --shapes 8b,70b --n 512,4096
b -pt 40 --quick --shapes 8b,70b --n 512,4096
"$here/bin/denseffn" compare "$out/bench.json" "$out/bench-pt.json" --out "$out/cmp-pt.md" > /dev/null 2>&1; grep -E "prefill" "$out/cmp-pt.md" | head -8
