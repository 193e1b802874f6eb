//! LoRA deltas `y += scale·B·(A·x)` (`scale = alpha / rank`), in two parts:
//!
//! - `lora_shrink` computes `ax = scale·A·x` (f32 `[proj][tokens][rank]`) for one or two
//!   projections from the activations the projection reads (bf16 input, f32 intermediate, or
//!   silu(g)·u). A block owns 16 rank rows × one K split × 8 tokens: each warp two rank rows, each
//!   lane two 16-byte vectors of `A` per row and step (512 columns), the next step's loaded
//!   while the current one is multiplied against the activations staged in shared memory (f32).
//!   Decode launches split K so every SM gets work; the last block of each rank group sums the
//!   splits' partials in split order (deterministic).
//! - The expansion `B·ax` is fused into the epilogues of the decode GEMV ([`gemv_delta`]) and
//!   the prefill GEMM ([`gemm_delta`]): per 16-row tile, one bf16 `mma.m16n8k16` per 16 ranks,
//!   `B` (bf16 `[n][rank]`, row-major) read straight into A-fragments and `ax` rounded to bf16
//!   into B-fragments, accumulated in f32.
//!
//! The GEMV/GEMM right after a `lora_shrink` is launched as its programmatic dependent
//! (`GpuBackend::launch_dependent`): the shrink lets it start at once (`launch_dependents`), and
//! it waits for the shrink (`grid_dependency_wait`) only in its epilogue, before reading `ax`, so
//! the shrink runs under the GEMV's main loop. Neither writes what the other reads.
use super::gemv::act_pair;
use crate::dsl::*;
use crate::params::{
    GemmParams, GemvParams, LoraShrinkParams, LORA_RANK_STEP, LORA_SHRINK_STEP,
    LORA_SHRINK_THREADS, LORA_SHRINK_TOKENS,
};

const WARPS: u32 = LORA_SHRINK_THREADS / 32;
/// Rank rows per warp of `lora_shrink`.
const ROWS_PER_WARP: u32 = LORA_RANK_STEP / WARPS;
/// The last-block flag, after the staged activations.
const FLAG_AT: u32 = LORA_SHRINK_TOKENS * LORA_SHRINK_STEP * 4;

/// `ax = scale·A·x` for one or two projections (see [`LoraShrinkParams`]).
#[no_mangle]
pub unsafe extern "ptx-kernel" fn lora_shrink(p: LoraShrinkParams) {
    shrink(&p)
}

/// Eight bf16 (one 16-byte vector) as f32.
#[inline(always)]
fn bf16x8(v: [u32; 4]) -> [f32; 8] {
    let mut f = [0.0f32; 8];
    unroll4!(I, 0 => {
        f[2 * I] = f32::from_bits(v[I] << 16);
        f[2 * I + 1] = f32::from_bits(v[I] & 0xFFFF_0000);
    });
    f
}

/// Stages `width` columns from `cs` of tokens `t0..t0 + nt` into shared memory, f32, one
/// `LORA_SHRINK_STEP`-column row per token.
#[inline(always)]
unsafe fn stage(p: &LoraShrinkParams, t0: u32, nt: u32, cs: u32, width: u32) {
    let smem = Smem::base();
    for t in 0..nt {
        let mut i = thread_x();
        while i < width / 2 {
            let idx = ((t0 + t) * p.k + cs + 2 * i) as usize;
            let (x0, x1) = act_pair(p.source, p.act0, p.act1, idx);
            let at = smem.add((t * LORA_SHRINK_STEP + 2 * i) * 4);
            at.st_f32(x0);
            at.add(4).st_f32(x1);
            i += LORA_SHRINK_THREADS;
        }
    }
}

#[inline(always)]
unsafe fn shrink(p: &LoraShrinkParams) {
    // The GEMV/GEMM after this kernel waits for it only in its epilogue: let it start now.
    launch_dependents();
    let projs = if p.a1 != 0 { 2 } else { 1 };
    let (split, rg, z) = (block_x(), block_y(), block_z());
    let (proj, t0) = (z % projs, (z / projs) * LORA_SHRINK_TOKENS);
    if t0 >= p.tokens {
        return;
    }
    let nt = core::cmp::min(LORA_SHRINK_TOKENS, p.tokens - t0);
    let c0 = split * p.cols_per_split;
    let c1 = core::cmp::min(p.k, c0 + p.cols_per_split);
    let a = (if proj == 0 { p.a0 } else { p.a1 }) as *const u8;
    let row0 = rg * LORA_RANK_STEP + warp_id() * ROWS_PER_WARP;
    // This lane's `A` vectors of the step at column `cs`: [row][vector] as index 2·row + vector,
    // vector v covering columns cs + 8·(lane + 32·v) .. +8.
    let load = |cs: u32| -> [[u32; 4]; 4] {
        let mut w = [[0u32; 4]; 4];
        unroll4!(I, 0 => {
            let col = cs + (lane() + 32 * (I as u32 % 2)) * 8;
            if col < c1 {
                w[I] = ld_nc_v4(a.add((((row0 + I as u32 / 2) * p.k + col) * 2) as usize));
            }
        });
        w
    };
    let smem = Smem::base();
    let mut acc = [[0.0f32; 8]; 2];
    let mut cs = c0;
    let mut w = load(cs);
    while cs < c1 {
        let width = core::cmp::min(LORA_SHRINK_STEP, c1 - cs);
        stage(p, t0, nt, cs, width);
        sync_threads();
        let next = cs + LORA_SHRINK_STEP;
        let wn = if next < c1 { load(next) } else { [[0; 4]; 4] };
        unroll4!(V, 0 => {
            let lc = (lane() + 32 * V as u32) * 8;
            if V < 2 && lc < width {
                let (r0, r1) = (bf16x8(w[V]), bf16x8(w[2 + V]));
                unroll8!(T => {
                    if (T as u32) < nt {
                        let at = smem.add((T as u32 * LORA_SHRINK_STEP + lc) * 4);
                        let (xa, xb) = (at.ld_v4(), at.add(16).ld_v4());
                        let x = [xa[0], xa[1], xa[2], xa[3], xb[0], xb[1], xb[2], xb[3]];
                        let (mut s0, mut s1) = (acc[0][T], acc[1][T]);
                        unroll8!(J => {
                            let xj = f32::from_bits(x[J]);
                            s0 += r0[J] * xj;
                            s1 += r1[J] * xj;
                        });
                        acc[0][T] = s0;
                        acc[1][T] = s1;
                    }
                });
            }
        });
        sync_threads();
        w = wn;
        cs = next;
    }
    let out = p.out as *mut f32;
    let ws = p.ws as *mut f32;
    unroll4!(R, 0 => {
        unroll8!(T => {
            if R < 2 && (T as u32) < nt {
                let s = warp_sum(acc[R % 2][T]);
                if lane() == 0 {
                    let (t, r) = (t0 + T as u32, row0 + R as u32);
                    if p.splits == 1 {
                        *out.add(((proj * p.tokens + t) * p.rank + r) as usize) = s * p.scale;
                    } else {
                        let at = ((split * projs + proj) * p.tokens + t) * p.rank + r;
                        st_cg_f32(ws.add(at as usize), s);
                    }
                }
            }
        });
    });
    if p.splits > 1 {
        reduce_splits(p, projs, proj, rg, nt);
    }
}

/// The last block of a (projection, rank group) to finish sums every split's partials, in
/// split order, and writes `scale·sum`.
#[inline(always)]
unsafe fn reduce_splits(p: &LoraShrinkParams, projs: u32, proj: u32, rg: u32, nt: u32) {
    let groups = p.rank / LORA_RANK_STEP;
    let counter = (p.counters as *mut u32).add((proj * groups + rg) as usize);
    if !last_block_to_finish(counter, p.splits, Smem::base().add(FLAG_AT)) {
        return;
    }
    let i = thread_x();
    if i < nt * LORA_RANK_STEP {
        let (t, r) = (i / LORA_RANK_STEP, rg * LORA_RANK_STEP + i % LORA_RANK_STEP);
        let ws = p.ws as *const f32;
        let mut sum = 0.0f32;
        for s in 0..p.splits {
            sum += ld_cg_f32(ws.add((((s * projs + proj) * p.tokens + t) * p.rank + r) as usize));
        }
        *(p.out as *mut f32).add(((proj * p.tokens + t) * p.rank + r) as usize) = sum * p.scale;
    }
}

/// The bf16 A-fragment of `B` rows `row0..row0 + 16`, ranks `k0..k0 + 16` (`B`: bf16
/// `[..][rank]`, row-major; see `mma_bf16_f32` for the layout).
#[inline(always)]
unsafe fn b_frag(b: u64, rank: u32, row0: u32, k0: u32) -> [u32; 4] {
    let (g, tq) = (lane() / 4, lane() % 4);
    let w = |row: u32, col: u32| {
        *((b as *const u8).add(((row * rank + col) * 2) as usize) as *const u32)
    };
    let (r, c) = (row0 + g, k0 + 2 * tq);
    [w(r, c), w(r + 8, c), w(r, c + 8), w(r + 8, c + 8)]
}

/// The bf16 B-fragment of ranks `k0..k0 + 16` of this lane's token row `x` (f32 `[rank]`;
/// `None`: a token past the last, zeros).
#[inline(always)]
unsafe fn x_frag(x: Option<*const f32>, k0: u32) -> [u32; 2] {
    match x {
        Some(x) => {
            let at = x.add((k0 + 2 * (lane() % 4)) as usize);
            [
                pack_bf16x2(*at, *at.add(1)),
                pack_bf16x2(*at.add(8), *at.add(9)),
            ]
        }
        None => [0; 2],
    }
}

/// The LoRA delta of this warp's 16-row tile `rt` of GEMV projection `proj`, laid out as its
/// `mma` accumulators (rows g, g+8; tokens 2·tq, 2·tq+1): `Σ_r B[row][r]·ax[t][r]`. Zeros when
/// LoRA is off or this block is not the last K split (the split that adds it). Ranks go two
/// `mma` steps at a time (their loads in flight together; more would cost the GEMVs registers),
/// and the first two `B` fragments load while the warp waits for the shrink.
#[inline(always)]
pub(crate) unsafe fn gemv_delta(p: &GemvParams, proj: u32, rt: u32) -> [f32; 4] {
    let mut c = [0.0f32; 4];
    if p.lora_rank == 0 || block_y() + 1 != p.splits {
        return c;
    }
    let (b, rank) = (if proj == 0 { p.lora_b0 } else { p.lora_b1 }, p.lora_rank);
    let row0 = rt * 16;
    // Two steps of `B` from rank `k0` (the second zeros past the rank).
    let pair = |k0: u32| {
        let second = if k0 + LORA_RANK_STEP < rank {
            b_frag(b, rank, row0, k0 + LORA_RANK_STEP)
        } else {
            [0; 4]
        };
        (b_frag(b, rank, row0, k0), second)
    };
    let mut a = pair(0);
    // Launched as a programmatic dependent of `lora_shrink`: `ax` is ready only after this.
    grid_dependency_wait();
    let g = lane() / 4;
    let x = (g < p.m).then(|| (p.lora_ax as *const f32).add(((proj * p.m + g) * rank) as usize));
    let mut k0 = 0;
    loop {
        let x1 = if k0 + LORA_RANK_STEP < rank {
            x_frag(x, k0 + LORA_RANK_STEP)
        } else {
            [0; 2]
        };
        c = mma_bf16_f32(a.0, x_frag(x, k0), c);
        c = mma_bf16_f32(a.1, x1, c);
        k0 += 2 * LORA_RANK_STEP;
        if k0 >= rank {
            return c;
        }
        a = pair(k0);
    }
}

/// Adds the LoRA delta of projection `proj` to a prefill GEMM warp's accumulators (`RT` row
/// tiles from `rt0` × `NF` 8-token fragments from `tok0`), after scaling them by `scale` (the
/// epilogue then writes them unscaled). Row tiles at or past `row_tiles` read no `B`.
#[inline(always)]
pub(crate) unsafe fn gemm_delta<const RT: usize, const NF: usize>(
    p: &GemmParams,
    proj: u32,
    (rt0, row_tiles, tok0): (u32, u32, u32),
    acc: &mut [[[f32; 4]; NF]; RT],
    scale: f32,
) {
    grid_dependency_wait();
    unroll4!(R, 0 => {
        unroll16!(F => {
            if R < RT && F < NF {
                for v in acc[R][F].iter_mut() {
                    *v *= scale;
                }
            }
        });
    });
    let (b, rank) = (if proj == 0 { p.lora_b0 } else { p.lora_b1 }, p.lora_rank);
    let ax = (p.lora_ax as *const f32).add((proj * p.tokens * rank) as usize);
    let g = lane() / 4;
    // One 8-token fragment at a time over the whole rank (B fragments reloaded per fragment,
    // from L1), so few registers are live beside the accumulators.
    unroll16!(F => {
        if F < NF {
            let tok = tok0 + 8 * F as u32 + g;
            let x = (tok < p.tokens).then(|| ax.add((tok * rank) as usize));
            let mut k0 = 0;
            while k0 < rank {
                let xf = x_frag(x, k0);
                unroll4!(R, 0 => {
                    if R < RT && rt0 + (R as u32) < row_tiles {
                        let a = b_frag(b, rank, (rt0 + R as u32) * 16, k0);
                        acc[R][F] = mma_bf16_f32(a, xf, acc[R][F]);
                    }
                });
                k0 += LORA_RANK_STEP;
            }
        }
    });
}
