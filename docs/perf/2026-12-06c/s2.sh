#!/usr/bin/env bash
# 2026-12-06c s2: s1 cut to what fits the session's last device minutes (no ncu; the bk32 build
# tested on small shapes only): the BF16 overlay test on bf16-swap (small, then full shapes with
# the tail-split and split-K tests), the A/B of bf16-swap against main, then bf16-bk32.
here="$(cd "$(dirname "$0")" && pwd)"; out="$OUT"
libs="$(find / -xdev -name 'libcublas.so.1[0-9]*' -not -path '/proc/*' 2>/dev/null)"
export LD_LIBRARY_PATH="$(dirname "$(echo "$libs" | head -1)"):${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
t() { local name=$1 lim=$2; shift 2; local s=$SECONDS; timeout "$lim" "$@" > "$out/$name.log" 2>&1; echo "== $name rc=$? $((SECONDS-s))s"; grep -E "test result|panicked|worst|FAILED" "$out/$name.log" | cut -c1-220 | tail -8; }
export DENSEFFN_GPU_TEST_OVERLAYS=bf16
DENSEFFN_GPU_TEST_SMALL=1 t small 30 "$here/bin/test-gpu" --test-threads=1 --nocapture overlays_match
if grep -q "test result: ok" "$out/small.log"; then
  t full 80 "$here/bin/test-gpu" --test-threads=1 --nocapture overlays_match prefill_gate_up_tail prefill_split_k
  s=$SECONDS; OUT="$out/ab" timeout 110 bash "$here/run.sh" ab --shapes 8b,70b --formats bf16 --m 1 --n 128,512,4096 --quick > "$out/ab.log" 2>&1; echo "== ab rc=$? $((SECONDS-s))s"
  cp "$out/ab/ab.md" "$out/ab.md"; cp "$out/ab/ab-new/bench.md" "$out/bench-new.md"; cp "$out/ab/ab-new/bench.json" "$out/bench-new.json"; cp "$out/ab/ab-base/bench.md" "$out/bench-base.md"; rm -rf "$out/ab"
  grep -E "prefill" "$out/ab.md"; grep -E "prefill" "$out/bench-new.md" | head
fi
DENSEFFN_GPU_TEST_SMALL=1 t small-bk32 30 "$here/bin/test-gpu-bk32" --test-threads=1 --nocapture overlays_match
if grep -q "test result: ok" "$out/small-bk32.log"; then
  s=$SECONDS; timeout 60 "$here/bin/denseffn-bk32" bench --backend cuda --shapes 8b,70b --formats bf16 --m 1 --n 128,512,4096 --quick --out "$out/bk32" > "$out/bk32.log" 2>&1; echo "== bench-bk32 rc=$? $((SECONDS-s))s"
  cp "$out/bk32/bench.md" "$out/bench-bk32.md"; "$here/bin/denseffn" compare "$out/bench-new.json" "$out/bk32/bench.json" --out "$out/cmp-bk32-vs-swap.md" > /dev/null 2>&1; rm -rf "$out/bk32"
  grep -E "prefill" "$out/cmp-bk32-vs-swap.md"
fi
