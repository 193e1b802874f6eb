#!/usr/bin/env bash
# Per-kernel durations of forward_km's GEMVs under ncu (kernels serialized, so no PDL overlap;
# ncu's locked clocks make them longer than the bench's), 70B and 8B NVFP4 at m = 1, 5, 8.
# Three launches per call in order: gate (staged), up (packed, gate's plan), down (packed).
here="$(cd "$(dirname "$0")" && pwd)"; out="$OUT"; D="$here/bin/denseffn"
M="--metrics gpu__time_duration.sum,launch__grid_size,launch__registers_per_thread,launch__shared_mem_per_block_dynamic,launch__occupancy_limit_shared_mem,launch__occupancy_limit_registers,dram__bytes_read.sum,lts__t_bytes.sum,smsp__inst_executed.sum"
for s in 70b 8b; do for m in 1 5 8; do
  timeout 120 ncu -k regex:'gemv_batch8|gemv_batchm' -c 12 $M $D bench --backend cuda --shapes $s --formats nvfp4 --quick --m $m --n 128 > "$out/prof-$s-m$m.txt" 2>&1; echo "$s m=$m rc=$?"
done; done
(cd "$out" && tar czf /tmp/all.tgz --exclude=all.tgz . && mv /tmp/all.tgz all.tgz)
