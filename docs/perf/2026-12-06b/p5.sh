#!/usr/bin/env bash
# 2026-12-06 p5: branch bf16-pfence (producer-side proxy fence) vs main: correctness, racecheck, A/B.
here="$(cd "$(dirname "$0")" && pwd)"; out="$OUT"
libs="$(find / -xdev -name 'libcublas.so.1[0-9]*' -not -path '/proc/*' 2>/dev/null)"
export LD_LIBRARY_PATH="$(dirname "$(echo "$libs" | head -1)"):${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"
t() { local name=$1 lim=$2; shift 2; local s=$SECONDS; timeout "$lim" "$@" > "$out/$name.log" 2>&1; echo "== $name rc=$? $((SECONDS-s))s"; grep -E "test result|RACECHECK SUMMARY|SYNCCHECK|ERROR SUMMARY" "$out/$name.log" | tail -3; }
export DENSEFFN_GPU_TEST_OVERLAYS=bf16 DENSEFFN_GPU_TEST_SMALL=1
t small 30 "$here/bin/test-gpu" --test-threads=1 overlays_match prefill_gate_up_tail
grep -q "test result: ok" "$out/small.log" || { echo "failed: stop"; exit 1; }
t racecheck 40 compute-sanitizer --tool racecheck --racecheck-report all "$here/bin/test-gpu" --test-threads=1 overlays_match
for sh in 8b 70b; do
  s=$SECONDS; OUT="$out/ab-$sh" timeout 60 bash "$here/run.sh" ab --shapes $sh --formats bf16 --m 1 --n 512,4096 --quick > "$out/ab-$sh.log" 2>&1; echo "== ab $sh rc=$? $((SECONDS-s))s"
  cp "$out/ab-$sh/ab.md" "$out/ab-$sh.md"; grep -E "prefill" "$out/ab-$sh/ab-new/bench.md"; rm -rf "$out/ab-$sh"; grep -E "prefill" "$out/ab-$sh.md"
done
