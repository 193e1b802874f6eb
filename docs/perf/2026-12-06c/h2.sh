#!/usr/bin/env bash
# 2026-12-06c h2: the full `denseffn bench` report of main, one process per shape
# (= `bash gpu-bundle/run.sh report --shapes S`), every format, default m and N.
here="$(cd "$(dirname "$0")" && pwd)"; out="$OUT"
libs="$(find / -xdev -name 'libcublas.so.1[0-9]*' -not -path '/proc/*' 2>/dev/null)"
export LD_LIBRARY_PATH="$(dirname "$(echo "$libs" | head -1)"):${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
for s in ${SHAPES:-8b 70b 32b 27b}; do
  st=$SECONDS; timeout ${LIM:-135} "$here/bin/denseffn" bench --backend cuda --shapes $s --out "$out/rep-$s" > "$out/rep-$s.log" 2>&1
  echo "== $s rc=$? $((SECONDS-st))s"
  cp "$out/rep-$s/bench.md" "$out/$s-bench.md"; cp "$out/rep-$s/bench.json" "$out/$s-bench.json"; cp "$out/rep-$s/"*.svg "$out/" 2>/dev/null; rm -rf "$out/rep-$s"
done
