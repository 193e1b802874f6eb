#!/usr/bin/env bash
# 2026-12-07 s25 (≤ 200 s): s24 found the FP8 split no faster at 8B N = 512 (H100). Per kernel,
# under ncu (one process per setting): the gate+up and down GEMMs' durations, FP8 × FP8 and
# W8A16, split on / off, 8B N = 512. Bundle as s24's.
. "$(dirname "$0")/lib.sh"
for f in w8a8 fp8; do
  for s in 1 0; do
    [ $SECONDS -gt 150 ] && break
    name=ncu-$f-split$s
    env DENSEFFN_GEMM_TAIL_SPLIT=$s $([ $f = w8a8 ] && echo DENSEFFN_FFN_W8A8=1) timeout 45 ncu --metrics gpu__time_duration.sum,sm__cycles_active.avg -k regex:"(w8a8|w8a16)_gemm" -c 4 "$here/bin/denseffn" bench --backend cuda --shapes 8b --formats fp8 --m 1 --n 512 --quick > "$out/$name.txt" 2>&1; echo "== $name rc=$?"
    grep -E "^  [a-z0-9_]+_gemm|gpu__time_duration|sm__cycles_active" "$out/$name.txt" | sed -E 's/ +/ /g' | head -12
  done
done
