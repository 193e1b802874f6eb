#!/usr/bin/env bash
# Not run yet (2026-12-05: no device lent after d1); for the next session.
# 2026-12-05: DENSEFFN_GEMV_BLOCKS_PER_SM sweep on 8B decode, main 9f23935's kernels
# (bin/denseffn-base of the d1 bundle), one process per value, cuBLAS in each. carry: gpu-bundle
here="$(cd "$(dirname "$0")" && pwd)"; out="$OUT"
lib="$(find / -xdev -name 'libcublas.so.1[0-9]*' -not -path '/proc/*' 2>/dev/null | head -1)"
export LD_LIBRARY_PATH="$(dirname "$lib"):${LD_LIBRARY_PATH:-}"
for v in auto 2 3 4 5 6 8; do
  if [ "$v" = auto ]; then unset DENSEFFN_GEMV_BLOCKS_PER_SM; else export DENSEFFN_GEMV_BLOCKS_PER_SM=$v; fi
  timeout 60 "$here/bin/denseffn-base" bench --backend cuda --shapes 8b --formats bf16,nvfp4,q4k --m 1 --n 128 --out "$out/b$v" > "$out/b$v.log" 2>&1
  echo "blocks/SM $v rc=$?"; grep -E "\| forward \|" "$out/b$v/bench.md" | awk -F'|' '{print "  "$3,$7,$12,$13}'
  rm -f "$out/b$v"/*.svg "$out/b$v"/bench.json
done
(cd "$out" && tar czf /tmp/all.tgz . && mv /tmp/all.tgz all.tgz)
