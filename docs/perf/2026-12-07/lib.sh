# Shared by the 2026-12-07 device scripts (s1, s3–s6), sourced from the bundle folder: `here`
# (the bundle), `out` ($OUT), cuBLAS on the library path, the GPU's name in gpu.txt, and
#   t NAME LIMIT CMD…  — runs CMD with a time limit into NAME.log, prints rc, time, test results;
#   b SUFFIX LIMIT ARGS… — `bin/denseffn<SUFFIX> bench` (bf16, m = 1, cuBLAS in the process) into
#                          bench<SUFFIX>.{md,json}, prints the prefill rows.
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"; out="$OUT"
libs="$(find / -xdev -name 'libcublas.so.1[0-9]*' -not -path '/proc/*' 2>/dev/null)"
export LD_LIBRARY_PATH="$(dirname "$(echo "$libs" | head -1)"):${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee "$out/gpu.txt"
t() { local name=$1 lim=$2; shift 2; local s=$SECONDS; timeout "$lim" "$@" > "$out/$name.log" 2>&1; echo "== $name rc=$? $((SECONDS-s))s"; grep -E "test result|panicked|worst|FAILED" "$out/$name.log" | cut -c1-200 | tail -6; }
b() { local name=$1 lim=$2; shift 2; local s=$SECONDS; timeout "$lim" "$here/bin/denseffn$name" bench --backend cuda --formats bf16 --m 1 --out "$out/b$name" "$@" > "$out/bench$name.log" 2>&1; echo "== bench$name rc=$? $((SECONDS-s))s"; cp "$out/b$name/bench.md" "$out/bench$name.md"; cp "$out/b$name/bench.json" "$out/bench$name.json"; rm -rf "$out/b$name"; grep -E "prefill" "$out/bench$name.md" | cut -d'|' -f2,5,7,8,10,11; }
