#!/usr/bin/env bash
# 2026-12-04 (night): Q2_0 dual GEMV with 3 chunks in flight and no launch bound (71 registers, no
# spill) vs 408bd01 (launch bound 3 blocks/SM, 80 registers, 8-byte spill). carry: gpu-bundle
here="$(cd "$(dirname "$0")" && pwd)"; out="$OUT"
lib="$(find / -xdev -name 'libcublas.so.1[0-9]*' -not -path '/proc/*' 2>/dev/null | head -1)"
export LD_LIBRARY_PATH="$(dirname "$lib"):${LD_LIBRARY_PATH:-}"
pack() { (cd "$out" && tar czf /tmp/all.tgz --exclude=all.tgz . && mv /tmp/all.tgz all.tgz); }
DENSEFFN_GPU_TEST_OVERLAYS=q2 DENSEFFN_GPU_TEST_SMALL=1 timeout 90 "$here/bin/test-gpu" --test-threads=1 --nocapture overlays_match > "$out/t-q2-small.log" 2>&1; echo "q2 small rc=$?"; grep -E "test result|panicked|Q2" "$out/t-q2-small.log" | cut -c1-200 | head -5
A="bench --backend cuda --shapes 8b,32b,70b --formats q2_0 --m 1,8 --n 128"
for b in denseffn-base denseffn; do timeout 100 "$here/bin/$b" $A --out "$out/$b" > "$out/$b.log" 2>&1; echo "$b rc=$?"; done
rm -f "$out"/*/*.svg
"$here/bin/denseffn" compare "$out/denseffn-base" "$out/denseffn" --out "$out/ab.md" >/dev/null; grep -E "forward|km" "$out/ab.md" | head -20
rm -f "$out"/*/bench.json
pack
