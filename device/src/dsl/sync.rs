//! Barriers and memory fences.
use core::arch::{asm, nvptx};

/// `__syncthreads()`: every thread of the block arrives; shared-memory writes before it are
/// visible to the block after it.
#[inline(always)]
pub fn sync_threads() {
    // SAFETY: a block-wide barrier; all kernels call it from uniform control flow.
    unsafe { nvptx::_syncthreads() }
}

/// `__threadfence()`: orders this thread's global writes before its later ones, device-wide.
#[inline(always)]
pub fn fence_device() {
    // SAFETY: a fence has no operands.
    unsafe { asm!("fence.sc.gpu;", options(nostack)) }
}

/// `atomicAdd(ptr, v)` on a global u32, returning the old value.
///
/// # Safety
/// `p` must point to a valid, 4-byte-aligned global u32.
#[inline(always)]
pub unsafe fn atomic_add_u32(p: *mut u32, v: u32) -> u32 {
    let old: u32;
    asm!("atom.global.add.u32 {o}, [{p}], {v};", o = out(reg32) old, p = in(reg64) p, v = in(reg32) v, options(nostack));
    old
}
