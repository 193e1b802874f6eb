//! Warp shuffles and reductions (all 32 lanes take part).
use core::arch::asm;

/// `__shfl_xor_sync(~0, v, mask)` for f32.
#[inline(always)]
pub fn shfl_xor_f32(v: f32, mask: u32) -> f32 {
    let r: f32;
    // SAFETY: a full-warp shuffle; callers run it with all lanes converged.
    unsafe {
        asm!("shfl.sync.bfly.b32 {r}, {v}, {m}, 31, -1;", r = out(reg32) r, v = in(reg32) v, m = in(reg32) mask, options(nostack, pure, nomem))
    };
    r
}

/// Sum over the warp, in every lane.
#[inline(always)]
pub fn warp_sum(mut v: f32) -> f32 {
    let mut m = 16;
    while m > 0 {
        v += shfl_xor_f32(v, m);
        m /= 2;
    }
    v
}

/// Maximum over the warp, in every lane (NaN wins, so NaN inputs are seen).
#[inline(always)]
pub fn warp_max(mut v: f32) -> f32 {
    let mut m = 16;
    while m > 0 {
        v = super::max_nan(v, shfl_xor_f32(v, m));
        m /= 2;
    }
    v
}
