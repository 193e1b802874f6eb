//! Warp shuffles and reductions (all 32 lanes take part).
//!
//! Shuffles go through LLVM's NVVM intrinsic, not inline PTX: the intrinsic is `convergent`, so
//! the optimizer never sinks it into a branch only some lanes take (a pure `asm!` shuffle was
//! sunk under `if lane == 0` and deadlocked the warp).

extern "C" {
    #[link_name = "llvm.nvvm.shfl.sync.bfly.f32"]
    fn shfl_sync_bfly_f32(member_mask: u32, v: f32, lane_mask: u32, clamp: u32) -> f32;
}

/// `__shfl_xor_sync(~0, v, mask)` for f32.
#[inline(always)]
pub fn shfl_xor_f32(v: f32, mask: u32) -> f32 {
    // SAFETY: a full-warp shuffle; callers run it with all lanes converged.
    unsafe { shfl_sync_bfly_f32(u32::MAX, v, mask, 0x1F) }
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
