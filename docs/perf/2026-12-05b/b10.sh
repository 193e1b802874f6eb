#!/usr/bin/env bash
# 2026-12-05 (session 4): the rest of main's GPU suite after b9's 240 s cap (b9 passed the 6 tests skipped here).
here="$(cd "$(dirname "$0")" && pwd)"; out="$OUT"
libs="$(find / -xdev \( -name 'libcublas.so.1[0-9]*' -o -name 'libnccl.so.2*' \) -not -path '/proc/*' 2>/dev/null)"
export LD_LIBRARY_PATH="$(dirname "$(echo "$libs" | grep libcublas | head -1)"):${LD_LIBRARY_PATH:-}"
nccl="$(echo "$libs" | grep libnccl | head -n 1)"
[ -n "$nccl" ] && mkdir -p /tmp/nccl && ln -sf "$nccl" /tmp/nccl/libnccl.so && export LD_LIBRARY_PATH="/tmp/nccl:$LD_LIBRARY_PATH"
export NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name --format=csv,noheader
S="--skip chained_paths --skip decode_matches --skip every_kernel --skip non_finite --skip nvfp4_mmq"
for f in "--skip overlays_match $S" "overlays_match"; do
  timeout 200 "$here/bin/test-gpu" --test-threads=1 $f >> "$out/t-rest.log" 2>&1; echo "rc=$?"
  grep -E "^test |test result|panicked" "$out/t-rest.log" | cut -c1-160 | tail -12
done
