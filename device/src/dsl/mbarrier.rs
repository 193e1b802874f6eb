//! Shared-memory barriers (`mbarrier`, sm_90) and the bulk copies that complete on them: the
//! pieces of a producer/consumer pipeline whose stages are handed over without block barriers.
//!
//! An `mbarrier` is an 8-byte, 8-byte-aligned shared-memory object. It completes a phase when
//! its expected number of arrivals has arrived and its transaction count (bytes announced with
//! [`mbar_arrive_expect_tx`] and delivered by [`bulk_copy`]) is back at zero; the next phase then
//! begins. Phases are told apart by their parity: [`mbar_wait`]`(b, k & 1)` returns once phase `k`
//! has completed (and before phase `k + 1` has, which the pipelines here guarantee by waiting for
//! a stage's release before refilling it).
use core::arch::asm;

/// `mbarrier.init`: the barrier at `b` expects `count` arrivals a phase. Run by one thread, then
/// [`fence_mbarrier_init`] and a block barrier before anyone uses it.
///
/// # Safety
/// `b` must be 8-byte aligned inside the launch's shared memory and not in use.
#[inline(always)]
pub unsafe fn mbar_init(b: super::Smem, count: u32) {
    asm!("mbarrier.init.shared::cta.b64 [{b}], {c};", b = in(reg32) b.0, c = in(reg32) count, options(nostack));
}

/// `fence.mbarrier_init.release.cluster` and `fence.proxy.async.shared::cta`: makes this
/// thread's [`mbar_init`]s visible to the other threads and to the async proxy (bulk copies).
#[inline(always)]
pub fn fence_mbarrier_init() {
    // SAFETY: fences have no operands.
    unsafe {
        asm!(
            "fence.mbarrier_init.release.cluster; fence.proxy.async.shared::cta;",
            options(nostack)
        )
    };
}

/// `mbarrier.try_wait.parity`, repeated until phase `parity` of the barrier at `b` has
/// completed. Acquire semantics: what the arrivals (and completed bulk copies) of that phase
/// wrote to shared memory is visible after it.
///
/// # Safety
/// `b` must be an initialised barrier.
#[inline(always)]
pub unsafe fn mbar_wait(b: super::Smem, parity: u32) {
    loop {
        let done: u32;
        asm!(
            "{{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [{b}], {ph}; selp.u32 {d}, 1, 0, p; }}",
            b = in(reg32) b.0, ph = in(reg32) parity, d = out(reg32) done, options(nostack)
        );
        if done != 0 {
            return;
        }
    }
}

/// `mbarrier.arrive`: one arrival on the barrier at `b` (release semantics: this thread's
/// earlier shared-memory accesses happen before the phase completes).
///
/// # Safety
/// `b` must be an initialised barrier expecting the arrival.
#[inline(always)]
pub unsafe fn mbar_arrive(b: super::Smem) {
    asm!("{{ .reg .b64 s; mbarrier.arrive.shared::cta.b64 s, [{b}]; }}", b = in(reg32) b.0, options(nostack));
}

/// `mbarrier.arrive.expect_tx`: one arrival on the barrier at `b` that also announces `bytes`
/// more bytes of bulk copies completing on it in this phase.
///
/// # Safety
/// As [`mbar_arrive`]; exactly `bytes` bytes of [`bulk_copy`] must name this barrier.
#[inline(always)]
pub unsafe fn mbar_arrive_expect_tx(b: super::Smem, bytes: u32) {
    asm!("{{ .reg .b64 s; mbarrier.arrive.expect_tx.shared::cta.b64 s, [{b}], {n}; }}", b = in(reg32) b.0, n = in(reg32) bytes, options(nostack));
}

/// `cp.async.mbarrier.arrive.noinc`: one arrival on the barrier at `b` once every `cp.async`
/// this thread issued before it has completed (counted in the barrier's expected arrivals).
///
/// # Safety
/// As [`mbar_arrive`].
#[inline(always)]
pub unsafe fn cp_async_mbar_arrive(b: super::Smem) {
    asm!("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [{b}];", b = in(reg32) b.0, options(nostack));
}

/// `cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes`: copies `bytes` bytes
/// from global `src` to shared `dst` on the async proxy (one thread issues it; no registers);
/// the copy completes `bytes` of the transaction count of the barrier at `b`.
///
/// # Safety
/// `dst`, `src` and `bytes` must be multiples of 16; the ranges must be valid shared and
/// readable global memory; `b` must expect the bytes ([`mbar_arrive_expect_tx`]).
#[inline(always)]
pub unsafe fn bulk_copy(dst: super::Smem, src: *const u8, bytes: u32, b: super::Smem) {
    asm!(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [{d}], [{s}], {n}, [{b}];",
        d = in(reg32) dst.0, s = in(reg64) src, n = in(reg32) bytes, b = in(reg32) b.0, options(nostack)
    );
}

/// `cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes`: one box of
/// the tensor map at generic address `map` (its inner coordinate `c0`, outer `c1`, in elements)
/// to shared `dst` on the async proxy, laid out (and swizzled) as the map says; elements past
/// the tensor land as zeros. The box's bytes (all of them, zeros included) complete on the
/// barrier at `b`. One thread issues it.
///
/// # Safety
/// `map` must be a valid tensor map in parameter, constant or global memory; `dst` must hold
/// the box, aligned as the map's swizzle needs (1024 bytes for 128-byte swizzle); `b` must
/// expect the bytes ([`mbar_arrive_expect_tx`]).
#[inline(always)]
pub unsafe fn tma_load_2d(dst: super::Smem, map: u64, (c0, c1): (u32, u32), b: super::Smem) {
    asm!(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [{d}], [{m}, {{{x}, {y}}}], [{b}];",
        d = in(reg32) dst.0, m = in(reg64) map, x = in(reg32) c0, y = in(reg32) c1, b = in(reg32) b.0,
        options(nostack)
    );
}

/// `prefetch.tensormap`: brings the tensor map at generic address `map` into the cache the
/// TMA unit reads it from, ahead of the first [`tma_load_2d`].
///
/// # Safety
/// `map` must be a valid tensor map's address.
#[inline(always)]
pub unsafe fn prefetch_tensormap(map: u64) {
    asm!("prefetch.tensormap [{m}];", m = in(reg64) map, options(nostack));
}

/// The generic address of kernel `$kernel`'s by-value parameter block (`<kernel>_param_0`, the
/// name LLVM's NVPTX back end gives a kernel's first parameter) plus `$offset` bytes:
/// `mov` of the parameter's address and `cvta.param` (PTX 7.7+, sm_70+), so a tensor map in the
/// block can be read in place, as `__grid_constant__` parameters are in CUDA C++. Use it only
/// in the entry point named `$kernel` (ptxas rejects an unknown name).
#[macro_export]
macro_rules! param_block_address {
    ($kernel:ident, $offset:expr) => {
        $crate::param_block_address!(stringify!($kernel), $offset)
    };
    ($kernel:expr, $offset:expr) => {{
        let a: u64;
        // SAFETY: reads no memory; the name is the entry point's own parameter.
        unsafe {
            core::arch::asm!(
                concat!("mov.u64 {a}, ", $kernel, "_param_0;\ncvta.param.u64 {a}, {a};"),
                a = out(reg64) a,
                options(pure, nomem, nostack)
            )
        };
        a + $offset as u64
    }};
}

/// The executing block's rank in its cluster (`%cluster_ctarank`; 0 without clusters).
#[inline(always)]
pub fn cluster_rank() -> u32 {
    let r: u32;
    // SAFETY: reads a special register.
    unsafe { asm!("mov.u32 {r}, %cluster_ctarank;", r = out(reg32) r, options(nostack, nomem)) };
    r
}

/// `barrier.cluster.arrive.release` + `wait.acquire`: every thread of every block of the
/// cluster arrives; shared-memory writes (and barrier initialisations) before it are visible
/// across the cluster after it. Every thread of the block must call it (`.aligned`).
#[inline(always)]
pub fn cluster_sync() {
    // SAFETY: a barrier; callers call it from every thread.
    unsafe {
        asm!(
            "barrier.cluster.arrive.release.aligned; barrier.cluster.wait.acquire.aligned;",
            options(nostack)
        )
    }
}

/// `mapa.shared::cluster`: the cluster-shared-memory address of the object at `a` in this
/// block's shared memory, in the block of cluster rank `rank` (the same offset there).
#[inline(always)]
pub fn cluster_address(a: super::Smem, rank: u32) -> u32 {
    let r: u32;
    // SAFETY: address arithmetic only.
    unsafe {
        asm!("mapa.shared::cluster.u32 {r}, {a}, {k};", r = out(reg32) r, a = in(reg32) a.0, k = in(reg32) rank, options(nostack, nomem))
    };
    r
}

/// `mbarrier.arrive` on a barrier at cluster-shared address `b` ([`cluster_address`]), possibly
/// in another block of the cluster, with the default semantics (release at CTA scope). The
/// `.release.cluster` form compiles to `MEMBAR.ALL.GPU` + `ERRBAR` before the arrival, which
/// made the BF16 pair GEMMs 45–55% slower (`docs/perf/2026-12-07.md`, fourth session). A
/// consumer releasing a stage has its `wgmma` reads of it complete (`wgmma.wait_group`) first.
///
/// # Safety
/// `b` must be an initialised barrier of a block of the cluster that is still running and
/// expects the arrival.
#[inline(always)]
pub unsafe fn mbar_arrive_cluster(b: u32) {
    asm!("mbarrier.arrive.shared::cluster.b64 _, [{b}];", b = in(reg32) b, options(nostack));
}

/// [`bulk_copy`] to the same shared-memory offset `dst` in every block of the cluster whose rank
/// bit is set in `mask` (`.multicast::cluster`), completing on the barrier at offset `b` in
/// each of those blocks.
///
/// # Safety
/// As [`bulk_copy`], in each block of `mask`: each must expect the bytes on its barrier and
/// not read or reuse `dst` until that barrier's phase completes.
#[inline(always)]
pub unsafe fn bulk_copy_multicast(
    dst: super::Smem,
    src: *const u8,
    bytes: u32,
    b: super::Smem,
    mask: u16,
) {
    asm!(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [{d}], [{s}], {n}, [{b}], {m};",
        d = in(reg32) dst.0, s = in(reg64) src, n = in(reg32) bytes, b = in(reg32) b.0, m = in(reg16) mask,
        options(nostack)
    );
}
