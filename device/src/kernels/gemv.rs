//! Decode GEMV on tensor cores: `out[t][row] = W[row]·act[t]` for m ≤ 8 tokens, generic over
//! the tiled weight format ([`Tiles`]: NVFP4, and the BF16 / FP8 / Q2_0 / Q4_K overlays).
//!
//! One warp owns one 16-row tile (two with the dual gate+up kernel: gate and up rows of the same
//! tile, sharing the activation fragments) and streams it across its split of K in 64-column
//! chunks: per chunk each lane loads its share of the tile per projection (NVFP4: 16 code bytes
//! and 8 scale bytes), turns it into f16 A-fragments ([`Tiles::fragments`]; NVFP4: two masks,
//! `cvt.rn.f16x2.e4m3x2`, one `mul.f16x2` by the scale), and issues four `mma.m16n8k16` with the
//! tokens as the 8 B columns; `T::UNROLL` chunks stay in flight (a rolling pipeline; the
//! single-projection kernels issue their first loads while the activations are being staged).
//! Activations are staged per block into shared memory as f16 scaled by a power of two per
//! token (so bf16 inputs convert exactly and nothing overflows), already in B-fragment order. Split-K partials are summed by
//! the last block of each row group in a fixed order (deterministic).
//!
//! A launch with a [`source::PACKED`] input skips the staging: an earlier launch left the
//! activations in global memory in exactly the staged form (the row-group-0 blocks of a launch
//! with `pack_out` set, or `silu_mul_pack`/`gelu_mul_pack`), and each lane reads its B fragments from
//! there (32 bytes per token and chunk, served by L1 as the warps of a block share them): no
//! prologue, no barrier, and no shared memory that grows with m × split.
use super::tiles::{Bf16, Fp8, Nvfp4, Q4k, Tiles, Q2};
use crate::dsl::*;
use crate::formats::nvfp4::{TILE_K, TILE_ROWS};
use crate::formats::packed::pow2_scale;
use crate::params::{
    source, GemvParams, GEMV_ROWS_PER_BLOCK, GEMV_SMEM_HEADER, GEMV_THREADS, GEMV_TOKEN_WORDS,
    GEMV_WAIT_INPUT, PACK_SCALE_STRIDE, PACK_TOKEN_WORDS,
};

const WARPS: u32 = GEMV_THREADS / 32;
const SCALES_AT: u32 = 0;
const FLAG_AT: u32 = 32;
const RED_AT: u32 = 256;

/// The activation pair at element `idx` (even) of a `source::*` input: bf16 `act0`, f32
/// `act0`, or silu(`act0`)·`act1` from two f32 buffers.
#[inline(always)]
pub(crate) unsafe fn act_pair(src: u32, act0: u64, act1: u64, idx: usize) -> (f32, f32) {
    match src {
        source::BF16 => {
            let w = *((act0 as *const u16).add(idx) as *const u32);
            (bf16_to_f32(w as u16), bf16_to_f32((w >> 16) as u16))
        }
        source::SILU_F32 => {
            let g = *((act0 as *const f32).add(idx) as *const [f32; 2]);
            let u = *((act1 as *const f32).add(idx) as *const [f32; 2]);
            (silu(g[0]) * u[0], silu(g[1]) * u[1])
        }
        _ => {
            let a = *((act0 as *const f32).add(idx) as *const [f32; 2]);
            (a[0], a[1])
        }
    }
}

/// `x * sigmoid(x)`, finite for every finite x (exp overflow gives -0 or x). Approximate
/// exponential and reciprocal (a few ulp of f32; every consumer rounds the result to f16 or
/// bf16), not an IEEE division, which costs a slow-path call per element.
#[inline(always)]
pub fn silu(x: f32) -> f32 {
    x * rcp(1.0 + exp(-x))
}

/// Eight consecutive activations of token row offset `idx` (a multiple of 8) of a
/// `source::*` input, read with 16-byte read-only loads (the layer requires 16-byte-aligned
/// inputs; its scratch buffers are allocations): bf16 `act0`, f32 `act0`, or
/// silu(`act0`)·`act1` from two f32 buffers.
#[inline(always)]
unsafe fn act8<const SRC: u32>(act0: u64, act1: u64, idx: usize) -> [f32; 8] {
    let mut v = [0.0f32; 8];
    if SRC == source::BF16 {
        let w = ld_nc_v4((act0 as *const u16).add(idx) as *const u8);
        unroll4!(E, 0 => {
            v[2 * E] = f32::from_bits(w[E] << 16);
            v[2 * E + 1] = f32::from_bits(w[E] & 0xFFFF_0000);
        });
    } else {
        let a = (act0 as *const f32).add(idx) as *const u8;
        let (a0, a1) = (ld_nc_v4(a), ld_nc_v4(a.add(16)));
        unroll4!(E, 0 => {
            v[E] = f32::from_bits(a0[E]);
            v[4 + E] = f32::from_bits(a1[E]);
        });
        if SRC == source::SILU_F32 {
            let u = (act1 as *const f32).add(idx) as *const u8;
            let (u0, u1) = (ld_nc_v4(u), ld_nc_v4(u.add(16)));
            unroll4!(E, 0 => {
                v[E] = silu(v[E]) * f32::from_bits(u0[E]);
                v[4 + E] = silu(v[4 + E]) * f32::from_bits(u1[E]);
            });
        }
    }
    v
}

/// Stages this block's split of the activations into shared memory (f16, B-fragment order) and
/// the per-token inverse scales into the header. Two passes over global memory: the first finds
/// each token's maximum, the second (served mostly by L1) scales, packs and stores; no raw copy
/// is kept in shared memory, so a split can hold 3× the chunks of a one-pass staging.
/// Pass 1 ([`stage_amax`]) and pass 2 ([`stage_pack`]) are separate so the caller can issue its
/// first weight loads between them. Each thread handles 8 consecutive columns at a time
/// ([`act8`]); the source is a const parameter, so the loops carry no branch on it.
/// The BF16 format skips pass 1: its staging is bf16, as wide in range as the f32 source.
#[inline(always)]
unsafe fn stage_amax<const SRC: u32>(p: &GemvParams, chunk0: u32, nchunks: u32) {
    let smem = Smem::base();
    let tid = thread_x();
    let vecs = nchunks * (TILE_K as u32 / 8);
    let k0 = chunk0 * TILE_K as u32;
    for t in 0..p.m {
        let mut amax = 0.0f32;
        let mut i = tid;
        while i < vecs {
            let v = act8::<SRC>(p.act0, p.act1, (t * p.k + k0 + 8 * i) as usize);
            unroll8!(E => {
                amax = max_nan(amax, v[E].abs());
            });
            i += GEMV_THREADS;
        }
        amax = warp_max(amax);
        if lane() == 0 {
            smem.add(RED_AT + (t * WARPS + warp_id()) * 4).st_f32(amax);
        }
    }
    sync_threads();
}

/// Pass 2 of the staging: scales, packs and stores (see [`stage_amax`]). Columns `8i..8i+8`
/// of a chunk are the four `tq` pairs of one B-fragment register `q` as f16, or with `BF` (the
/// BF16 format) four consecutive bf16 words of one lane in that format's permuted K order.
#[inline(always)]
unsafe fn stage_pack<const SRC: u32, const BF: bool>(p: &GemvParams, chunk0: u32, nchunks: u32) {
    let smem = Smem::base();
    let tid = thread_x();
    let vecs = nchunks * (TILE_K as u32 / 8);
    let k0 = chunk0 * TILE_K as u32;
    for t in 0..p.m {
        // bf16 has f32's range: the BF16 format stages the values as they are (no amax pass).
        let (f, inv) = if BF {
            (1.0, 1.0)
        } else {
            let mut amax = 0.0f32;
            for w in 0..WARPS {
                amax = max_nan(amax, smem.add(RED_AT + (t * WARPS + w) * 4).ld_f32());
            }
            pow2_scale(amax)
        };
        if tid == 0 {
            smem.add(SCALES_AT + t * 4).st_f32(inv);
        }
        let mut i = tid;
        while i < vecs {
            let v = act8::<SRC>(p.act0, p.act1, (t * p.k + k0 + 8 * i) as usize);
            let (c, kk) = (i / 8, (8 * i) % 64);
            let q = 2 * (kk / 16) + (kk % 16) / 8;
            let row = smem.add(GEMV_SMEM_HEADER + (c * p.m + t) * GEMV_TOKEN_WORDS * 4);
            if BF {
                // The BF16 format's order (`tiles::Bf16`): core matrix kg = kk / 8 = i % 8 is
                // lane kg % 4's words 4·(kg / 4) .. + 4.
                let at = row.add((i % 4) * 32 + (i / 4 % 2) * 16);
                // Four 4-byte stores, not one 16-byte one: a vector store's four consecutive
                // registers cost `bf16_gemv` a spill at its 64-register bound.
                unroll4!(E, 0 => {
                    at.add(4 * E as u32).st_u32(pack_bf16x2(v[2 * E] * f, v[2 * E + 1] * f));
                });
            } else {
                unroll4!(TQ, 0 => {
                    row.add((TQ as u32 * 8 + q) * 4)
                        .st_u32(pack_f16x2(v[2 * TQ] * f, v[2 * TQ + 1] * f));
                });
            }
            i += GEMV_THREADS;
        }
    }
    sync_threads();
}

/// Copies this block's staged split (shared memory, [`GEMV_TOKEN_WORDS`] per token and chunk)
/// to `p.pack_out` as a [`source::PACKED`] buffer, and its per-token inverse scales to
/// `p.pack_scales` at this split's slot. Runs after [`stage_pack`]'s barrier.
#[inline(always)]
unsafe fn write_pack(p: &GemvParams, chunk0: u32, nchunks: u32) {
    let smem = Smem::base();
    let vecs = nchunks * p.m * (PACK_TOKEN_WORDS / 4);
    let mut i = thread_x();
    while i < vecs {
        let (row, v) = (i / (PACK_TOKEN_WORDS / 4), i % (PACK_TOKEN_WORDS / 4));
        let from = smem.add(GEMV_SMEM_HEADER + (row * GEMV_TOKEN_WORDS + 4 * v) * 4);
        let word = (chunk0 * p.m + row) * PACK_TOKEN_WORDS + 4 * v;
        st_global_v4((p.pack_out as *mut u8).add(word as usize * 4), from.ld_v4());
        i += GEMV_THREADS;
    }
    let t = thread_x();
    if t < p.m {
        let inv = smem.add(SCALES_AT + t * 4).ld_f32();
        *(p.pack_scales as *mut f32).add((block_y() * PACK_SCALE_STRIDE + t) as usize) = inv;
    }
}

/// [`stage_amax`] for the launch's source.
#[inline(always)]
unsafe fn stage_amax_any(p: &GemvParams, chunk0: u32, nchunks: u32) {
    match p.source {
        source::BF16 => stage_amax::<{ source::BF16 }>(p, chunk0, nchunks),
        source::SILU_F32 => stage_amax::<{ source::SILU_F32 }>(p, chunk0, nchunks),
        _ => stage_amax::<{ source::F32 }>(p, chunk0, nchunks),
    }
}

/// [`stage_pack`] for the launch's source.
#[inline(always)]
unsafe fn stage_pack_any<const BF: bool>(p: &GemvParams, chunk0: u32, nchunks: u32) {
    match p.source {
        source::BF16 => stage_pack::<{ source::BF16 }, BF>(p, chunk0, nchunks),
        source::SILU_F32 => stage_pack::<{ source::SILU_F32 }, BF>(p, chunk0, nchunks),
        _ => stage_pack::<{ source::F32 }, BF>(p, chunk0, nchunks),
    }
}

/// Loads the 8 B-fragment words of absolute chunk `c` for this lane from a
/// [`source::PACKED`] buffer (zeros for tokens ≥ m).
#[inline(always)]
unsafe fn load_x_packed(p: &GemvParams, c: u32) -> [u32; 8] {
    let (g, tq) = (lane() / 4, lane() % 4);
    if g < p.m {
        let word = (c * p.m + g) * PACK_TOKEN_WORDS + tq * 8;
        let at = (p.act0 as *const u8).add(word as usize * 4);
        let a = ld_nc_v4(at);
        let b = ld_nc_v4(at.add(16));
        [a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3]]
    } else {
        [0; 8]
    }
}

/// The inverse scale of token `t` for this block's split: from the staging header, or from
/// the [`source::PACKED`] scale buffer.
#[inline(always)]
unsafe fn inv_scale<const PACKED: bool>(p: &GemvParams, t: u32) -> f32 {
    if PACKED {
        *(p.act1 as *const f32).add((block_y() * PACK_SCALE_STRIDE + t) as usize)
    } else {
        Smem::base().add(SCALES_AT + t * 4).ld_f32()
    }
}

/// Loads the 8 B-fragment words of chunk `c` for this lane (zeros for tokens ≥ m).
#[inline(always)]
unsafe fn load_x(p: &GemvParams, c: u32) -> [u32; 8] {
    let (g, tq) = (lane() / 4, lane() % 4);
    if g < p.m {
        let word = (c * p.m + g) * GEMV_TOKEN_WORDS + tq * 8;
        let at = Smem::base().add(GEMV_SMEM_HEADER + word * 4);
        let a = at.ld_v4();
        let b = at.add(16).ld_v4();
        [a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3]]
    } else {
        [0; 8]
    }
}

/// The whole GEMV; `DUAL` reads projection 1 too. A single-projection launch with a
/// [`source::PACKED`] input runs the body without staging (the dual kernels only stage).
#[inline(always)]
pub unsafe fn gemv<T: Tiles, const DUAL: bool>(p: &GemvParams) {
    if !DUAL && p.source == source::PACKED {
        gemv_body::<T, false, true>(p)
    } else {
        gemv_body::<T, DUAL, false>(p)
    }
}

#[inline(always)]
unsafe fn gemv_body<T: Tiles, const DUAL: bool, const PACKED: bool>(p: &GemvParams) {
    // The next kernel on the stream may start once every block of this grid has started (all
    // of them resident, so its blocks only take slots this grid no longer needs); it waits for
    // this grid's completion before it reads what this grid writes.
    launch_dependents();
    let split = block_y();
    let k_tiles = p.k / TILE_K as u32;
    let chunk0 = split * p.chunks_per_split;
    let nchunks = if chunk0 >= k_tiles {
        0
    } else {
        core::cmp::min(p.chunks_per_split, k_tiles - chunk0)
    };
    let depth = if DUAL { T::UNROLL_DUAL } else { T::UNROLL };
    let rt = block_x() * WARPS + warp_id();
    let row_tiles = p.n / TILE_ROWS as u32;
    let live = rt < row_tiles;
    let tile0 = (rt * k_tiles + chunk0) as usize;
    // One chunk's weights for both projections.
    let load = |c: u32| -> (T::Lane, T::Lane) {
        let t = tile0 + c as usize;
        (
            T::load(p.w0, p.s0, t),
            if DUAL {
                T::load(p.w1, p.s1, t)
            } else {
                T::ZERO
            },
        )
    };
    // The first `depth` chunks' loads: a single-projection kernel issues them before it reads
    // any activation (a programmatic dependent, `GEMV_WAIT_INPUT`, waits for its input's
    // producer only after them), so their latency overlaps the staging; the dual kernel after
    // both passes (holding them through the second pass would cost it a block per SM in
    // registers).
    let mut l = [(T::ZERO, T::ZERO); 4];
    let preload = |l: &mut [(T::Lane, T::Lane); 4]| {
        if live {
            unroll4!(I, 0 => {
                if (I as u32) < depth && (I as u32) < nchunks {
                    l[I] = load(I as u32);
                }
            });
        }
    };
    // Only single-projection launches are ever dependents of their input's producer.
    let wait = !DUAL && p.flags & GEMV_WAIT_INPUT != 0;
    if PACKED {
        preload(&mut l);
        if wait {
            grid_dependency_wait();
        }
    } else {
        if !DUAL {
            preload(&mut l);
        }
        if wait {
            grid_dependency_wait();
        }
        if !T::BF16 {
            stage_amax_any(p, chunk0, nchunks);
        }
        if T::BF16 {
            stage_pack_any::<true>(p, chunk0, nchunks);
        } else {
            stage_pack_any::<false>(p, chunk0, nchunks);
        }
        if DUAL {
            preload(&mut l);
        }
        if !DUAL && p.pack_out != 0 && block_x() == 0 {
            write_pack(p, chunk0, nchunks);
        }
    }

    let mut acc0 = [0.0f32; 4];
    let mut acc1 = [0.0f32; 4];
    if live {
        let mut use_chunk = |c: u32, l: &(T::Lane, T::Lane)| {
            let x = if PACKED {
                load_x_packed(p, chunk0 + c)
            } else {
                load_x(p, c)
            };
            T::chunk::<DUAL>(&mut acc0, &mut acc1, l, &x);
        };
        // Rolling pipeline: slot I holds chunk c + I; once used, it is refilled with chunk
        // c + I + depth, so `depth` chunks stay in flight while one is consumed.
        let mut c = 0;
        while c < nchunks {
            unroll4!(I, 0 => {
                let ci = c + I as u32;
                if (I as u32) < depth && ci < nchunks {
                    use_chunk(ci, &l[I]);
                    if ci + depth < nchunks {
                        l[I] = load(ci + depth);
                    }
                }
            });
            c += depth;
        }
    }
    epilogue::<PACKED>(p, 0, rt, &acc0, T::GEMV_FACTOR);
    if DUAL {
        epilogue::<PACKED>(p, 1, rt, &acc1, T::GEMV_FACTOR);
    }
    if p.splits > 1 {
        reduce_splits(p, if DUAL { 2 } else { 1 });
    }
}

/// Scales this warp's accumulators back and writes them: straight to the output when there is
/// one split, else to the split's partial slot. With LoRA (`lora_rank != 0`) the last split adds
/// the tile's `B·ax` delta ([`super::lora::gemv_delta`]) first, so it is summed exactly once.
#[inline(always)]
unsafe fn epilogue<const PACKED: bool>(
    p: &GemvParams,
    proj: u32,
    rt: u32,
    acc: &[f32; 4],
    factor: f32,
) {
    if rt >= p.n / TILE_ROWS as u32 {
        return;
    }
    let (g, tq) = (lane() / 4, lane() % 4);
    let gscale = if proj == 0 { p.gscale0 } else { p.gscale1 };
    let lora = super::lora::gemv_delta(p, proj, rt);
    for (i, &v) in acc.iter().enumerate() {
        let t = 2 * tq + (i as u32 & 1);
        if t >= p.m {
            continue;
        }
        let row = rt * TILE_ROWS as u32 + g + if i >= 2 { 8 } else { 0 };
        let mut y = v * inv_scale::<PACKED>(p, t) * (factor * gscale);
        if p.lora_rank != 0 {
            y += lora[i];
        }
        if p.splits == 1 {
            store_out(p, proj, t, row, y);
        } else {
            let ws = p.ws as *mut f32;
            st_cg_f32(
                ws.add((((block_y() * 2 + proj) * p.m + t) * p.n + row) as usize),
                y,
            );
        }
    }
}

#[inline(always)]
unsafe fn store_out(p: &GemvParams, proj: u32, t: u32, row: u32, y: f32) {
    let out = if proj == 0 { p.out0 } else { p.out1 };
    let idx = (t * p.n + row) as usize;
    if p.out_bf16 != 0 {
        *(out as *mut u16).add(idx) = f32_to_bf16(y);
    } else {
        *(out as *mut f32).add(idx) = y;
    }
}

/// The last block of a row group to finish sums every split's partials, in split order.
#[inline(always)]
unsafe fn reduce_splits(p: &GemvParams, projs: u32) {
    let counter = (p.counters as *mut u32).add(block_x() as usize);
    if !last_block_to_finish(counter, p.splits, Smem::base().add(FLAG_AT)) {
        return;
    }
    let per_proj = p.m * GEMV_ROWS_PER_BLOCK;
    let mut i = thread_x();
    while i < projs * per_proj {
        let (proj, rem) = (i / per_proj, i % per_proj);
        let (t, lr) = (rem / GEMV_ROWS_PER_BLOCK, rem % GEMV_ROWS_PER_BLOCK);
        let row = block_x() * GEMV_ROWS_PER_BLOCK + lr;
        if row < p.n {
            let mut sum = 0.0f32;
            for s in 0..p.splits {
                sum += ld_cg_f32(
                    (p.ws as *const f32).add((((s * 2 + proj) * p.m + t) * p.n + row) as usize),
                );
            }
            store_out(p, proj, t, row, sum);
        }
        i += GEMV_THREADS;
    }
}

/// Speculative-verify dual GEMV for 2 tokens: gate and up, f32 out.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn gemv_batch2_nvfp4_gate_up(p: GemvParams) {
    gemv::<Nvfp4, true>(&p)
}

/// Speculative-verify dual GEMV for 3 tokens.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn gemv_batch3_nvfp4_gate_up(p: GemvParams) {
    gemv::<Nvfp4, true>(&p)
}

/// Down GEMV for 2 tokens over an activated f32 input: bf16 out.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn gemv_batch2_nvfp4_down(p: GemvParams) {
    gemv::<Nvfp4, false>(&p)
}

/// Down GEMV for 3 tokens over an activated f32 input: bf16 out.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn gemv_batch3_nvfp4_down(p: GemvParams) {
    gemv::<Nvfp4, false>(&p)
}

/// One projection for m ≤ 4 tokens (any activation source and output type).
#[no_mangle]
pub unsafe extern "ptx-kernel" fn gemv_batchm_nvfp4(p: GemvParams) {
    gemv::<Nvfp4, false>(&p)
}

/// One projection for 5..=8 tokens (the full 8 B columns of the mma).
#[no_mangle]
pub unsafe extern "ptx-kernel" fn gemv_batch8_nvfp4(p: GemvParams) {
    gemv::<Nvfp4, false>(&p)
}

/// Dual GEMV, gate and up from the same bf16 input: f32 g and u out.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn gemv_nvfp4_gate_up(p: GemvParams) {
    gemv::<Nvfp4, true>(&p)
}

/// Down projection of silu(g)·u, computed from f32 g and u while staging: bf16 out.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn gemv_nvfp4_silu_down(p: GemvParams) {
    gemv::<Nvfp4, false>(&p)
}

/// Down projection of an f32 activation (e.g. gelu_mul's output): bf16 out.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn gemv_nvfp4_down(p: GemvParams) {
    gemv::<Nvfp4, false>(&p)
}

/// Declares the overlay GEMV entry points of one tiled format: `<prefix>_gate_up` (dual, bf16
/// in, f32 g and u out) and `<prefix>` (one projection, any activation source and output type),
/// both for any m ≤ 8.
macro_rules! overlay_gemv {
    ($tiles:ty, $dual:ident, $single:ident) => {
        /// Dual GEMV (gate and up from one read of the activations), m ≤ 8 tokens.
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $dual(p: GemvParams) {
            gemv::<$tiles, true>(&p)
        }

        /// One projection, m ≤ 8 tokens, any activation source (incl. SiLU-fused) and output.
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $single(p: GemvParams) {
            gemv::<$tiles, false>(&p)
        }
    };
}

overlay_gemv!(Bf16, bf16_gemv_gate_up, bf16_gemv);
overlay_gemv!(Fp8, w8a16_gemv_gate_up, w8a16_gemv);
overlay_gemv!(Q2, q2_0_gemv_gate_up, q2_0_gemv);
overlay_gemv!(Q4k, q4k_gemv_gate_up, q4k_gemv);
