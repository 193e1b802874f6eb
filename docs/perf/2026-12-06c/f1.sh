#!/usr/bin/env bash
# 2026-12-06c f1: the GPU tests of the landing build (every test but the per-format overlay test,
# which s1 ran for BF16), then `denseffn bench` on every shape and format, one process a shape.
here="$(cd "$(dirname "$0")" && pwd)"; out="$OUT"
libs="$(find / -xdev -name 'libcublas.so.1[0-9]*' -not -path '/proc/*' 2>/dev/null)"
export LD_LIBRARY_PATH="$(dirname "$(echo "$libs" | head -1)"):${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
[ "${TEST:-test-gpu}" != none ] && s=$SECONDS && timeout ${TLIM:-200} "$here/bin/${TEST:-test-gpu}" --test-threads=1 --nocapture --skip overlays_match > "$out/test-gpu.log" 2>&1
echo "== test-gpu rc=$? $((SECONDS-s))s"; grep -E "test result|panicked|FAILED" "$out/test-gpu.log" | tail -5
for sh in ${SHAPES:-8b 70b 32b 27b}; do
  st=$SECONDS; timeout ${LIM:-85} "$here/bin/${BIN:-denseffn}" bench --backend cuda --shapes $sh --m 1,8 --n 128,512,4096 --out "$out/rep-$sh" > "$out/rep-$sh.log" 2>&1
  echo "== bench $sh rc=$? $((SECONDS-st))s"
  cp "$out/rep-$sh/bench.md" "$out/$sh-bench.md"; cp "$out/rep-$sh/bench.json" "$out/$sh-bench.json"; cp "$out/rep-$sh/"*.svg "$out/" 2>/dev/null; rm -rf "$out/rep-$sh"
done
