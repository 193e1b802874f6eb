#!/usr/bin/env bash
# 2026-12-06: bf16-bulk with a producer warpgroup: correctness, sanitizers, A/B vs main.
here="$(cd "$(dirname "$0")" && pwd)"; out="$OUT"
libs="$(find / -xdev \( -name 'libcublas.so.1[0-9]*' -o -name 'libnccl.so.2*' \) -not -path '/proc/*' 2>/dev/null)"
export LD_LIBRARY_PATH="$(dirname "$(echo "$libs" | grep libcublas | head -1)"):${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"
t() { local name=$1 lim=$2; shift 2; local s=$SECONDS; timeout "$lim" "$@" > "$out/$name.log" 2>&1; echo "== $name rc=$? $((SECONDS-s))s"; grep -E "test result|panicked|ERROR SUMMARY|RACECHECK SUMMARY|worst|rel" "$out/$name.log" | cut -c1-200 | tail -6; }
export DENSEFFN_GPU_TEST_OVERLAYS=bf16
DENSEFFN_GPU_TEST_SMALL=1 t small 60 "$here/bin/test-gpu" --test-threads=1 --nocapture overlays_match
[ -f "$out/small.log" ] && grep -q "test result: ok" "$out/small.log" || { echo "small failed: stop"; exit 1; }
DENSEFFN_GPU_TEST_SMALL=1 t racecheck 90 compute-sanitizer --tool racecheck --racecheck-report all "$here/bin/test-gpu" --test-threads=1 overlays_match
DENSEFFN_GPU_TEST_SMALL=1 t synccheck 60 compute-sanitizer --tool synccheck "$here/bin/test-gpu" --test-threads=1 overlays_match
t full 120 "$here/bin/test-gpu" --test-threads=1 --nocapture overlays_match prefill_split_k
unset DENSEFFN_GPU_TEST_OVERLAYS
s=$SECONDS; timeout 200 bash "$here/run.sh" ab --shapes 8b,70b --formats bf16 --m 1 --n 512,4096 --quick > "$out/ab.log" 2>&1; echo "== ab rc=$? $((SECONDS-s))s"
cp -r "$here/out/"* "$out/" 2>/dev/null
grep -E "prefill|bf16" "$out/ab.md" 2>/dev/null | head -20
# Then the overlay test of the other formats on full shapes (main's kernels for them are
# unchanged on this branch), while the call has time.
for f in q2 q4k fp8; do
  [ $SECONDS -gt 330 ] && { echo "skip overlays $f: out of time"; continue; }
  DENSEFFN_GPU_TEST_OVERLAYS=$f t "overlays-$f" 110 "$here/bin/test-gpu" --test-threads=1 --nocapture overlays_match
done
