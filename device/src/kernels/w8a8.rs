//! FP8 × FP8 prefill (`w8a8`): the FP8 overlay's E4M3 weight tiles times activations quantized
//! per token to E4M3 (`quantize_e4m3_act`), on Hopper's FP8 warpgroup tensor cores
//! (`wgmma.m64n128k32.f32.e4m3.e4m3`, sm_90a): twice the bf16 rate, and no dequantization.
//!
//! The GEMMs are the persistent, warp-specialized kernels of [`super::bulk_gemm`] (its producer
//! warpgroup, ring of stages, units and cluster pairs) with this module's [`Fp8Tiles`] as the
//! format: 384 threads, 128 rows × 128 tokens a tile (gate's and up's 128 rows in the gate+up
//! kernel), a stage being 128 columns of K: the activations (128 tokens × 128 E4M3, K-major,
//! 128-byte swizzle, by TMA through `GemmParams::xmap`: the B operand) and each row tile's two
//! 1 KiB FP8 tiles (one bulk copy of 2 KiB; the `_x2` forms multicast half of them each into
//! both blocks of a pair over adjacent token tiles). Consumer warp `w` (warpgroup `w / 4`)
//! multiplies row tile `w` of each projection: it reads its lane's bytes of the two tiles from
//! shared memory into registers (the A operand). A lane's bytes of a tile
//! (`formats::tiles`, [`TileFormat::Fp8`]) cover, per 16 columns, columns `2q, 2q+1, 2q+8,
//! 2q+9` of rows `g` and `g+8`; two byte permutes make them the lane's k32 A registers, and the
//! activations are stored with the same columns in the same byte slots
//! ([`crate::formats::e4m3::ACT_SLOT`]), so the products pair the right columns.
//!
//! Scales: the tiles of a 128 × 128 checkpoint block share one f16 scale, so a stage has one
//! scale per row tile and projection, which the consumer loads from global memory a stage
//! ahead. The accumulator holds the sum divided by the current scale: before a stage's
//! products are added (and after the previous stage's completed), the warp multiplies its
//! accumulators by `last / s` when the scale changed; a tile with scale 0 contributes nothing
//! (its A registers are zeroed and the scale is left as it was), as does the missing second
//! tile of the last stage when K has an odd number of 64-column tiles. The epilogue multiplies
//! by the last scale, the tensor's global scale and the token's inverse activation scale.
use super::bulk_gemm::{
    bulk_entries, bulk_gemm, release, BulkFormat, Ring, Unit, ROW_TILES, X_BYTES,
};
use super::elementwise::gelu_tanh;
use super::gemv::silu;
use crate::dsl::*;
use crate::formats::e4m3::{act_scale, act_scale_f16, ACT_SLOT};
use crate::formats::nvfp4::{TILE_K, TILE_ROWS};
use crate::formats::tiles::TileFormat;
use crate::params::{
    w8a16_stage_bytes, w8a16_stages, w8a8_stage_bytes, w8a8_stages, GemmParams, Q8Params,
    GEMM_WG_TOKENS, Q8_THREADS,
};

/// Bytes of one FP8 tile's codes.
const CODE_BYTES: u32 = TileFormat::Fp8.code_bytes() as u32;

/// bf16 `[tokens][k]` → E4M3 `[tokens][k]` (columns in [`ACT_SLOT`] order within each 16) and
/// f32 `[tokens]` inverse scales ([`act_scale`] of the token's largest magnitude). One block of
/// [`Q8_THREADS`] per token; `k` a multiple of 16. Two passes over the token's row: the
/// maximum, then the codes (the second pass is served by L1/L2).
#[no_mangle]
pub unsafe extern "ptx-kernel" fn quantize_e4m3_act(p: Q8Params) {
    quantize_act::<false>(p)
}

/// bf16 `[tokens][k]` → f16 `[tokens][k]` (columns in order) times a per-token power of two,
/// and f32 `[tokens]` inverse scales ([`act_scale_f16`]), for the FP8 × bf16 GEMMs
/// (`w8a16_gemm*`). As [`quantize_e4m3_act`]; `qs` may be `x` (in place: each thread rewrites
/// only the 16-column groups it read, and both passes read through L2, not the read-only path).
#[no_mangle]
pub unsafe extern "ptx-kernel" fn quantize_f16_act(p: Q8Params) {
    quantize_act::<true>(p)
}

/// [`quantize_e4m3_act`] (`F16` off) or [`quantize_f16_act`].
#[inline(always)]
unsafe fn quantize_act<const F16: bool>(p: Q8Params) {
    // Launched as the dependent of the gate+up GEMM whose output it reads (a no-op otherwise);
    // the down GEMM after it may launch at once and waits in turn.
    grid_dependency_wait();
    launch_dependents();
    let tok = block_x();
    if tok >= p.tokens {
        return;
    }
    let row = (p.x as *const u8).add(tok as usize * p.k as usize * 2);
    let groups = p.k / 16;
    let load = |g: u32| {
        let at = row.add(g as usize * 32);
        if F16 {
            let v = |a: *const u8| ld_cg_v4_f32(a as *const f32).map(f32::to_bits);
            (v(at), v(at.add(16)))
        } else {
            (ld_nc_v4(at), ld_nc_v4(at.add(16)))
        }
    };
    let mut amax = 0.0f32;
    let mut g = thread_x();
    while g < groups {
        let (a, b) = load(g);
        unroll4!(I, 0 => {
            amax = max_nan(amax, bf16_to_f32(a[I] as u16).abs());
            amax = max_nan(amax, bf16_to_f32((a[I] >> 16) as u16).abs());
            amax = max_nan(amax, bf16_to_f32(b[I] as u16).abs());
            amax = max_nan(amax, bf16_to_f32((b[I] >> 16) as u16).abs());
        });
        g += Q8_THREADS;
    }
    let amax = block_max(amax);
    let (f, inv) = if F16 {
        act_scale_f16(amax)
    } else {
        act_scale(amax)
    };
    if thread_x() == 0 {
        *(p.ds as *mut f32).add(tok as usize) = inv;
    }
    let width = if F16 { 2 } else { 1 };
    let out = (p.qs as *mut u8).add(tok as usize * p.k as usize * width);
    let mut g = thread_x();
    while g < groups {
        let (a, b) = load(g);
        if F16 {
            // Word q of each half: columns 2q, 2q+1 (low half first), as bf16 words are.
            let half = |v: [u32; 4]| {
                let mut w = [0u32; 4];
                unroll4!(Q, 0 => {
                    w[Q] = pack_f16x2(
                        bf16_to_f32(v[Q] as u16) * f,
                        bf16_to_f32((v[Q] >> 16) as u16) * f,
                    );
                });
                w
            };
            st_global_v4(out.add(g as usize * 32), half(a));
            st_global_v4(out.add(g as usize * 32 + 16), half(b));
        } else {
            // Word q: columns 2q, 2q+1 (a[q]) then 2q+8, 2q+9 (b[q]), as ACT_SLOT places them.
            let mut w = [0u32; 4];
            unroll4!(Q, 0 => {
                let lo = f32x2_to_e4m3x2(
                    bf16_to_f32((a[Q] >> 16) as u16) * f,
                    bf16_to_f32(a[Q] as u16) * f,
                );
                let hi = f32x2_to_e4m3x2(
                    bf16_to_f32((b[Q] >> 16) as u16) * f,
                    bf16_to_f32(b[Q] as u16) * f,
                );
                w[Q] = lo | (hi << 16);
            });
            st_global_v4(out.add(g as usize * 16), w);
        }
        g += Q8_THREADS;
    }
}

/// The maximum (NaN-propagating) of `v` over the block's [`Q8_THREADS`] threads.
#[inline(always)]
unsafe fn block_max(v: f32) -> f32 {
    let smem = Smem::base();
    let v = warp_max(v);
    if lane() == 0 {
        smem.add(warp_id() * 4).st_f32(v);
    }
    sync_threads();
    let mut m = 0.0f32;
    for w in 0..Q8_THREADS / 32 {
        m = max_nan(m, smem.add(w * 4).ld_f32());
    }
    m
}

// The slots the quantizer writes must be the ones `ACT_SLOT` names (checked at compile time).
const _: () = {
    let mut q = 0;
    while q < 4 {
        assert!(ACT_SLOT[2 * q] == 4 * q && ACT_SLOT[2 * q + 1] == 4 * q + 1);
        assert!(ACT_SLOT[2 * q + 8] == 4 * q + 2 && ACT_SLOT[2 * q + 9] == 4 * q + 3);
        q += 1;
    }
};

/// The FP8 overlay's tiles as [`bulk_gemm`]'s format; the single projection's block is one
/// 128-row slice. With E4M3 activations (`A16` off: `w8a8_gemm*`) a stage is two 64-column
/// tiles (128 columns, one checkpoint block) multiplied by `wgmma…k32.e4m3`; with f16
/// activations (`A16`: `w8a16_gemm*`, the activations keeping bf16's precision) a stage is one
/// tile, whose lane bytes become f16 A registers (`cvt…f16x2.e4m3x2`, exact) for
/// `wgmma…k16.f16`, half the FP8 rate.
pub(super) struct Fp8Tiles<const A16: bool>;

/// A consumer thread's accumulators: gate's (or the single projection's) and up's 64, each the
/// sum divided by its running scale `run`.
pub(super) struct Fp8Acc {
    g: [f32; 64],
    u: [f32; 64],
    run: [f32; 2],
}

impl<const A16: bool> BulkFormat for Fp8Tiles<A16> {
    type Acc = Fp8Acc;
    const CHUNK_TILES: u32 = if A16 { 1 } else { 2 };
    const TILE_BYTES: u32 = CODE_BYTES;
    const SINGLE_SLICES: u32 = 1;
    // The lanes read their tile bytes with `ld.shared`: every lane releases the stage.
    const RELEASE_LANES: u32 = 32;
    // 128 accumulators, two projections' A registers and lane bytes: at 168 registers ptxas
    // serialized the gate+up kernel's `wgmma`s (C7512) and spilled.
    const CONSUMER_REGS: u32 = super::bulk_gemm::PRODUCER_SHARE.1;
    #[inline(always)]
    fn stage_bytes(dual: bool) -> u32 {
        if A16 {
            w8a16_stage_bytes(dual)
        } else {
            w8a8_stage_bytes(dual)
        }
    }
    #[inline(always)]
    fn stages(dual: bool) -> u32 {
        if A16 {
            w8a16_stages(dual)
        } else {
            w8a8_stages(dual)
        }
    }
    #[inline(always)]
    fn zero() -> Fp8Acc {
        Fp8Acc {
            g: [0.0; 64],
            u: [0.0; 64],
            // With f16 activations the block scales are applied to the weights: the sums are
            // whole.
            run: [if A16 { 1.0 } else { 0.0 }; 2],
        }
    }
    /// A consumer warp, one unit: per stage (the block's ring chunks `i0 ..`, K's chunks
    /// `w.chunks.0 ..` of 128 or, with `A16`, 64 columns) it waits for the stage, reads its row
    /// tile's lane bytes, waits for the previous stage's products and releases that stage,
    /// rescales, and issues the stage's 4 (8 with gate and up) `wgmma.m64n128k32` (`A16`:
    /// `m64n128k16`) over the block's 128 tokens.
    #[inline(always)]
    unsafe fn consume<const DUAL: bool, const PAIR: bool>(
        p: &GemmParams,
        ring: &Ring,
        w: &Unit,
        i0: u32,
        acc: &mut Fp8Acc,
    ) {
        if A16 {
            return consume_f16::<DUAL, PAIR>(p, ring, w, i0, acc);
        }
        let (c0, chunks) = w.chunks;
        let k_tiles = p.k / TILE_K as u32;
        let row_tile = w.tile.0 * ROW_TILES + warp_id();
        let live_row = row_tile < p.n / TILE_ROWS as u32;
        // Stage `c`'s scale of projection `sc` (the first tile's: both tiles are one block's).
        let scale = |sc: u64, c: u32| {
            if live_row {
                let at = (row_tile * k_tiles + 2 * c) as usize;
                f16_to_f32_bits(*(sc as *const u32).add(at) & 0xFFFF)
            } else {
                0.0
            }
        };
        let scales = |c: u32| (scale(p.s0, c), if DUAL { scale(p.s1, c) } else { 0.0 });
        let mut next = scales(c0);
        // This lane's bytes of row tile `warp` in a stage: gate's (or the single projection's),
        // then up's 8 row tiles later.
        let lane_at = X_BYTES + warp_id() * 2 * CODE_BYTES + lane() * 16;
        for j in 0..chunks {
            let (i, c) = (i0 + j, c0 + j);
            let cur = next;
            if j + 1 < chunks {
                next = scales(c + 1);
            }
            mbar_wait(ring.full(i), ring.parity(i));
            let st = ring.stage(i);
            let (at0, at1) = (
                st.add(lane_at),
                st.add(lane_at + ROW_TILES * 2 * CODE_BYTES),
            );
            let second = 2 * c + 1 < k_tiles;
            wgmma_wait::<0>();
            if j >= 1 {
                release::<PAIR>(ring.empty(i - 1));
            }
            let live0 = rescale(&mut acc.g, &mut acc.run[0], cur.0);
            let live1 = DUAL && rescale(&mut acc.u, &mut acc.run[1], cur.1);
            // Every step's A registers first, then one fence and the stage's `wgmma`s back to
            // back (a fence a step made ptxas issue them step by step, as in `stage_f16`).
            let mut a = [[[0u32; 4]; 2]; 4];
            unroll4!(J, 0 => {
                // Step J: tile J / 2 of the stage, its half J % 2.
                let off = (J as u32 / 2) * CODE_BYTES + (J as u32 % 2) * 512;
                let here = J < 2 || second;
                a[J][0] = a_regs(at0.add(off).ld_v4(), live0 && here);
                if DUAL {
                    a[J][1] = a_regs(at1.add(off).ld_v4(), live1 && here);
                }
            });
            wgmma_fence();
            unroll4!(J, 0 => {
                let desc = desc_k128b(st.add(32 * J as u32));
                wgmma_m64n128k32_e4m3(&mut acc.g, a[J][0], desc);
                if DUAL {
                    wgmma_m64n128k32_e4m3(&mut acc.u, a[J][1], desc);
                }
            });
            wgmma_commit();
        }
        wgmma_wait::<0>();
        if chunks > 0 {
            release::<PAIR>(ring.empty(i0 + chunks - 1));
        }
    }

    /// A consumer thread's outputs of unit `w`: `acc[4F + I]` is token `8F + 2q + I % 2` of the
    /// tile, row `g + 8·(I / 2)` of the warp's row tile; bf16 `act(gate)·up`, or the single
    /// projection, to `p.out` (`[tokens][n]`). Rows and tokens past the ends are not written.
    #[inline(always)]
    unsafe fn store_unit<const DUAL: bool>(p: &GemmParams, _ring: &Ring, w: Unit, acc: &Fp8Acc) {
        let (g, tq) = (lane() / 4, lane() % 4);
        let row_tile = w.tile.0 * ROW_TILES + warp_id();
        if row_tile >= p.n / TILE_ROWS as u32 {
            return;
        }
        let tok0 = w.tile.1 * GEMM_WG_TOKENS;
        let (s0, s1) = (acc.run[0] * p.gscale0, acc.run[1] * p.gscale1);
        let xs = p.x_scales as *const f32;
        unroll16!(F => {
            unroll4!(I, 0 => {
                let tok = tok0 + 8 * F as u32 + 2 * tq + (I as u32 & 1);
                let row = row_tile * TILE_ROWS as u32 + g + if I >= 2 { 8 } else { 0 };
                if tok < p.tokens {
                    let inv = *xs.add(tok as usize);
                    let y0 = acc.g[4 * F + I] * s0 * inv;
                    let y = if DUAL {
                        let y1 = acc.u[4 * F + I] * s1 * inv;
                        (if p.act == 2 { gelu_tanh(y0) } else { silu(y0) }) * y1
                    } else {
                        y0
                    };
                    *(p.out as *mut u16).add((tok * p.n + row) as usize) = f32_to_bf16(y);
                }
            });
        });
    }
}

/// The k32 A registers of a lane's 16 bytes of one tile half (columns 0..32 or 32..64): rows
/// g / g+8 of columns 2q, 2q+1, 2q+8, 2q+9 of the half's two 16-column groups; zeros when the
/// tile does not contribute.
#[inline(always)]
fn a_regs(v: [u32; 4], live: bool) -> [u32; 4] {
    if !live {
        return [0; 4];
    }
    [
        prmt(v[0], v[1], 0x5410),
        prmt(v[0], v[1], 0x7632),
        prmt(v[2], v[3], 0x5410),
        prmt(v[2], v[3], 0x7632),
    ]
}

/// [`Fp8Tiles`]`<true>`'s consumer warp, one unit: per stage (the block's ring chunks `i0 ..`,
/// K's 64-column tiles `w.chunks.0 ..`) it waits for the stage, turns its row tile's lane bytes
/// into f16 A registers times the tile's block scale (`block / global`, f16, loaded a stage
/// ahead: the weights as the FP8 decode GEMV multiplies them), issues the stage's 4 (8 with gate
/// and up) `wgmma.m64n128k16.f16` over the block's 128 tokens, and releases the stage before
/// once its products are done (one stage's products stay in flight, as the BF16 kernel's: no
/// running scale to bring the accumulators to). The `wgmma`s read their A registers until they
/// complete, so consecutive stages must not share them: the loop runs stages in pairs, two
/// copies of [`stage_f16`] with registers of their own, and a stage's registers are written
/// again two stages later, after `wgmma.wait_group 1` has seen its products done.
#[inline(always)]
unsafe fn consume_f16<const DUAL: bool, const PAIR: bool>(
    p: &GemmParams,
    ring: &Ring,
    w: &Unit,
    i0: u32,
    acc: &mut Fp8Acc,
) {
    let (c0, chunks) = w.chunks;
    let k_tiles = p.k / TILE_K as u32;
    let row_tile = w.tile.0 * ROW_TILES + warp_id();
    let s = F16Stage {
        k_tiles,
        row_tile,
        live: row_tile < p.n / TILE_ROWS as u32,
        // This lane's bytes of row tile `warp` in a stage (one 1 KiB tile a row tile): gate's
        // (or the single projection's), then up's 8 row tiles later.
        lane_at: X_BYTES + warp_id() * CODE_BYTES + lane() * 16,
    };
    let mut next = s.scales::<DUAL>(p, c0);
    let mut j = 0;
    while j < chunks {
        stage_f16::<DUAL, PAIR>(p, ring, &s, (i0, c0, chunks, j), &mut next, acc);
        if j + 1 < chunks {
            stage_f16::<DUAL, PAIR>(p, ring, &s, (i0, c0, chunks, j + 1), &mut next, acc);
        }
        j += 2;
    }
    wgmma_wait::<0>();
    if chunks > 0 {
        release::<PAIR>(ring.empty(i0 + chunks - 1));
    }
}

/// What a consumer warp of [`consume_f16`] keeps over a unit.
struct F16Stage {
    k_tiles: u32,
    row_tile: u32,
    /// The warp's row tile is inside the matrix.
    live: bool,
    /// The lane's first byte in a stage.
    lane_at: u32,
}

impl F16Stage {
    /// Tile `c`'s scale words of gate (or the single projection) and up (their low halves are
    /// the f16 scales); 0 past the matrix.
    #[inline(always)]
    unsafe fn scales<const DUAL: bool>(&self, p: &GemmParams, c: u32) -> (u32, u32) {
        let at = (self.row_tile * self.k_tiles + c) as usize;
        let one = |sc: u64| {
            if self.live {
                *(sc as *const u32).add(at)
            } else {
                0
            }
        };
        (one(p.s0), if DUAL { one(p.s1) } else { 0 })
    }
}

/// Stage `j` of [`consume_f16`]'s unit (`(i0, c0, chunks, j)`: the unit's first ring chunk,
/// first tile of K, tiles, this stage): its products with `*next` as its scales, the next
/// stage's scales loaded into `*next`, the stage before released once its products are done.
#[inline(always)]
unsafe fn stage_f16<const DUAL: bool, const PAIR: bool>(
    p: &GemmParams,
    ring: &Ring,
    s: &F16Stage,
    (i0, c0, chunks, j): (u32, u32, u32, u32),
    next: &mut (u32, u32),
    acc: &mut Fp8Acc,
) {
    let i = i0 + j;
    let cur = *next;
    if j + 1 < chunks {
        *next = s.scales::<DUAL>(p, c0 + j + 1);
    }
    mbar_wait(ring.full(i), ring.parity(i));
    let st = ring.stage(i);
    let (at0, at1) = (
        st.add(s.lane_at),
        st.add(s.lane_at + ROW_TILES * CODE_BYTES),
    );
    // The lane's 16 bytes of the tile's columns 0..32 and of 32..64: steps 0, 1 and 2, 3 (8
    // bytes a step). Every step's A registers are made before the stage's one fence, so its
    // `wgmma`s issue back to back as one group (a fence between steps made ptxas close a
    // scoreboard group per step, and `wait_group 1` then kept only the last step in flight).
    let bytes = |at: Smem| [at.ld_v4(), at.add(512).ld_v4()];
    let b0 = bytes(at0);
    let b1 = if DUAL { bytes(at1) } else { b0 };
    let mut a = [[[0u32; 4]; 2]; 4];
    unroll4!(J, 0 => {
        let (h, q) = (J / 2, 2 * (J % 2));
        a[J][0] = f16_regs([b0[h][q], b0[h][q + 1]], cur.0, s.live);
        if DUAL {
            a[J][1] = f16_regs([b1[h][q], b1[h][q + 1]], cur.1, s.live);
        }
    });
    wgmma_fence();
    unroll4!(J, 0 => {
        // Step J: columns 16J.. of the tile.
        let desc = desc_k128b(st.add(32 * J as u32));
        wgmma_m64n128k16_f16(&mut acc.g, a[J][0], desc);
        if DUAL {
            wgmma_m64n128k16_f16(&mut acc.u, a[J][1], desc);
        }
    });
    wgmma_commit();
    wgmma_wait::<1>();
    if j >= 1 {
        release::<PAIR>(ring.empty(i - 1));
    }
}

/// The k16 f16 A registers of a lane's 8 bytes of one 16-column step (`formats::tiles`: the
/// E4M3 pairs of registers 0..4 in order, even column in the low byte), each times the low half
/// of `scale` (the tile's f16 block scale); zeros for a row tile past the matrix.
#[inline(always)]
fn f16_regs(v: [u32; 2], scale: u32, live: bool) -> [u32; 4] {
    if !live {
        return [0; 4];
    }
    [
        hmul2_by_lo(e4m3x2_to_f16x2(v[0]), scale),
        hmul2_by_lo(e4m3x2_hi_to_f16x2(v[0]), scale),
        hmul2_by_lo(e4m3x2_to_f16x2(v[1]), scale),
        hmul2_by_lo(e4m3x2_hi_to_f16x2(v[1]), scale),
    ]
}

/// Brings `acc` (the sum divided by `*run`) to the scale of a stage with scale `s` before its
/// products are added; returns whether the stage contributes (`s != 0`).
#[inline(always)]
fn rescale(acc: &mut [f32; 64], run: &mut f32, s: f32) -> bool {
    if s == 0.0 {
        return false;
    }
    if *run != s {
        if *run != 0.0 {
            let r = *run / s;
            for a in acc.iter_mut() {
                *a *= r;
            }
        }
        *run = s;
    }
    true
}

bulk_entries! {
    /// FP8 × FP8 prefill gate+up with the activation fused: E4M3 activations (through `xmap`, with
    /// `x_scales`) times the FP8 overlay's gate and up tiles; bf16 `act(g)·u` out. Persistent:
    /// [`crate::params::GEMM_BULK_THREADS`] threads, 128 rows × 128 tokens a unit; shared memory
    /// `w8a8_smem_bytes(true)`.
    w8a8_gemm_gate_up_act: Fp8Tiles<false>, true, false, false;
    /// FP8 × FP8 prefill single projection (down): bf16 out. As `w8a8_gemm_gate_up_act`; shared
    /// memory `w8a8_smem_bytes(false)`.
    w8a8_gemm: Fp8Tiles<false>, false, false, false;
    /// `w8a8_gemm_gate_up_act` in clusters of two blocks over pairs of token tiles, each weight
    /// stage copied once per pair and multicast ([`crate::params::GemmShape::cluster`]).
    w8a8_gemm_gate_up_act_x2: Fp8Tiles<false>, true, false, true;
    /// `w8a8_gemm` in cluster pairs, as `w8a8_gemm_gate_up_act_x2`.
    w8a8_gemm_x2: Fp8Tiles<false>, false, false, true;
    /// FP8 × bf16 prefill gate+up with the activation fused (the FP8 overlay's default arm):
    /// f16 activations (through `xmap`, with `x_scales`: [`quantize_f16_act`]) times the FP8
    /// overlay's gate and up tiles on `wgmma…k16.f16`; bf16 `act(g)·u` out. As
    /// `w8a8_gemm_gate_up_act`; shared memory `w8a16_smem_bytes(true)`.
    w8a16_gemm_gate_up_act: Fp8Tiles<true>, true, false, false;
    /// FP8 × bf16 prefill single projection (down): bf16 out; shared memory
    /// `w8a16_smem_bytes(false)`.
    w8a16_gemm: Fp8Tiles<true>, false, false, false;
    /// `w8a16_gemm_gate_up_act` in cluster pairs, as `w8a8_gemm_gate_up_act_x2`.
    w8a16_gemm_gate_up_act_x2: Fp8Tiles<true>, true, false, true;
    /// `w8a16_gemm` in cluster pairs, as `w8a8_gemm_gate_up_act_x2`.
    w8a16_gemm_x2: Fp8Tiles<true>, false, false, true;
}
