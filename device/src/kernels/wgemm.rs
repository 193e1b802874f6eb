//! Prefill GEMM on Hopper's warpgroup tensor cores (`wgmma`, sm_90a): `Y[t] = W·X[t]` for many
//! tokens, generic over the staged weight formats ([`StagedTiles`]).
//!
//! A block is two warpgroups (256 threads) over 128 rows × [`GEMM_WG_TOKENS`] tokens; each warp
//! owns one 16-row tile. Per 64-column chunk, `cp.async` stages the block's activations (bf16,
//! K-major, 128-byte swizzle: the `wgmma` B operand) and the raw weight tiles in shared memory,
//! [`GEMM_WG_STAGES`] chunks deep. Each lane dequantizes its share of its tile into bf16 A
//! fragments in registers (16 columns at a time) and one `wgmma.m64n128k16` per projection
//! multiplies them with all 128 tokens. The products are asynchronous: the lane dequantizes the
//! next 16 columns while the tensor cores work; a chunk's products complete before the next
//! chunk starts, so a stage is refilled right after the chunk that read it. The dual kernel (gate+up) applies the
//! activation in its epilogue and writes `act(gate)·up` as bf16, the down GEMM's input.
use super::elementwise::gelu_tanh;
use super::gemv::silu;
use super::tiles::{Fp8, Nvfp4, Q4k, StagedTiles, Tiles, Q2};
use crate::dsl::*;
use crate::formats::nvfp4::{TILE_K, TILE_ROWS};
use crate::params::{
    gemm_wg_stage_bytes, GemmParams, GEMM_WG_ROWS, GEMM_WG_STAGES, GEMM_WG_TOKENS,
};

/// Bytes of one activation chunk in shared memory (tokens × 64 bf16).
const X_BYTES: u32 = GEMM_WG_TOKENS * 128;

/// The bf16 A-fragments of step `j` of a chunk (the f16 ones converted; exact for NVFP4).
#[inline(always)]
fn bf16_fragments<T: Tiles>(l: &T::Lane, j: u32) -> [u32; 4] {
    let f = T::fragments(l, j);
    [
        f16x2_to_bf16x2(f[0]),
        f16x2_to_bf16x2(f[1]),
        f16x2_to_bf16x2(f[2]),
        f16x2_to_bf16x2(f[3]),
    ]
}

/// Issues this thread's share of the copies of chunk `c` into stage `st`: the activation
/// chunk (16-byte piece `kg` of token `t` at row `t`, chunk `kg ^ (t % 8)`; zeros past the last
/// token) and every projection's 8 tiles (zeros past the last row tile).
#[inline(always)]
unsafe fn stage_chunk<T: StagedTiles, const DUAL: bool>(
    p: &GemmParams,
    tile: (u32, u32),
    st: Smem,
    c: u32,
) {
    let tid = thread_x();
    let tok0 = tile.1 * GEMM_WG_TOKENS;
    let k_tiles = p.k / TILE_K as u32;
    unroll4!(Q, 0 => {
        let v = tid + 256 * Q as u32;
        if v < GEMM_WG_TOKENS * 8 {
            let (t, kg) = (v / 8, v % 8);
            let tok = tok0 + t;
            let ok = tok < p.tokens;
            let src = (p.x as *const u8)
                .add(((if ok { tok } else { 0 } * p.k + c * TILE_K as u32 + kg * 8) * 2) as usize);
            cp_async_16(st.add(t * 128 + ((kg ^ (t % 8)) * 16)), src, if ok { 16 } else { 0 });
        }
    });
    let rt0 = tile.0 * (GEMM_WG_ROWS / TILE_ROWS as u32);
    let row_tiles = p.n / TILE_ROWS as u32;
    let proj = if DUAL { 2 } else { 1 };
    let codes = st.add(X_BYTES);
    let scales = codes.add(proj * 8 * T::CODE_BYTES);
    for pj in 0..proj {
        let (w, s) = if pj == 0 { (p.w0, p.s0) } else { (p.w1, p.s1) };
        let mut v = tid;
        while v < 8 * T::CODE_BYTES / 16 {
            let (tile, part) = (v / (T::CODE_BYTES / 16), v % (T::CODE_BYTES / 16));
            let ok = rt0 + tile < row_tiles;
            let at = if ok { (rt0 + tile) * k_tiles + c } else { 0 } as usize;
            let src = (w as *const u8).add(at * T::CODE_BYTES as usize + part as usize * 16);
            cp_async_16(
                codes.add((pj * 8 + tile) * T::CODE_BYTES + part * 16),
                src,
                if ok { 16 } else { 0 },
            );
            v += 256;
        }
        // Scales: 16-byte pieces, or 4-byte ones for a format with 4 bytes per tile (FP8).
        let piece = if T::SCALE_BYTES % 16 == 0 { 16 } else { 4 };
        let mut v = tid;
        while v < 8 * T::SCALE_BYTES / piece {
            let (tile, part) = (v / (T::SCALE_BYTES / piece), v % (T::SCALE_BYTES / piece));
            let ok = rt0 + tile < row_tiles;
            let at = if ok { (rt0 + tile) * k_tiles + c } else { 0 } as usize;
            let src = (s as *const u8).add(at * T::SCALE_BYTES as usize + (part * piece) as usize);
            let dst = scales.add((pj * 8 + tile) * T::SCALE_BYTES + part * piece);
            let n = if ok { piece } else { 0 };
            if piece == 16 {
                cp_async_16(dst, src, n);
            } else {
                cp_async_4(dst, src, n);
            }
            v += 256;
        }
    }
}

/// Where a block's chunks live: its output tile (row block, token block), stage size, first
/// chunk, chunk count.
struct Pipe {
    tile: (u32, u32),
    stage_bytes: u32,
    c_begin: u32,
    chunks: u32,
}

impl Pipe {
    /// The stage of the block's chunk `i`.
    #[inline(always)]
    fn stage(&self, i: u32) -> Smem {
        Smem((Smem::base().0 + 1023) & !1023).add((i % GEMM_WG_STAGES) * self.stage_bytes)
    }
}

/// Opens the block's chunk `i`: waits until its copies have landed (this thread's: at most
/// `PENDING` later groups outstanding; then everyone's, at the barrier), refills the stage of
/// chunk `i − 2` (whose products every warpgroup has waited for) with chunk `i + STAGES − 2`,
/// and returns this warp's lanes of the chunk's tiles (projections 0 and 1).
#[inline(always)]
unsafe fn open_chunk<T: StagedTiles, const DUAL: bool, const PENDING: u32>(
    p: &GemmParams,
    pipe: &Pipe,
    i: u32,
) -> (T::Lane, T::Lane) {
    cp_async_wait::<PENDING>();
    fence_proxy_async();
    sync_threads();
    if i >= 1 {
        let j = i + GEMM_WG_STAGES - 2;
        if j < pipe.chunks {
            stage_chunk::<T, DUAL>(p, pipe.tile, pipe.stage(j), pipe.c_begin + j);
        }
        cp_async_commit();
    }
    let proj = if DUAL { 2 } else { 1 };
    let warp = warp_id();
    let codes = pipe.stage(i).add(X_BYTES);
    let scales = codes.add(proj * 8 * T::CODE_BYTES);
    let l0 = T::load_shared(
        codes.add(warp * T::CODE_BYTES),
        scales.add(warp * T::SCALE_BYTES),
    );
    let l1 = if DUAL {
        T::load_shared(
            codes.add((8 + warp) * T::CODE_BYTES),
            scales.add((8 + warp) * T::SCALE_BYTES),
        )
    } else {
        l0
    };
    (l0, l1)
}

/// Issues the products of the block's chunk `i` (its lanes `l`): per 16 columns, the A
/// fragments dequantized while the previous `wgmma`s run, then one `wgmma` per projection.
#[inline(always)]
unsafe fn chunk_products<T: StagedTiles, const DUAL: bool>(
    pipe: &Pipe,
    i: u32,
    l: &(T::Lane, T::Lane),
    acc0: &mut [f32; 64],
    acc1: &mut [f32; 64],
) {
    let st = pipe.stage(i);
    unroll4!(J, 0 => {
        let j = J as u32;
        let f0 = bf16_fragments::<T>(&l.0, j);
        let f1 = if DUAL { bf16_fragments::<T>(&l.1, j) } else { f0 };
        let desc = desc_k128b(st.add(32 * j));
        wgmma_fence();
        wgmma_m64n128k16_bf16(acc0, f0, desc);
        if DUAL {
            wgmma_m64n128k16_bf16(acc1, f1, desc);
        }
    });
    wgmma_commit();
}

#[inline(always)]
unsafe fn wgemm<T: StagedTiles, const DUAL: bool, const SPLIT: bool, const LORA: bool>(
    p: &GemmParams,
) {
    let stage_bytes = gemm_wg_stage_bytes(DUAL, T::CODE_BYTES, T::SCALE_BYTES);
    let warp = warp_id();
    let k_tiles = p.k / TILE_K as u32;
    let split = SPLIT && !DUAL && !LORA && p.splits > 1;
    let (c_begin, c_end) = if split {
        let c0 = block_z() * p.chunks_per_split;
        (c0, (c0 + p.chunks_per_split).min(k_tiles))
    } else {
        (0, k_tiles)
    };
    let tile = (block_x(), block_y());
    let pipe = Pipe {
        tile,
        stage_bytes,
        c_begin,
        chunks: c_end - c_begin,
    };
    // Prologue: the first STAGES − 1 chunks in flight (one group per chunk, empty past the end,
    // so that the group count stays uniform).
    for i in 0..GEMM_WG_STAGES - 1 {
        if i < pipe.chunks {
            stage_chunk::<T, DUAL>(p, pipe.tile, pipe.stage(i), c_begin + i);
        }
        cp_async_commit();
    }
    let mut acc0 = [0.0f32; 64];
    let mut acc1 = [0.0f32; 64];
    // Chunk i's products run while the block opens chunk i + 1 (barrier, refill, lanes); they
    // are waited for before chunk i + 1's are issued, so no `wgmma` is in flight across the
    // loop (else ptxas serializes them all: its C7515).
    let mut lanes = open_chunk::<T, DUAL, { GEMM_WG_STAGES - 2 }>(p, &pipe, 0);
    for i in 0..pipe.chunks {
        chunk_products::<T, DUAL>(&pipe, i, &lanes, &mut acc0, &mut acc1);
        if i + 1 < pipe.chunks {
            lanes = open_chunk::<T, DUAL, { GEMM_WG_STAGES - 3 }>(p, &pipe, i + 1);
        }
        wgmma_wait::<0>();
    }
    cp_async_wait::<0>();
    let (mut s0, mut s1) = (T::FACTOR * p.gscale0, T::FACTOR * p.gscale1);
    let row_tile = tile.0 * (GEMM_WG_ROWS / TILE_ROWS as u32) + warp;
    let tok0 = tile.1 * GEMM_WG_TOKENS;
    // LoRA (the `_lora` entry points only, so the others keep their registers): scale the
    // accumulators now and add the `B·ax` deltas (before the activation). `acc[4f + i]` is
    // fragment `f`'s element `i`, the `[tile][fragment][i]` shape `gemm_delta` takes.
    if LORA && p.lora_rank != 0 {
        let at = (row_tile, p.n / TILE_ROWS as u32, tok0);
        let mut a: [[[f32; 4]; 16]; 1] = core::mem::transmute(acc0);
        super::lora::gemm_delta::<1, 16>(p, 0, at, &mut a, s0);
        acc0 = core::mem::transmute(a);
        if DUAL {
            let mut a: [[[f32; 4]; 16]; 1] = core::mem::transmute(acc1);
            super::lora::gemm_delta::<1, 16>(p, 1, at, &mut a, s1);
            acc1 = core::mem::transmute(a);
        }
        (s0, s1) = (1.0, 1.0);
    }
    store_tile::<DUAL>(p, tile, warp, split, (&acc0, &acc1), (s0, s1));
    if split {
        reduce_splits(p, tile, GEMM_WG_ROWS, GEMM_WG_TOKENS);
    }
}

/// The dual kernels' epilogue: `act(g)·u` with the activation `p.act` (1 SiLU, 2 GELU-tanh).
#[inline(always)]
pub(super) fn act_mul(p: &GemmParams, g: f32, u: f32) -> f32 {
    (if p.act == 2 { gelu_tanh(g) } else { silu(g) }) * u
}

/// The sum in split order of `splits` split-K partials of four outputs, `part(s)` loading
/// split `s`'s: the loads of the first 8 are issued before the sum (the reductions are bound
/// by load latency).
#[inline(always)]
pub(super) unsafe fn sum_splits(splits: u32, part: impl Fn(u32) -> [f32; 4]) -> [f32; 4] {
    let mut v = [[0.0f32; 4]; 8];
    unroll8!(S => {
        if (S as u32) < splits {
            v[S] = part(S as u32);
        }
    });
    let mut sum = v[0];
    unroll8!(S => {
        if S > 0 && (S as u32) < splits {
            unroll4!(J, 0 => { sum[J] += v[S][J]; });
        }
    });
    for s in 8..splits {
        let x = part(s);
        unroll4!(J, 0 => { sum[J] += x[J]; });
    }
    sum
}

/// Writes a block's outputs: warp `warp`'s 16 rows × [`GEMM_WG_TOKENS`] tokens of `acc0` (times
/// `s.0`), or with two projections `act(acc0·s.0)·(acc1·s.1)`; bf16 to `p.out` (`[tokens][n]`),
/// or with K split f32 to this split's slice of `p.ws`. Rows and tokens past the ends are not
/// written.
#[inline(always)]
pub(super) unsafe fn store_tile<const DUAL: bool>(
    p: &GemmParams,
    tile: (u32, u32),
    warp: u32,
    split: bool,
    (acc0, acc1): (&[f32; 64], &[f32; 64]),
    (s0, s1): (f32, f32),
) {
    let (g, tq) = (lane() / 4, lane() % 4);
    let row_tile = tile.0 * (GEMM_WG_ROWS / TILE_ROWS as u32) + warp;
    let tok0 = tile.1 * GEMM_WG_TOKENS;
    if row_tile < p.n / TILE_ROWS as u32 {
        unroll16!(F => {
            unroll4!(I, 0 => {
                let tok = tok0 + 8 * F as u32 + 2 * tq + (I as u32 & 1);
                let row = row_tile * TILE_ROWS as u32 + g + if I >= 2 { 8 } else { 0 };
                let y0 = acc0[4 * F + I] * s0;
                let y = if DUAL {
                    // Written out rather than `act_mul`: the call's form changes how ptxas lays
                    // out this epilogue in the other formats' kernels.
                    let y1 = acc1[4 * F + I] * s1;
                    (if p.act == 2 { gelu_tanh(y0) } else { silu(y0) }) * y1
                } else {
                    y0
                };
                if tok < p.tokens {
                    if split {
                        let at = (block_z() * p.tokens + tok) * p.n + row;
                        *(p.ws as *mut f32).add(at as usize) = y;
                    } else {
                        *(p.out as *mut u16).add((tok * p.n + row) as usize) = f32_to_bf16(y);
                    }
                }
            });
        });
    }
}

/// Prefill gate+up over the `_t` copies with the activation fused: bf16 `act(g)·u` out.
/// Block: 256 threads, [`GEMM_WG_ROWS`] rows × [`GEMM_WG_TOKENS`] tokens; shared memory
/// `gemm_wg_smem_bytes(true, 512, 64)`.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn gemm_nvfp4_t_gate_up_act(p: GemmParams) {
    wgemm::<Nvfp4, true, false, false>(&p)
}

/// Prefill down projection over the `_t` copies: bf16 out. Block as the gate+up kernel's;
/// shared memory `gemm_wg_smem_bytes(false, 512, 64)`.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn gemm_nvfp4_t_down(p: GemmParams) {
    wgemm::<Nvfp4, false, false, false>(&p)
}

/// `gemm_nvfp4_t_down` with K split over `blockIdx.z` (`GemmParams::splits`): a small grid's
/// launch.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn gemm_nvfp4_t_down_splitk(p: GemmParams) {
    wgemm::<Nvfp4, false, true, false>(&p)
}

/// The last block of a split-K tile (`rows` × `tokens` outputs) to finish sums the tile's
/// partials in split order and writes the bf16 output (the others return). The counter of the
/// tile is back at zero after. Every thread of the block takes four rows of one token a step
/// ([`sum_splits`]).
#[inline(always)]
pub(super) unsafe fn reduce_splits(p: &GemmParams, at: (u32, u32), rows: u32, tokens: u32) {
    let tile = at.1 * grid_x() + at.0;
    let counter = (p.counters as *mut u32).add(tile as usize);
    // The staging buffers are free: every thread is past the main loop at the barrier in there.
    if !last_block_to_finish(counter, p.splits, Smem::base()) {
        return;
    }
    write_split_sums(p, at, rows, tokens, block_dim_x());
}

/// Output tile `at` (`rows` × `tokens`) of a single-projection split-K GEMM, by the threads
/// `thread_x() < step` of its last block to finish: the sum of its splits' f32 partials
/// (`[split][tokens][n]` in `p.ws`) in split order, bf16 to `p.out`.
#[inline(always)]
pub(super) unsafe fn write_split_sums(
    p: &GemmParams,
    at: (u32, u32),
    rows: u32,
    tokens: u32,
    step: u32,
) {
    let (row0, tok0, quads) = (at.0 * rows, at.1 * tokens, rows / 4);
    let mut i = thread_x();
    while i < quads * tokens {
        // Rows are a multiple of 16, so a quad lies within the matrix or past it.
        let (row, tok) = (row0 + 4 * (i % quads), tok0 + i / quads);
        if row < p.n && tok < p.tokens {
            let sum = sum_splits(p.splits, |s| {
                let at = (s * p.tokens + tok) * p.n + row;
                ld_cg_v4_f32((p.ws as *const f32).add(at as usize))
            });
            let out = (p.out as *mut u8).add(((tok * p.n + row) * 2) as usize);
            st_global_v2(
                out,
                [pack_bf16x2(sum[0], sum[1]), pack_bf16x2(sum[2], sum[3])],
            );
        }
        i += step;
    }
}

/// `gemm_nvfp4_t_gate_up_act` with LoRA deltas: `scale·B·ax` added to gate and up before the
/// activation (`lora_*` fields of the parameter block).
#[no_mangle]
pub unsafe extern "ptx-kernel" fn gemm_nvfp4_t_lora_gate_up_act(p: GemmParams) {
    wgemm::<Nvfp4, true, false, true>(&p)
}

/// `gemm_nvfp4_t_down` with the LoRA delta of down.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn gemm_nvfp4_t_lora_down(p: GemmParams) {
    wgemm::<Nvfp4, false, false, true>(&p)
}

/// Declares the overlay prefill entry points of one staged format: `<prefix>_gate_up_act`
/// (gate and up with the activation fused, bf16 `act(g)·u` out), `<prefix>` (one projection)
/// and `<prefix>_splitk` (one projection, K split). Blocks as the NVFP4 kernels'.
macro_rules! overlay_wgemm {
    ($tiles:ty, $dual:ident, $single:ident, $splitk:ident) => {
        /// Prefill gate+up with the activation fused: bf16 `act(g)·u` out.
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $dual(p: GemmParams) {
            wgemm::<$tiles, true, false, false>(&p)
        }

        /// Prefill single projection: bf16 out.
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $single(p: GemmParams) {
            wgemm::<$tiles, false, false, false>(&p)
        }

        /// The single projection with K split over `blockIdx.z` (`GemmParams::splits`).
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $splitk(p: GemmParams) {
            wgemm::<$tiles, false, true, false>(&p)
        }
    };
}

overlay_wgemm!(Q2, q2_0_gemm_gate_up_act, q2_0_gemm, q2_0_gemm_splitk);
overlay_wgemm!(Q4k, q4k_gemm_gate_up_act, q4k_gemm, q4k_gemm_splitk);
