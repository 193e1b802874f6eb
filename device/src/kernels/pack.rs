//! Activation packers of the speculative-verify path: `a = act(g)·u` for m ≤ 8 tokens, written
//! as the [`source::PACKED`](crate::params::source::PACKED) buffer the down GEMV reads its B
//! fragments from (f16 in B-fragment order, one power-of-two scale per token and K split of
//! that GEMV), so the GEMV stages nothing. One block per (K split, token): pass 1 finds the
//! token's largest magnitude over the split (and writes the f32 `a` when asked), pass 2
//! (served by L1) scales, packs and stores.
use super::elementwise::gelu_tanh;
use super::gemv::silu;
use crate::dsl::*;
use crate::formats::nvfp4::TILE_K;
use crate::formats::packed::{pow2_scale, word_of};
use crate::params::{ActPackParams, PACK_SCALE_STRIDE, PACK_THREADS};

const WARPS: u32 = PACK_THREADS / 32;

/// `act(g)·u` of eight consecutive columns from `idx` (a multiple of 8): 16-byte loads.
#[inline(always)]
unsafe fn act8<const GELU: bool>(p: &ActPackParams, idx: usize) -> [f32; 8] {
    let g = (p.g as *const f32).add(idx) as *const u8;
    let u = (p.u as *const f32).add(idx) as *const u8;
    let (g0, g1, u0, u1) = (
        ld_nc_v4(g),
        ld_nc_v4(g.add(16)),
        ld_nc_v4(u),
        ld_nc_v4(u.add(16)),
    );
    let mut v = [0.0f32; 8];
    unroll4!(E, 0 => {
        let (ga, gb) = (f32::from_bits(g0[E]), f32::from_bits(g1[E]));
        let (aa, ab) = if GELU {
            (gelu_tanh(ga), gelu_tanh(gb))
        } else {
            (silu(ga), silu(gb))
        };
        v[E] = aa * f32::from_bits(u0[E]);
        v[4 + E] = ab * f32::from_bits(u1[E]);
    });
    v
}

/// A programmatic dependent of the GEMV that writes `g` and `u`: waits for it first (a no-op
/// for an ordinary launch) and lets its own dependent, the down GEMV, start at once.
#[inline(always)]
unsafe fn pack<const GELU: bool>(p: &ActPackParams) {
    grid_dependency_wait();
    launch_dependents();
    let (split, t, tid) = (block_x(), block_y(), thread_x());
    let k_tiles = p.k / TILE_K as u32;
    let chunk0 = split * p.chunks_per_split;
    if chunk0 >= k_tiles || t >= p.m {
        return;
    }
    let nchunks = core::cmp::min(p.chunks_per_split, k_tiles - chunk0);
    let vecs = nchunks * (TILE_K as u32 / 8);
    let base = t * p.k + chunk0 * TILE_K as u32;
    let mut amax = 0.0f32;
    let mut i = tid;
    while i < vecs {
        let idx = (base + 8 * i) as usize;
        let v = act8::<GELU>(p, idx);
        unroll8!(E => {
            amax = max_nan(amax, v[E].abs());
        });
        if p.out != 0 {
            let o = (p.out as *mut f32).add(idx) as *mut u8;
            st_global_v4(
                o,
                [
                    v[0].to_bits(),
                    v[1].to_bits(),
                    v[2].to_bits(),
                    v[3].to_bits(),
                ],
            );
            st_global_v4(
                o.add(16),
                [
                    v[4].to_bits(),
                    v[5].to_bits(),
                    v[6].to_bits(),
                    v[7].to_bits(),
                ],
            );
        }
        i += PACK_THREADS;
    }
    let smem = Smem::base();
    amax = warp_max(amax);
    if lane() == 0 {
        smem.add(warp_id() * 4).st_f32(amax);
    }
    sync_threads();
    let mut all = 0.0f32;
    for w in 0..WARPS {
        all = max_nan(all, smem.add(w * 4).ld_f32());
    }
    let (f, inv) = pow2_scale(all);
    if tid == 0 {
        *(p.scales as *mut f32).add((split * PACK_SCALE_STRIDE + t) as usize) = inv;
    }
    // Columns 8i..8i+8 of a chunk are the four `tq` pairs of one B-fragment word position
    // (as the GEMV's staging stores them): word `w` and `w + 8·tq`.
    let mut i = tid;
    while i < vecs {
        let v = act8::<GELU>(p, (base + 8 * i) as usize);
        let (word, _) = word_of(chunk0 + i / 8, p.m, t, (8 * i) % 64);
        let at = (p.packed as *mut u32).add(word as usize);
        unroll4!(TQ, 0 => {
            *at.add(8 * TQ) = pack_f16x2(v[2 * TQ] * f, v[2 * TQ + 1] * f);
        });
        i += PACK_THREADS;
    }
}

/// `silu(g)·u` packed for the down GEMV (see [`ActPackParams`]).
#[no_mangle]
pub unsafe extern "ptx-kernel" fn silu_mul_pack(p: ActPackParams) {
    pack::<false>(&p)
}

/// `gelu_tanh(g)·u` packed for the down GEMV (see [`ActPackParams`]).
#[no_mangle]
pub unsafe extern "ptx-kernel" fn gelu_mul_pack(p: ActPackParams) {
    pack::<true>(&p)
}
