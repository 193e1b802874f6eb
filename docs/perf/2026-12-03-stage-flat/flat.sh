#!/usr/bin/env bash
# GPU check + A/B of the flattened GEMV staging, in one device call (carry: gpu-bundle). Build here:
#   cargo xtask gpu-bundle --gpu-only --base <main before the change>
#   cp docs/perf/2026-12-03-stage-flat/*.sh docs/perf/2026-12-03-km-packed/km.sh gpu-bundle/
# Run there: bash gpu-bundle/flat.sh  (tests + sanitizers via km.sh, then base-vs-new bench, then prof.sh).
here="$(cd "$(dirname "$0")" && pwd)"; out="$OUT"
bash "$here/km.sh" tests+san
lib="$(find / -xdev -name 'libcublas.so.1[0-9]*' -not -path '/proc/*' 2>/dev/null | head -1)"
export LD_LIBRARY_PATH="$(dirname "$lib"):${LD_LIBRARY_PATH:-}"
A="--backend cuda --shapes 8b,70b --formats nvfp4,q4k,fp8,q2_0 --m 1,2,3,4,5,8 --n 128"
timeout 160 "$here/bin/denseffn-base" bench $A --out "$out/ab-base" > "$out/ab-base.log" 2>&1; echo "base rc=$?"
timeout 160 "$here/bin/denseffn" bench $A --out "$out/ab-new" > "$out/ab-new.log" 2>&1; echo "new rc=$?"
"$here/bin/denseffn" compare "$out/ab-base" "$out/ab-new" --out "$out/ab.md"
grep -E "forward" "$out/ab.md" | grep -v prefill
rm -f "$out"/ab-*/*.svg
bash "$here/prof.sh"
