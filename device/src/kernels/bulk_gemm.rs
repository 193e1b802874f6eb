//! Prefill GEMM over the BF16 overlay's tiles (`wgmma`, sm_90a), warp-specialized: `Y[t] = W·X[t]`
//! for many tokens, both operands handed to the tensor cores from shared memory by descriptor.
//!
//! A block is 384 threads over 256 weight rows × 128 tokens ([`GEMM_WG_TOKENS`]): two consumer
//! warpgroups (warps 0–7) and one producer warpgroup (warps 8–11). The rows are gate's and up's
//! [`GEMM_WG_ROWS`] = 128 each in the gate+up kernel, [`GEMM_BULK_WIDE_ROWS`] = 256 of the one
//! matrix in the single-projection kernels. Consumer warpgroup `w` multiplies its 64 tokens
//! (`64w ..`, the A operand) with all 256 rows (the B operand), one `wgmma.m64n256k16` a
//! 16-column step, 128 f32 accumulators a thread: each product reads 2 KiB of activations and
//! 8 KiB of weights from shared memory, where two `m64n128k16` over 64-row weight slices with
//! all 128 tokens (the form before) read 12 KiB for the same work. The stages (64-column
//! chunks, [`GEMM_BULK_STAGES`] deep, 16 weight tiles each) are handed over by `mbarrier`s, not
//! block barriers:
//! - the producer waits for a stage's *empty* barrier (every consumer warp released the chunk
//!   that was there), announces the weight bytes on its *full* barrier and fills it: each of
//!   the block's 16 row tiles (2 KiB of bf16 in `wgmma`'s canonical layout, the
//!   overlay's tile as it is in global memory) by one bulk copy (`cp.async.bulk`, one thread
//!   each), the activations (tokens × 128 bytes, K-major, 128-byte swizzle) by `cp.async`, 8
//!   pieces a thread, whose completion each thread signals on the same barrier (one warp
//!   issuing all 1024 pieces, with their address arithmetic, was 45–52% slower than the
//!   block-barrier GEMM before it on an H100: `docs/perf/2026-12-06-bf16-bulk.md`);
//! - a consumer warpgroup waits for the full barrier, issues its 4 × `wgmma.m64n256k16`, and
//!   releases the stage of the chunk before once that chunk's products are done
//!   (`wgmma.wait_group 1`: one chunk's products stay in flight).
//!
//! The grid is walked in groups of [`GEMM_WG_GROUP`] row blocks (`super::tile_of_block`). The
//! dual kernel (gate+up) applies the activation in its epilogue and writes `act(gate)·up` as
//! bf16, the down GEMM's input, as the other formats' GEMMs do; a thread holds two adjacent
//! rows of a token, so every store is a bf16 pair ([`store_block`]).
use super::wgemm::{act_mul, reduce_splits, sum_splits};
use crate::dsl::*;
use crate::formats::nvfp4::{TILE_K, TILE_ROWS};
use crate::formats::tiles::TileFormat;
use crate::params::{
    gemm_wg_stage_bytes, GemmParams, GEMM_BULK_STAGES, GEMM_BULK_THREADS, GEMM_BULK_WIDE_ROWS,
    GEMM_WG_GROUP, GEMM_WG_ROWS, GEMM_WG_TOKENS,
};

/// Bytes of one activation chunk in shared memory (tokens × 64 bf16).
const X_BYTES: u32 = GEMM_WG_TOKENS * 128;
/// Bytes of one 16 × 64 bf16 tile.
const TILE_BYTES: u32 = TileFormat::Bf16.code_bytes() as u32;
/// Row tiles per slice (a projection of the gate+up kernel, a half of the wide block).
const ROW_TILES: u32 = GEMM_WG_ROWS / TILE_ROWS as u32;
/// Consumer warps (two warpgroups); the producer warpgroup follows them.
const CONSUMER_WARPS: u32 = 8;

/// The block's stages and barriers in shared memory.
struct Ring {
    base: Smem,
    stage_bytes: u32,
    stages: u32,
}

impl Ring {
    #[inline(always)]
    fn new() -> Ring {
        Ring {
            base: Smem((Smem::base().0 + 1023) & !1023),
            stage_bytes: gemm_wg_stage_bytes(true, TILE_BYTES, 0),
            stages: GEMM_BULK_STAGES,
        }
    }

    /// The stage of the block's chunk `i`.
    #[inline(always)]
    fn stage(&self, i: u32) -> Smem {
        self.base.add((i % self.stages) * self.stage_bytes)
    }

    /// The barrier that completes when chunk `i`'s copies have landed.
    #[inline(always)]
    fn full(&self, i: u32) -> Smem {
        self.base
            .add(self.stages * self.stage_bytes + (i % self.stages) * 8)
    }

    /// The barrier that completes when every consumer warp is done with chunk `i`.
    #[inline(always)]
    fn empty(&self, i: u32) -> Smem {
        self.full(i).add(64)
    }

    /// The parity of chunk `i`'s phase of its stage's barriers.
    #[inline(always)]
    fn parity(&self, i: u32) -> u32 {
        (i / self.stages) & 1
    }
}

/// Producer threads: one warpgroup after the consumers'.
const PRODUCERS: u32 = GEMM_BULK_THREADS - 32 * CONSUMER_WARPS;
/// Arrivals a full barrier expects a phase: the weight bytes' announcement and every producer
/// thread's `cp.async` completion.
const FULL_ARRIVALS: u32 = 1 + PRODUCERS;

/// The producer warpgroup: fills the stages with chunks `c_begin ..` (`chunks` of them), each
/// once the consumers have released the chunk `stages` before it.
#[inline(always)]
unsafe fn produce<const DUAL: bool>(
    p: &GemmParams,
    ring: &Ring,
    tile: (u32, u32),
    (c_begin, chunks): (u32, u32),
) {
    let pt = thread_x() - 32 * CONSUMER_WARPS;
    let k_tiles = p.k / TILE_K as u32;
    let row_tiles = p.n / TILE_ROWS as u32;
    // Slice `s`'s first row tile: gate's and up's are the same, the wide block's halves 8 apart.
    let first = |s: u32| (if DUAL { tile.0 } else { 2 * tile.0 + s }) * ROW_TILES;
    // Row tiles past the matrix are not copied: their rows' outputs are never stored, and a
    // product row reads only its own row of A.
    let valid = |s: u32| row_tiles.saturating_sub(first(s)).min(ROW_TILES);
    let bytes = (valid(0) + valid(1)) * TILE_BYTES;
    // Thread `pt`'s bulk copy: slice `pt / 8`, row tile `pt % 8`.
    let (sl, rt) = (pt / ROW_TILES, pt % ROW_TILES);
    let copies = sl < 2 && rt < valid(sl);
    let w = (if DUAL && sl == 1 { p.w1 } else { p.w0 }) as *const u8;
    let rt0 = first(sl);
    // Activations: thread `pt` copies 16-byte piece `kg` of tokens `t0 + 16q` (q < 8), stored
    // at row `t`, chunk `kg ^ (t % 8)` (the same for every q); zeros past the last token.
    let (t0, kg) = (pt / 8, pt % 8);
    let tok0 = tile.1 * GEMM_WG_TOKENS + t0;
    let dst0 = t0 * 128 + (kg ^ (t0 % 8)) * 16;
    let row = p.k as usize * 2;
    let x0 = (p.x as *const u8).add(kg as usize * 16);
    let whole = tile.1 * GEMM_WG_TOKENS + GEMM_WG_TOKENS <= p.tokens;
    for i in 0..chunks {
        if i >= ring.stages {
            mbar_wait(ring.empty(i), ring.parity(i) ^ 1);
        }
        let (st, full, c) = (ring.stage(i), ring.full(i), c_begin + i);
        if pt == 0 {
            mbar_arrive_expect_tx(full, bytes);
        }
        if copies {
            let src = w.add((((rt0 + rt) * k_tiles + c) * TILE_BYTES) as usize);
            bulk_copy(
                st.add(X_BYTES + (sl * ROW_TILES + rt) * TILE_BYTES),
                src,
                TILE_BYTES,
                full,
            );
        }
        let x = x0.add(c as usize * TILE_K * 2);
        if whole {
            let mut src = x.add(tok0 as usize * row);
            unroll8!(Q => {
                cp_async_16(st.add(dst0 + 2048 * Q as u32), src, 16);
                src = src.add(16 * row);
            });
        } else {
            for q in 0..GEMM_WG_TOKENS / 16 {
                let tok = tok0 + 16 * q;
                let ok = tok < p.tokens;
                let src = x.add(if ok { tok as usize * row } else { 0 });
                cp_async_16(st.add(dst0 + 2048 * q), src, if ok { 16 } else { 0 });
            }
        }
        cp_async_mbar_arrive(full);
    }
}

/// A consumer warp: per chunk, waits for its stage, issues its warpgroup's products and
/// releases the previous chunk's stage once those products are done. Warpgroup `w` multiplies
/// its 64 tokens (`64w ..`, the A operand) with the block's 256 weight rows (B), one
/// `wgmma.m64n256k16` a 16-column step: `acc[4f + i]` is token `16·(warp % 4) + g + 8·(i / 2)`
/// of the warpgroup's, row `8f + 2t + i % 2` of the block's.
#[inline(always)]
unsafe fn consume(ring: &Ring, chunks: u32, acc: &mut [f32; 128]) {
    let wg = warp_id() / 4;
    for i in 0..chunks {
        mbar_wait(ring.full(i), ring.parity(i));
        // The activations came through the generic proxy (`cp.async`); `wgmma` reads through
        // the async one.
        fence_proxy_async();
        let st = ring.stage(i);
        // The warpgroup's tokens: 64 rows of 128 bytes. The block's 16 weight tiles lie back to
        // back: eight-row groups 1024 bytes apart, core matrices along K 128 bytes apart, step
        // j 256 bytes in.
        let x = st.add(wg * 64 * 128);
        let w = st.add(X_BYTES);
        wgmma_fence();
        unroll4!(J, 0 => {
            let j = J as u32;
            wgmma_m64n256k16_bf16_ss(
                acc,
                desc_k128b(x.add(32 * j)),
                desc_k_plain(w.add(256 * j), 128, 1024),
            );
        });
        wgmma_commit();
        wgmma_wait::<1>();
        if i >= 1 && lane() == 0 {
            mbar_arrive(ring.empty(i - 1));
        }
    }
    wgmma_wait::<0>();
}

/// Where a consumer thread's outputs go: its token `j` (0, 1: `g`, `g + 8`) in the block's
/// token tile, and its row pair `f` (rows `8f + 2t`, `+1` of the block's 256).
#[inline(always)]
fn out_token(j: u32) -> u32 {
    64 * (warp_id() / 4) + 16 * (warp_id() % 4) + lane() / 4 + 8 * j
}

/// The first of row pair `f`'s two rows in the block.
#[inline(always)]
fn out_row(f: u32) -> u32 {
    8 * f + 2 * (lane() % 4)
}

/// Writes a consumer thread's outputs of block tile `tile` (`tile.0` counts
/// [`GEMM_BULK_WIDE_ROWS`]-row blocks of the single projection, [`GEMM_WG_ROWS`]-row blocks of
/// gate+up): bf16 `act(gate·s.0)·(up·s.1)` (gate rows 0..128 of `acc`, up rows 128..256), or the
/// single projection's 256 rows times `s.0`, to `p.out` (`[tokens][n]`); with K split, f32 to
/// this split's slice of `p.ws` (`[split][tokens][n]`). Rows and tokens past the ends are not
/// written.
#[inline(always)]
unsafe fn store_block<const DUAL: bool>(
    p: &GemmParams,
    tile: (u32, u32),
    split: bool,
    acc: &[f32; 128],
    (s0, s1): (f32, f32),
) {
    let rows = if DUAL {
        GEMM_WG_ROWS
    } else {
        GEMM_BULK_WIDE_ROWS
    };
    let row0 = tile.0 * rows;
    unroll2!(J => {
        let tok = tile.1 * GEMM_WG_TOKENS + out_token(J as u32);
        if tok < p.tokens {
            unroll32!(F => {
                if !DUAL || F < 16 {
                    let row = row0 + out_row(F as u32);
                    let (a, b) = (acc[4 * F + 2 * J], acc[4 * F + 2 * J + 1]);
                    let y = if DUAL {
                        let (ua, ub) = (acc[4 * ((F + 16) % 32) + 2 * J], acc[4 * ((F + 16) % 32) + 2 * J + 1]);
                        [act_mul(p, a * s0, ua * s1), act_mul(p, b * s0, ub * s1)]
                    } else {
                        [a * s0, b * s0]
                    };
                    if row < p.n {
                        if split {
                            let at = (block_z() * p.tokens + tok) * p.n + row;
                            st_global_v2(
                                (p.ws as *mut f32).add(at as usize) as *mut u8,
                                [y[0].to_bits(), y[1].to_bits()],
                            );
                        } else {
                            let at = (tok * p.n + row) as usize;
                            *((p.out as *mut u16).add(at) as *mut u32) = pack_bf16x2(y[0], y[1]);
                        }
                    }
                }
            });
        }
    });
}

#[inline(always)]
unsafe fn bulk_gemm<const DUAL: bool, const SPLIT: bool>(p: &GemmParams) {
    let ring = Ring::new();
    let k_tiles = p.k / TILE_K as u32;
    // K is split over `blockIdx.z` for every tile of the single projection, for the gate+up
    // kernel's tiles from `split_from` on (the grid's last, partial wave); a whole tile runs in
    // its block of z = 0.
    let lin = block_y() * grid_x() + block_x();
    let split = SPLIT && p.splits > 1 && lin >= p.split_from;
    if SPLIT && !split && block_z() > 0 {
        return;
    }
    let (c_begin, c_end) = if split {
        let c0 = block_z() * p.chunks_per_split;
        (c0, (c0 + p.chunks_per_split).min(k_tiles))
    } else {
        (0, k_tiles)
    };
    let chunks = c_end - c_begin;
    let tile = super::tile_of_block(GEMM_WG_GROUP);
    if thread_x() == 0 {
        for s in 0..ring.stages {
            mbar_init(ring.full(s), FULL_ARRIVALS);
            mbar_init(ring.empty(s), CONSUMER_WARPS);
        }
        fence_mbarrier_init();
    }
    sync_threads();
    if warp_id() >= CONSUMER_WARPS {
        produce::<DUAL>(p, &ring, tile, (c_begin, chunks));
    } else {
        let mut acc = [0.0f32; 128];
        consume(&ring, chunks, &mut acc);
        let s = (p.gscale0, p.gscale1);
        if DUAL && split {
            store_gate_up_partials(p, lin - p.split_from, &acc, s);
        } else {
            store_block::<DUAL>(p, tile, split, &acc, s);
        }
    }
    // Every thread counts in the barrier of the split-K completion (the producer too).
    if DUAL && split {
        reduce_gate_up(p, tile, lin - p.split_from);
    } else if split {
        reduce_splits(p, tile, GEMM_BULK_WIDE_ROWS, GEMM_WG_TOKENS);
    }
}

/// f32 of one projection's partial of one gate+up tile in the workspace.
const TILE_ELEMS: u32 = GEMM_WG_ROWS * GEMM_WG_TOKENS;

/// The gate+up kernel's split tile `t` (counted from `split_from`): this thread's scaled f32
/// partials of gate and up, `[t][split][projection][token][row]` in `p.ws`.
#[inline(always)]
unsafe fn store_gate_up_partials(p: &GemmParams, t: u32, acc: &[f32; 128], (s0, s1): (f32, f32)) {
    let at = (t * p.splits + block_z()) * 2 * TILE_ELEMS;
    let ws = (p.ws as *mut f32).add(at as usize);
    unroll2!(J => {
        let tok = out_token(J as u32);
        unroll32!(F => {
            let (pj, f, s) = if F < 16 { (0, F, s0) } else { (1, F - 16, s1) };
            let i = pj * TILE_ELEMS + tok * GEMM_WG_ROWS + out_row(f as u32);
            let v = [acc[4 * F + 2 * J] * s, acc[4 * F + 2 * J + 1] * s];
            st_global_v2(ws.add(i as usize) as *mut u8, [v[0].to_bits(), v[1].to_bits()]);
        });
    });
}

/// The last block of the gate+up kernel's split tile `t` (output tile `tile`) to finish sums
/// gate's and up's partials in split order and writes bf16 `act(g)·u` (the others return).
/// The tile's counter is back at zero after.
#[inline(always)]
unsafe fn reduce_gate_up(p: &GemmParams, tile: (u32, u32), t: u32) {
    let counter = (p.counters as *mut u32).add(t as usize);
    if !last_block_to_finish(counter, p.splits, Smem::base()) {
        return;
    }
    let ws = (p.ws as *const f32).add((t * p.splits * 2 * TILE_ELEMS) as usize);
    let quads = GEMM_WG_ROWS / 4;
    let mut i = thread_x();
    while i < TILE_ELEMS / 4 {
        let (tl, rl) = (i / quads, 4 * (i % quads));
        let (tok, row) = (tile.1 * GEMM_WG_TOKENS + tl, tile.0 * GEMM_WG_ROWS + rl);
        if row < p.n && tok < p.tokens {
            let part = |pj: u32| {
                move |s: u32| {
                    let at = (s * 2 + pj) * TILE_ELEMS + tl * GEMM_WG_ROWS + rl;
                    ld_cg_v4_f32(ws.add(at as usize))
                }
            };
            let (g, u) = (sum_splits(p.splits, part(0)), sum_splits(p.splits, part(1)));
            let y: [f32; 4] = core::array::from_fn(|j| act_mul(p, g[j], u[j]));
            let out = (p.out as *mut u8).add(((tok * p.n + row) * 2) as usize);
            st_global_v2(out, [pack_bf16x2(y[0], y[1]), pack_bf16x2(y[2], y[3])]);
        }
        i += block_dim_x();
    }
}

/// Prefill gate+up over the BF16 overlay with the activation fused: bf16 `act(g)·u` out.
/// Block: [`GEMM_BULK_THREADS`] threads, [`GEMM_WG_ROWS`] rows × [`GEMM_WG_TOKENS`] tokens;
/// shared memory [`crate::params::GEMM_BULK_SMEM_BYTES`].
#[no_mangle]
pub unsafe extern "ptx-kernel" fn bf16_gemm_gate_up_act(p: GemmParams) {
    bulk_gemm::<true, false>(&p)
}

/// `bf16_gemm_gate_up_act` with K split over `blockIdx.z` (`GemmParams::splits`) for the tiles
/// from `GemmParams::split_from` on: the grid's last wave, which would leave SMs idle, runs
/// `splits` times as many blocks, each over part of K; the last block of such a tile sums
/// the f32 partials of gate and up and applies the activation.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn bf16_gemm_gate_up_act_splitk(p: GemmParams) {
    bulk_gemm::<true, true>(&p)
}

/// Prefill single projection over the BF16 overlay: bf16 out. Block: [`GEMM_BULK_THREADS`]
/// threads, [`GEMM_BULK_WIDE_ROWS`] rows × [`GEMM_WG_TOKENS`] tokens; shared memory as the
/// gate+up kernel's.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn bf16_gemm(p: GemmParams) {
    bulk_gemm::<false, false>(&p)
}

/// `bf16_gemm` with K split over `blockIdx.z` (`GemmParams::splits`): f32 partials in
/// `GemmParams::ws`, summed by the last block of each tile.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn bf16_gemm_splitk(p: GemmParams) {
    bulk_gemm::<false, true>(&p)
}
