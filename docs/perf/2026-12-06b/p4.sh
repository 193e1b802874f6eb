#!/usr/bin/env bash
# 2026-12-06 p4: A/B of two chunks of wgmma in flight in the BF16 GEMM (branch bf16-depth2) vs main.
here="$(cd "$(dirname "$0")" && pwd)"; out="$OUT"
libs="$(find / -xdev -name 'libcublas.so.1[0-9]*' -not -path '/proc/*' 2>/dev/null)"
export LD_LIBRARY_PATH="$(dirname "$(echo "$libs" | head -1)"):${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"
s=$SECONDS; DENSEFFN_GPU_TEST_OVERLAYS=bf16 DENSEFFN_GPU_TEST_SMALL=1 timeout 30 "$here/bin/test-gpu" --test-threads=1 overlays_match > "$out/t.log" 2>&1; echo "== tests rc=$? $((SECONDS-s))s"; grep "test result" "$out/t.log"
s=$SECONDS; OUT="$out/ab" timeout 90 bash "$here/run.sh" ab --shapes 8b,70b --formats bf16 --m 1 --n 512,4096 --quick > "$out/ab.log" 2>&1; echo "== ab rc=$? $((SECONDS-s))s"
cp "$out/ab/ab.md" "$out/ab.md"; rm -rf "$out/ab"; grep -E "prefill" "$out/ab.md"
