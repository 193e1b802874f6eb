//! FP8 × FP8 prefill (`w8a8`): the FP8 overlay's E4M3 weight tiles times activations quantized
//! per token to E4M3 (`quantize_e4m3_act`), on Hopper's FP8 warpgroup tensor cores
//! (`wgmma.m64n128k32.f32.e4m3.e4m3`, sm_90a): twice the bf16 rate, and no dequantization.
//!
//! Blocks as the bf16 `wgmma` GEMMs' ([`super::wgemm`]): 256 threads, 128 rows × 128 tokens,
//! each warp one 16-row tile, [`w8a8_stages`] `cp.async` stages (4 for gate+up, 6 for down),
//! a stage being
//! [`W8A8_STAGE_K`] = 128 columns: the activations (128 E4M3 a token, K-major, 128-byte
//! swizzle, the B operand) and two 64-column FP8 tiles per warp and projection. A lane's bytes of
//! a tile (`formats::tiles`, [`TileFormat::Fp8`]) cover, per 16 columns, columns `2q, 2q+1,
//! 2q+8, 2q+9` of rows `g` and `g+8`; two byte permutes make them the lane's k32 A registers,
//! and the activations are stored with the same columns in the same byte slots
//! ([`crate::formats::e4m3::ACT_SLOT`]), so the products pair the right columns.
//!
//! Scales: the tiles of a 128 × 128 checkpoint block share one f16 scale, so one stage has one
//! scale `s` per warp and projection. The accumulator holds the sum divided by the current
//! scale: when a stage's scale differs from the last one, the warp multiplies its accumulators
//! by `last / s` (after the previous stage's products completed) before adding the stage's
//! products; a tile with scale 0 contributes nothing (its A registers are zeroed and the scale
//! is left as it was). The epilogue multiplies by the last scale, the tensor's global scale and
//! the token's inverse activation scale.
use super::elementwise::gelu_tanh;
use super::gemv::silu;
use crate::dsl::*;
use crate::formats::e4m3::{act_scale, ACT_SLOT};
use crate::formats::nvfp4::{TILE_K, TILE_ROWS};
use crate::formats::tiles::TileFormat;
use crate::params::{
    w8a8_stage_bytes, w8a8_stages, GemmParams, Q8Params, GEMM_WG_ROWS, GEMM_WG_TOKENS, Q8_THREADS,
    W8A8_GROUP, W8A8_STAGE_K,
};

/// Bytes of one FP8 tile's codes.
const CODE_BYTES: u32 = TileFormat::Fp8.code_bytes() as u32;
/// Bytes of one stage's activations (tokens × 128 E4M3).
const X_BYTES: u32 = GEMM_WG_TOKENS * W8A8_STAGE_K;
/// Row tiles per block.
const TILES: u32 = GEMM_WG_ROWS / TILE_ROWS as u32;

/// bf16 `[tokens][k]` → E4M3 `[tokens][k]` (columns in [`ACT_SLOT`] order within each 16) and
/// f32 `[tokens]` inverse scales ([`act_scale`] of the token's largest magnitude). One block of
/// [`Q8_THREADS`] per token; `k` a multiple of 16. Two passes over the token's row: the
/// maximum, then the codes (the second pass is served by L1/L2).
#[no_mangle]
pub unsafe extern "ptx-kernel" fn quantize_e4m3_act(p: Q8Params) {
    let tok = block_x();
    if tok >= p.tokens {
        return;
    }
    let row = (p.x as *const u8).add(tok as usize * p.k as usize * 2);
    let groups = p.k / 16;
    let load = |g: u32| {
        let at = row.add(g as usize * 32);
        (ld_nc_v4(at), ld_nc_v4(at.add(16)))
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
    let (f, inv) = act_scale(amax);
    if thread_x() == 0 {
        *(p.ds as *mut f32).add(tok as usize) = inv;
    }
    let out = (p.qs as *mut u8).add(tok as usize * p.k as usize);
    let mut g = thread_x();
    while g < groups {
        let (a, b) = load(g);
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

/// Issues this thread's copies of stage `s` (columns `128·s ..`) into `st`: the activations
/// (16-byte piece `kg` of token `t` at row `t`, chunk `kg ^ (t % 8)`; zeros past the last token
/// or column), every projection's 16 tiles (warp `w`'s two at `2w`, `2w + 1`; zeros past the
/// matrix) and the first tile's scale of each row tile.
#[inline(always)]
unsafe fn stage_copy<const DUAL: bool>(p: &GemmParams, tile: (u32, u32), st: Smem, s: u32) {
    let tid = thread_x();
    let tok0 = tile.1 * GEMM_WG_TOKENS;
    unroll4!(Q, 0 => {
        let v = tid + 256 * Q as u32;
        let (t, kg) = (v / 8, v % 8);
        let (tok, col) = (tok0 + t, s * W8A8_STAGE_K + kg * 16);
        let ok = tok < p.tokens && col < p.k;
        let src = (p.x as *const u8).add(if ok { (tok * p.k + col) as usize } else { 0 });
        cp_async_16(st.add(t * 128 + ((kg ^ (t % 8)) * 16)), src, if ok { 16 } else { 0 });
    });
    let k_tiles = p.k / TILE_K as u32;
    let rt0 = tile.0 * TILES;
    let row_tiles = p.n / TILE_ROWS as u32;
    let proj = if DUAL { 2 } else { 1 };
    let codes = st.add(X_BYTES);
    let scales = codes.add(proj * 2 * TILES * CODE_BYTES);
    for pj in 0..proj {
        let (w, sc) = if pj == 0 { (p.w0, p.s0) } else { (p.w1, p.s1) };
        unroll4!(Q, 0 => {
            let v = tid + 256 * Q as u32;
            let (slot, part) = (v / (CODE_BYTES / 16), v % (CODE_BYTES / 16));
            let (rt, kt) = (rt0 + slot / 2, 2 * s + slot % 2);
            let ok = rt < row_tiles && kt < k_tiles;
            let at = if ok { rt * k_tiles + kt } else { 0 } as usize;
            cp_async_16(
                codes.add((pj * 2 * TILES + slot) * CODE_BYTES + part * 16),
                (w as *const u8).add(at * CODE_BYTES as usize + part as usize * 16),
                if ok { 16 } else { 0 },
            );
        });
        if tid < TILES {
            let ok = rt0 + tid < row_tiles;
            let at = if ok { (rt0 + tid) * k_tiles + 2 * s } else { 0 } as usize;
            cp_async_4(
                scales.add((pj * TILES + tid) * 4),
                (sc as *const u8).add(at * 4),
                if ok { 4 } else { 0 },
            );
        }
    }
}

/// This warp's share of one projection in one stage: its two tiles' 16-byte lane pieces (each
/// tile's halves: columns 0..32 and 32..64) and the stage's scale.
#[derive(Clone, Copy)]
struct Lanes {
    words: [[u32; 4]; 4],
    scale: f32,
}

#[inline(always)]
unsafe fn load_lanes(codes: Smem, scales: Smem, pj: u32) -> Lanes {
    let warp = warp_id();
    let at = codes.add((pj * 2 * TILES + 2 * warp) * CODE_BYTES + lane() * 16);
    let s = scales.add((pj * TILES + warp) * 4).ld_u32();
    Lanes {
        words: [
            at.ld_v4(),
            at.add(512).ld_v4(),
            at.add(CODE_BYTES).ld_v4(),
            at.add(CODE_BYTES + 512).ld_v4(),
        ],
        scale: f16_to_f32_bits(s & 0xFFFF),
    }
}

/// The k32 A registers of step `j` (0..4: tile `j / 2`, half `j % 2`) from a lane's words:
/// rows g / g+8 of columns 2q, 2q+1, 2q+8, 2q+9 of the half's two 16-column groups.
#[inline(always)]
fn a_regs(l: &Lanes, j: usize, live: bool) -> [u32; 4] {
    let v = l.words[j];
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

/// Where a block's stages live.
#[inline(always)]
fn stage_at<const DUAL: bool>(stage_bytes: u32, i: u32) -> Smem {
    Smem((Smem::base().0 + 1023) & !1023).add((i % w8a8_stages(DUAL)) * stage_bytes)
}

/// Opens stage `i`: waits until its copies have landed (this thread's, then everyone's at the
/// barrier), refills the slot of stage `i − 2` (whose products every warpgroup has waited for)
/// with stage `i + stages − 2`, and returns this warp's lanes of both projections.
#[inline(always)]
unsafe fn open_stage<const DUAL: bool>(
    p: &GemmParams,
    tile: (u32, u32),
    stage_bytes: u32,
    stages: u32,
    i: u32,
) -> (Lanes, Lanes) {
    // Groups committed so far: stages 0 ..= i + stages − 3 (the prologue's stages − 1, then
    // one per opened stage from 1 on); stage i must have landed.
    match (DUAL, i) {
        (true, 0) => cp_async_wait::<{ w8a8_stages(true) - 2 }>(),
        (true, _) => cp_async_wait::<{ w8a8_stages(true) - 3 }>(),
        (false, 0) => cp_async_wait::<{ w8a8_stages(false) - 2 }>(),
        (false, _) => cp_async_wait::<{ w8a8_stages(false) - 3 }>(),
    }
    fence_proxy_async();
    sync_threads();
    if i >= 1 {
        let j = i + w8a8_stages(DUAL) - 2;
        if j < stages {
            stage_copy::<DUAL>(p, tile, stage_at::<DUAL>(stage_bytes, j), j);
        }
        cp_async_commit();
    }
    let proj = if DUAL { 2 } else { 1 };
    let codes = stage_at::<DUAL>(stage_bytes, i).add(X_BYTES);
    let scales = codes.add(proj * 2 * TILES * CODE_BYTES);
    let l0 = load_lanes(codes, scales, 0);
    let l1 = if DUAL {
        load_lanes(codes, scales, 1)
    } else {
        l0
    };
    (l0, l1)
}

#[inline(always)]
unsafe fn w8a8<const DUAL: bool>(p: &GemmParams) {
    let stage_bytes = w8a8_stage_bytes(DUAL);
    let stages = p.k.div_ceil(W8A8_STAGE_K);
    let tile = super::tile_of_block(W8A8_GROUP);
    for i in 0..w8a8_stages(DUAL) - 1 {
        if i < stages {
            stage_copy::<DUAL>(p, tile, stage_at::<DUAL>(stage_bytes, i), i);
        }
        cp_async_commit();
    }
    let mut acc0 = [0.0f32; 64];
    let mut acc1 = [0.0f32; 64];
    let (mut run0, mut run1) = (0.0f32, 0.0f32);
    // Stage i's products run while the block opens stage i + 1 (barrier, refill, lanes); they
    // are waited for before the accumulators are rescaled for stage i + 1, so no `wgmma` is in
    // flight across the loop.
    let mut lanes = open_stage::<DUAL>(p, tile, stage_bytes, stages, 0);
    for i in 0..stages {
        let (l0, l1) = lanes;
        let live0 = rescale(&mut acc0, &mut run0, l0.scale);
        let live1 = DUAL && rescale(&mut acc1, &mut run1, l1.scale);
        let st = stage_at::<DUAL>(stage_bytes, i);
        unroll4!(J, 0 => {
            let desc = desc_k128b(st.add(32 * J as u32));
            let a0 = a_regs(&l0, J, live0);
            let a1 = if DUAL { a_regs(&l1, J, live1) } else { a0 };
            wgmma_fence();
            wgmma_m64n128k32_e4m3(&mut acc0, a0, desc);
            if DUAL {
                wgmma_m64n128k32_e4m3(&mut acc1, a1, desc);
            }
        });
        wgmma_commit();
        if i + 1 < stages {
            lanes = open_stage::<DUAL>(p, tile, stage_bytes, stages, i + 1);
        }
        wgmma_wait::<0>();
    }
    cp_async_wait::<0>();
    let (g, tq) = (lane() / 4, lane() % 4);
    let row_tile = tile.0 * TILES + warp_id();
    let tok0 = tile.1 * GEMM_WG_TOKENS;
    if row_tile >= p.n / TILE_ROWS as u32 {
        return;
    }
    let (s0, s1) = (run0 * p.gscale0, run1 * p.gscale1);
    let xs = p.x_scales as *const f32;
    unroll16!(F => {
        unroll4!(I, 0 => {
            let tok = tok0 + 8 * F as u32 + 2 * tq + (I as u32 & 1);
            let row = row_tile * TILE_ROWS as u32 + g + if I >= 2 { 8 } else { 0 };
            if tok < p.tokens {
                let inv = *xs.add(tok as usize);
                let y0 = acc0[4 * F + I] * s0 * inv;
                let y = if DUAL {
                    let y1 = acc1[4 * F + I] * s1 * inv;
                    (if p.act == 2 { gelu_tanh(y0) } else { silu(y0) }) * y1
                } else {
                    y0
                };
                *(p.out as *mut u16).add((tok * p.n + row) as usize) = f32_to_bf16(y);
            }
        });
    });
}

/// FP8 × FP8 prefill gate+up with the activation fused: E4M3 activations (`x`, with
/// `x_scales`) times the FP8 overlay's gate and up tiles; bf16 `act(g)·u` out. Block: 256
/// threads, 128 rows × 128 tokens; shared memory `w8a8_smem_bytes(true)`.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn w8a8_gemm_gate_up_act(p: GemmParams) {
    w8a8::<true>(&p)
}

/// FP8 × FP8 prefill single projection (down): bf16 out. Shared memory `w8a8_smem_bytes(false)`.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn w8a8_gemm(p: GemmParams) {
    w8a8::<false>(&p)
}
