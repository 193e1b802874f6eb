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

/// `bar.sync id, threads`: a barrier among the first warps of the block that reach it,
/// `threads` of them (a multiple of 32); shared-memory writes before it are visible to those
/// threads after it. Barrier 0 is `sync_threads`'.
#[inline(always)]
pub fn named_barrier(id: u32, threads: u32) {
    // SAFETY: a barrier; callers pass the same id and count from whole warps.
    unsafe { asm!("bar.sync {i}, {n};", i = in(reg32) id, n = in(reg32) threads, options(nostack)) }
}

/// Split-K completion, block-wide (every thread calls it, after writing its partials): counts
/// this block in `*counter` and returns, in every thread, whether it is the last of `total`
/// blocks to arrive. That block has reset the counter to zero (for the next launch) and, after
/// the fences here, sees every other block's partials. `flag` is a 4-byte shared-memory slot.
///
/// # Safety
/// `counter` must be a valid global u32 that only the `total` blocks of this group count in.
#[inline(always)]
pub unsafe fn last_block_to_finish(counter: *mut u32, total: u32, flag: super::Smem) -> bool {
    last_to_finish(counter, total, flag, sync_threads)
}

/// [`last_block_to_finish`] among the threads that `sync` synchronizes (thread 0 among them),
/// e.g. a persistent kernel's consumer warps, by a [`named_barrier`].
///
/// # Safety
/// As [`last_block_to_finish`]; `flag` must be used only by the threads `sync` spans.
#[inline(always)]
pub unsafe fn last_to_finish(
    counter: *mut u32,
    total: u32,
    flag: super::Smem,
    sync: impl Fn(),
) -> bool {
    fence_device();
    sync();
    if super::thread_x() == 0 {
        let last = atomic_add_u32(counter, 1) == total - 1;
        if last {
            *counter = 0;
        }
        flag.st_u32(last as u32);
    }
    sync();
    let last = flag.ld_u32() != 0;
    if last {
        fence_device();
    }
    last
}

/// `griddepcontrol.wait`: waits until the grids this one depends on programmatically (launched
/// with programmatic stream serialization: the previous kernel on the stream) have completed
/// and their writes are visible. A no-op for a kernel launched the ordinary way.
#[inline(always)]
pub fn grid_dependency_wait() {
    // SAFETY: no operands; not `nomem`, so no memory access is moved above it.
    unsafe { asm!("griddepcontrol.wait;", options(nostack)) }
}

/// `griddepcontrol.launch_dependents`: lets a kernel launched programmatically after this one
/// start once every block of this grid has run it (or exited).
#[inline(always)]
pub fn launch_dependents() {
    // SAFETY: no operands.
    unsafe { asm!("griddepcontrol.launch_dependents;", options(nostack)) }
}
