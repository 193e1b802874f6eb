//! Hopper (sm_90a) asynchronous copies and warpgroup tensor-core products: `cp.async` into
//! shared memory, and `wgmma.mma_async` with the A operand in registers and B described in
//! shared memory.
//!
//! A warpgroup is four consecutive warps (threads `128·w .. 128·w + 127`); `wgmma` runs on all
//! four at once, each warp holding 16 of the 64 rows of A and of D. Per warp, the A fragment of
//! an `m64nNk16` product has the layout of an `mma.m16n8k16` A fragment (see
//! [`super::mma_bf16_f32`]) and D is `N / 8` `m16n8` C fragments side by side: `d[4f + i]` is
//! row `g + 8·(i / 2)`, column `8f + 2t + i % 2` (lane `g = lane/4`, `t = lane%4`).
use core::arch::asm;

/// `cp.async.cg.shared.global`: copies 16 bytes from global `src` to shared `dst` without
/// passing through registers; with `src_bytes = 0` it writes 16 zero bytes and reads nothing.
/// Completes at a later [`cp_async_wait`] of the group it was committed in.
///
/// # Safety
/// `dst` must be 16-byte aligned inside the launch's shared memory; with `src_bytes = 16`,
/// `src` must be 16 readable, 16-byte-aligned global bytes.
#[inline(always)]
pub unsafe fn cp_async_16(dst: super::Smem, src: *const u8, src_bytes: u32) {
    asm!("cp.async.cg.shared.global [{d}], [{s}], 16, {n};", d = in(reg32) dst.0, s = in(reg64) src, n = in(reg32) src_bytes, options(nostack));
}

/// `cp.async.ca.shared.global` of 4 bytes (`src_bytes` 4, or 0 for zeros), as
/// [`cp_async_16`].
///
/// # Safety
/// As [`cp_async_16`], 4-byte aligned.
#[inline(always)]
pub unsafe fn cp_async_4(dst: super::Smem, src: *const u8, src_bytes: u32) {
    asm!("cp.async.ca.shared.global [{d}], [{s}], 4, {n};", d = in(reg32) dst.0, s = in(reg64) src, n = in(reg32) src_bytes, options(nostack));
}

/// `cp.async.commit_group`: closes the group of this thread's copies issued since the last one.
#[inline(always)]
pub fn cp_async_commit() {
    // SAFETY: no operands.
    unsafe { asm!("cp.async.commit_group;", options(nostack)) };
}

/// `cp.async.wait_group N`: waits until at most `N` of this thread's committed groups are
/// still pending. Other threads' copies need a barrier after it to be visible.
#[inline(always)]
pub fn cp_async_wait<const N: u32>() {
    // SAFETY: no operands besides the immediate.
    unsafe { asm!("cp.async.wait_group {n};", n = const N, options(nostack)) };
}

/// `fence.proxy.async.shared::cta`: makes this thread's shared-memory writes (ordinary stores
/// and completed `cp.async`) visible to the async proxy that `wgmma` reads through.
#[inline(always)]
pub fn fence_proxy_async() {
    // SAFETY: no operands.
    unsafe { asm!("fence.proxy.async.shared::cta;", options(nostack)) };
}

/// `wgmma.fence`: orders this warp's earlier register writes (A fragments, accumulators)
/// before the `wgmma`s that follow. Warpgroup-wide.
#[inline(always)]
pub fn wgmma_fence() {
    // SAFETY: no operands; callers run it with the whole warpgroup converged.
    unsafe { asm!("wgmma.fence.sync.aligned;", options(nostack)) };
}

/// `wgmma.commit_group`: closes the group of `wgmma`s issued since the last one.
#[inline(always)]
pub fn wgmma_commit() {
    // SAFETY: as wgmma_fence.
    unsafe { asm!("wgmma.commit_group.sync.aligned;", options(nostack)) };
}

/// `wgmma.wait_group N`: waits until at most `N` committed groups are pending; after
/// `wgmma_wait::<0>()` the accumulators may be read and the shared memory they read reused.
#[inline(always)]
pub fn wgmma_wait<const N: u32>() {
    // SAFETY: as wgmma_fence.
    unsafe { asm!("wgmma.wait_group.sync.aligned {n};", n = const N, options(nostack)) };
}

/// A shared-memory matrix descriptor for a K-major bf16 operand in the 128-byte swizzle: rows
/// of 64 values (128 bytes) at a 128-byte stride, 16-byte chunk `c` of row `r` stored at chunk
/// `c ^ (r % 8)`, eight-row groups 1024 bytes apart; `at` is the first row's address plus
/// `2·k0` for the 16 columns starting at `k0` (the group must be 1024-byte aligned).
#[inline(always)]
pub fn desc_k128b(at: super::Smem) -> u64 {
    ((at.0 as u64 & 0x3FFFF) >> 4) | (1 << 16) | ((1024u64 >> 4) << 32) | (1 << 62)
}

/// A shared-memory matrix descriptor for a K-major bf16 operand without swizzle (the
/// canonical "interleaved" layout): 8×8 core matrices of 128 contiguous bytes (16 bytes a row),
/// the next core matrix along K `lbo` bytes further, the next eight rows `sbo` bytes further;
/// `at` is the first core matrix (16-byte aligned).
#[inline(always)]
pub fn desc_k_plain(at: super::Smem, lbo: u32, sbo: u32) -> u64 {
    ((at.0 as u64 & 0x3FFFF) >> 4) | (((lbo as u64) >> 4) << 16) | (((sbo as u64) >> 4) << 32)
}

/// The asm of a `wgmma.mma_async` with 64 f32 accumulators (`$acc`, an `[f32; 64]`), A in four
/// registers (`$a`) and B by descriptor (`$desc`): `$op` is the instruction, `$imm` its
/// immediates after the scale-d predicate (always 1: accumulate).
macro_rules! wgmma_m64n128_rs {
    ($op:literal, $imm:literal, $acc:expr, $a:expr, $desc:expr) => {
        asm!(
            concat!("{{ .reg .pred p; setp.ne.b32 p, {one}, 0; ", $op, " {{{d0}, {d1}, {d2}, {d3}, {d4}, {d5}, {d6}, {d7}, {d8}, {d9}, {d10}, {d11}, {d12}, {d13}, {d14}, {d15}, {d16}, {d17}, {d18}, {d19}, {d20}, {d21}, {d22}, {d23}, {d24}, {d25}, {d26}, {d27}, {d28}, {d29}, {d30}, {d31}, {d32}, {d33}, {d34}, {d35}, {d36}, {d37}, {d38}, {d39}, {d40}, {d41}, {d42}, {d43}, {d44}, {d45}, {d46}, {d47}, {d48}, {d49}, {d50}, {d51}, {d52}, {d53}, {d54}, {d55}, {d56}, {d57}, {d58}, {d59}, {d60}, {d61}, {d62}, {d63}}}, {{{a0}, {a1}, {a2}, {a3}}}, {desc}, p, ", $imm, "; }}"),
            d0 = inout(reg32) $acc[0], d1 = inout(reg32) $acc[1], d2 = inout(reg32) $acc[2], d3 = inout(reg32) $acc[3],
            d4 = inout(reg32) $acc[4], d5 = inout(reg32) $acc[5], d6 = inout(reg32) $acc[6], d7 = inout(reg32) $acc[7],
            d8 = inout(reg32) $acc[8], d9 = inout(reg32) $acc[9], d10 = inout(reg32) $acc[10], d11 = inout(reg32) $acc[11],
            d12 = inout(reg32) $acc[12], d13 = inout(reg32) $acc[13], d14 = inout(reg32) $acc[14], d15 = inout(reg32) $acc[15],
            d16 = inout(reg32) $acc[16], d17 = inout(reg32) $acc[17], d18 = inout(reg32) $acc[18], d19 = inout(reg32) $acc[19],
            d20 = inout(reg32) $acc[20], d21 = inout(reg32) $acc[21], d22 = inout(reg32) $acc[22], d23 = inout(reg32) $acc[23],
            d24 = inout(reg32) $acc[24], d25 = inout(reg32) $acc[25], d26 = inout(reg32) $acc[26], d27 = inout(reg32) $acc[27],
            d28 = inout(reg32) $acc[28], d29 = inout(reg32) $acc[29], d30 = inout(reg32) $acc[30], d31 = inout(reg32) $acc[31],
            d32 = inout(reg32) $acc[32], d33 = inout(reg32) $acc[33], d34 = inout(reg32) $acc[34], d35 = inout(reg32) $acc[35],
            d36 = inout(reg32) $acc[36], d37 = inout(reg32) $acc[37], d38 = inout(reg32) $acc[38], d39 = inout(reg32) $acc[39],
            d40 = inout(reg32) $acc[40], d41 = inout(reg32) $acc[41], d42 = inout(reg32) $acc[42], d43 = inout(reg32) $acc[43],
            d44 = inout(reg32) $acc[44], d45 = inout(reg32) $acc[45], d46 = inout(reg32) $acc[46], d47 = inout(reg32) $acc[47],
            d48 = inout(reg32) $acc[48], d49 = inout(reg32) $acc[49], d50 = inout(reg32) $acc[50], d51 = inout(reg32) $acc[51],
            d52 = inout(reg32) $acc[52], d53 = inout(reg32) $acc[53], d54 = inout(reg32) $acc[54], d55 = inout(reg32) $acc[55],
            d56 = inout(reg32) $acc[56], d57 = inout(reg32) $acc[57], d58 = inout(reg32) $acc[58], d59 = inout(reg32) $acc[59],
            d60 = inout(reg32) $acc[60], d61 = inout(reg32) $acc[61], d62 = inout(reg32) $acc[62], d63 = inout(reg32) $acc[63],
            a0 = in(reg32) $a[0], a1 = in(reg32) $a[1], a2 = in(reg32) $a[2], a3 = in(reg32) $a[3],
            desc = in(reg64) $desc,
            one = in(reg32) 1u32,
            options(nostack)
        )
    };
}

/// `D += A·B` on the warpgroup: `wgmma.mma_async…m64n128k16.f32.bf16.bf16`, A (64×16, this
/// warp's 16 rows) in `a`, B (16×128) from shared memory by `desc` (see [`desc_k128b`]), D
/// (this warp's 16×128, f32) in `acc`. Asynchronous: `acc` holds the result only after a
/// [`wgmma_commit`] and [`wgmma_wait`]; precede it by [`wgmma_fence`] when `a` or `acc` were
/// written since the last `wgmma`.
#[inline(always)]
pub fn wgmma_m64n128k16_bf16(acc: &mut [f32; 64], a: [u32; 4], desc: u64) {
    // SAFETY: a warpgroup-wide tensor-core op on registers and the shared memory `desc`
    // names; callers run it with the whole warpgroup converged and the memory staged.
    unsafe {
        wgmma_m64n128_rs!(
            "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16",
            "1, 1, 0",
            acc,
            a,
            desc
        )
    };
}

/// `D += A·B` on the warpgroup with both operands in shared memory:
/// `wgmma.mma_async…m64n128k16.f32.bf16.bf16`, A (64×16 bf16, K-major) by `a_desc` (e.g.
/// [`desc_k_plain`]), B as [`wgmma_m64n128k16_bf16`]'s, D likewise. Asynchronous, as that one.
#[inline(always)]
pub fn wgmma_m64n128k16_bf16_ss(acc: &mut [f32; 64], a_desc: u64, b_desc: u64) {
    // SAFETY: a warpgroup-wide tensor-core op on the shared memory both descriptors name;
    // callers run it with the whole warpgroup converged and the memory staged.
    unsafe {
        asm!(
            "{{ .reg .pred p; setp.ne.b32 p, {one}, 0; wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {{{d0}, {d1}, {d2}, {d3}, {d4}, {d5}, {d6}, {d7}, {d8}, {d9}, {d10}, {d11}, {d12}, {d13}, {d14}, {d15}, {d16}, {d17}, {d18}, {d19}, {d20}, {d21}, {d22}, {d23}, {d24}, {d25}, {d26}, {d27}, {d28}, {d29}, {d30}, {d31}, {d32}, {d33}, {d34}, {d35}, {d36}, {d37}, {d38}, {d39}, {d40}, {d41}, {d42}, {d43}, {d44}, {d45}, {d46}, {d47}, {d48}, {d49}, {d50}, {d51}, {d52}, {d53}, {d54}, {d55}, {d56}, {d57}, {d58}, {d59}, {d60}, {d61}, {d62}, {d63}}}, {ad}, {bd}, p, 1, 1, 0, 0; }}",
            d0 = inout(reg32) acc[0], d1 = inout(reg32) acc[1], d2 = inout(reg32) acc[2], d3 = inout(reg32) acc[3],
            d4 = inout(reg32) acc[4], d5 = inout(reg32) acc[5], d6 = inout(reg32) acc[6], d7 = inout(reg32) acc[7],
            d8 = inout(reg32) acc[8], d9 = inout(reg32) acc[9], d10 = inout(reg32) acc[10], d11 = inout(reg32) acc[11],
            d12 = inout(reg32) acc[12], d13 = inout(reg32) acc[13], d14 = inout(reg32) acc[14], d15 = inout(reg32) acc[15],
            d16 = inout(reg32) acc[16], d17 = inout(reg32) acc[17], d18 = inout(reg32) acc[18], d19 = inout(reg32) acc[19],
            d20 = inout(reg32) acc[20], d21 = inout(reg32) acc[21], d22 = inout(reg32) acc[22], d23 = inout(reg32) acc[23],
            d24 = inout(reg32) acc[24], d25 = inout(reg32) acc[25], d26 = inout(reg32) acc[26], d27 = inout(reg32) acc[27],
            d28 = inout(reg32) acc[28], d29 = inout(reg32) acc[29], d30 = inout(reg32) acc[30], d31 = inout(reg32) acc[31],
            d32 = inout(reg32) acc[32], d33 = inout(reg32) acc[33], d34 = inout(reg32) acc[34], d35 = inout(reg32) acc[35],
            d36 = inout(reg32) acc[36], d37 = inout(reg32) acc[37], d38 = inout(reg32) acc[38], d39 = inout(reg32) acc[39],
            d40 = inout(reg32) acc[40], d41 = inout(reg32) acc[41], d42 = inout(reg32) acc[42], d43 = inout(reg32) acc[43],
            d44 = inout(reg32) acc[44], d45 = inout(reg32) acc[45], d46 = inout(reg32) acc[46], d47 = inout(reg32) acc[47],
            d48 = inout(reg32) acc[48], d49 = inout(reg32) acc[49], d50 = inout(reg32) acc[50], d51 = inout(reg32) acc[51],
            d52 = inout(reg32) acc[52], d53 = inout(reg32) acc[53], d54 = inout(reg32) acc[54], d55 = inout(reg32) acc[55],
            d56 = inout(reg32) acc[56], d57 = inout(reg32) acc[57], d58 = inout(reg32) acc[58], d59 = inout(reg32) acc[59],
            d60 = inout(reg32) acc[60], d61 = inout(reg32) acc[61], d62 = inout(reg32) acc[62], d63 = inout(reg32) acc[63],
            ad = in(reg64) a_desc,
            bd = in(reg64) b_desc,
            one = in(reg32) 1u32,
            options(nostack)
        )
    };
}

/// `D += A·B` on the warpgroup in f16: `wgmma.mma_async…m64n128k16.f32.f16.f16`, A (64×16 f16,
/// this warp's 16 rows, the `mma.m16n8k16` A-fragment layout: register `r` holds row
/// `g + 8·(r & 1)`, columns `2t + 8·(r >> 1)` and the next, low half first) in `a`, B (16×128
/// f16, K-major) from shared memory by `desc` ([`desc_k128b`], `at` advanced 32 bytes per k16
/// step), D as [`wgmma_m64n128k16_bf16`]'s. Asynchronous, as that one.
#[inline(always)]
pub fn wgmma_m64n128k16_f16(acc: &mut [f32; 64], a: [u32; 4], desc: u64) {
    // SAFETY: as wgmma_m64n128k16_bf16.
    unsafe {
        wgmma_m64n128_rs!(
            "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16",
            "1, 1, 0",
            acc,
            a,
            desc
        )
    };
}

/// `D += A·B` on the warpgroup in FP8: `wgmma.mma_async…m64n128k32.f32.e4m3.e4m3`, A (64×32
/// E4M3, this warp's 16 rows: register `r` holds row `g + 8·(r & 1)`, columns
/// `4t + 16·(r >> 1)` .. `+ 4`, low byte first) in `a`, B (32×128 E4M3, K-major) from shared
/// memory by `desc` ([`desc_k128b`]: 128-byte rows of 128 values, `at` advanced 32 bytes per
/// k32 step), D as [`wgmma_m64n128k16_bf16`]'s. Asynchronous, as that one.
#[inline(always)]
pub fn wgmma_m64n128k32_e4m3(acc: &mut [f32; 64], a: [u32; 4], desc: u64) {
    // SAFETY: as wgmma_m64n128k16_bf16.
    unsafe {
        wgmma_m64n128_rs!(
            "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3",
            "1, 1",
            acc,
            a,
            desc
        )
    };
}

/// `D += A·B` on the warpgroup with both operands in shared memory:
/// `wgmma.mma_async…m64n256k16.f32.bf16.bf16`, A (64×16 bf16, K-major) by `a_desc`, B (16×256,
/// K-major) by `b_desc`, D (this warp's 16×256, f32: `acc[4f + i]` is row `g + 8·(i / 2)`,
/// column `8f + 2t + i % 2`) in `acc`. Asynchronous, as [`wgmma_m64n128k16_bf16`].
#[inline(always)]
pub fn wgmma_m64n256k16_bf16_ss(acc: &mut [f32; 128], a_desc: u64, b_desc: u64) {
    // SAFETY: as wgmma_m64n128k16_bf16_ss.
    unsafe {
        asm!(
            "{{ .reg .pred p; setp.ne.b32 p, {one}, 0; wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {{{d0}, {d1}, {d2}, {d3}, {d4}, {d5}, {d6}, {d7}, {d8}, {d9}, {d10}, {d11}, {d12}, {d13}, {d14}, {d15}, {d16}, {d17}, {d18}, {d19}, {d20}, {d21}, {d22}, {d23}, {d24}, {d25}, {d26}, {d27}, {d28}, {d29}, {d30}, {d31}, {d32}, {d33}, {d34}, {d35}, {d36}, {d37}, {d38}, {d39}, {d40}, {d41}, {d42}, {d43}, {d44}, {d45}, {d46}, {d47}, {d48}, {d49}, {d50}, {d51}, {d52}, {d53}, {d54}, {d55}, {d56}, {d57}, {d58}, {d59}, {d60}, {d61}, {d62}, {d63}, {d64}, {d65}, {d66}, {d67}, {d68}, {d69}, {d70}, {d71}, {d72}, {d73}, {d74}, {d75}, {d76}, {d77}, {d78}, {d79}, {d80}, {d81}, {d82}, {d83}, {d84}, {d85}, {d86}, {d87}, {d88}, {d89}, {d90}, {d91}, {d92}, {d93}, {d94}, {d95}, {d96}, {d97}, {d98}, {d99}, {d100}, {d101}, {d102}, {d103}, {d104}, {d105}, {d106}, {d107}, {d108}, {d109}, {d110}, {d111}, {d112}, {d113}, {d114}, {d115}, {d116}, {d117}, {d118}, {d119}, {d120}, {d121}, {d122}, {d123}, {d124}, {d125}, {d126}, {d127}}}, {ad}, {bd}, p, 1, 1, 0, 0; }}",
            d0 = inout(reg32) acc[0], d1 = inout(reg32) acc[1], d2 = inout(reg32) acc[2], d3 = inout(reg32) acc[3],
            d4 = inout(reg32) acc[4], d5 = inout(reg32) acc[5], d6 = inout(reg32) acc[6], d7 = inout(reg32) acc[7],
            d8 = inout(reg32) acc[8], d9 = inout(reg32) acc[9], d10 = inout(reg32) acc[10], d11 = inout(reg32) acc[11],
            d12 = inout(reg32) acc[12], d13 = inout(reg32) acc[13], d14 = inout(reg32) acc[14], d15 = inout(reg32) acc[15],
            d16 = inout(reg32) acc[16], d17 = inout(reg32) acc[17], d18 = inout(reg32) acc[18], d19 = inout(reg32) acc[19],
            d20 = inout(reg32) acc[20], d21 = inout(reg32) acc[21], d22 = inout(reg32) acc[22], d23 = inout(reg32) acc[23],
            d24 = inout(reg32) acc[24], d25 = inout(reg32) acc[25], d26 = inout(reg32) acc[26], d27 = inout(reg32) acc[27],
            d28 = inout(reg32) acc[28], d29 = inout(reg32) acc[29], d30 = inout(reg32) acc[30], d31 = inout(reg32) acc[31],
            d32 = inout(reg32) acc[32], d33 = inout(reg32) acc[33], d34 = inout(reg32) acc[34], d35 = inout(reg32) acc[35],
            d36 = inout(reg32) acc[36], d37 = inout(reg32) acc[37], d38 = inout(reg32) acc[38], d39 = inout(reg32) acc[39],
            d40 = inout(reg32) acc[40], d41 = inout(reg32) acc[41], d42 = inout(reg32) acc[42], d43 = inout(reg32) acc[43],
            d44 = inout(reg32) acc[44], d45 = inout(reg32) acc[45], d46 = inout(reg32) acc[46], d47 = inout(reg32) acc[47],
            d48 = inout(reg32) acc[48], d49 = inout(reg32) acc[49], d50 = inout(reg32) acc[50], d51 = inout(reg32) acc[51],
            d52 = inout(reg32) acc[52], d53 = inout(reg32) acc[53], d54 = inout(reg32) acc[54], d55 = inout(reg32) acc[55],
            d56 = inout(reg32) acc[56], d57 = inout(reg32) acc[57], d58 = inout(reg32) acc[58], d59 = inout(reg32) acc[59],
            d60 = inout(reg32) acc[60], d61 = inout(reg32) acc[61], d62 = inout(reg32) acc[62], d63 = inout(reg32) acc[63],
            d64 = inout(reg32) acc[64], d65 = inout(reg32) acc[65], d66 = inout(reg32) acc[66], d67 = inout(reg32) acc[67],
            d68 = inout(reg32) acc[68], d69 = inout(reg32) acc[69], d70 = inout(reg32) acc[70], d71 = inout(reg32) acc[71],
            d72 = inout(reg32) acc[72], d73 = inout(reg32) acc[73], d74 = inout(reg32) acc[74], d75 = inout(reg32) acc[75],
            d76 = inout(reg32) acc[76], d77 = inout(reg32) acc[77], d78 = inout(reg32) acc[78], d79 = inout(reg32) acc[79],
            d80 = inout(reg32) acc[80], d81 = inout(reg32) acc[81], d82 = inout(reg32) acc[82], d83 = inout(reg32) acc[83],
            d84 = inout(reg32) acc[84], d85 = inout(reg32) acc[85], d86 = inout(reg32) acc[86], d87 = inout(reg32) acc[87],
            d88 = inout(reg32) acc[88], d89 = inout(reg32) acc[89], d90 = inout(reg32) acc[90], d91 = inout(reg32) acc[91],
            d92 = inout(reg32) acc[92], d93 = inout(reg32) acc[93], d94 = inout(reg32) acc[94], d95 = inout(reg32) acc[95],
            d96 = inout(reg32) acc[96], d97 = inout(reg32) acc[97], d98 = inout(reg32) acc[98], d99 = inout(reg32) acc[99],
            d100 = inout(reg32) acc[100], d101 = inout(reg32) acc[101], d102 = inout(reg32) acc[102], d103 = inout(reg32) acc[103],
            d104 = inout(reg32) acc[104], d105 = inout(reg32) acc[105], d106 = inout(reg32) acc[106], d107 = inout(reg32) acc[107],
            d108 = inout(reg32) acc[108], d109 = inout(reg32) acc[109], d110 = inout(reg32) acc[110], d111 = inout(reg32) acc[111],
            d112 = inout(reg32) acc[112], d113 = inout(reg32) acc[113], d114 = inout(reg32) acc[114], d115 = inout(reg32) acc[115],
            d116 = inout(reg32) acc[116], d117 = inout(reg32) acc[117], d118 = inout(reg32) acc[118], d119 = inout(reg32) acc[119],
            d120 = inout(reg32) acc[120], d121 = inout(reg32) acc[121], d122 = inout(reg32) acc[122], d123 = inout(reg32) acc[123],
            d124 = inout(reg32) acc[124], d125 = inout(reg32) acc[125], d126 = inout(reg32) acc[126], d127 = inout(reg32) acc[127],
            ad = in(reg64) a_desc,
            bd = in(reg64) b_desc,
            one = in(reg32) 1u32,
            options(nostack)
        )
    };
}

/// `setmaxnreg.inc.sync.aligned.u32 N` (sm_90a): raises the calling warpgroup's registers a
/// thread to `N` (a multiple of 8 in 24..=256), waiting until other warpgroups have released
/// enough; ptxas then allocates up to `N` in the code that follows. Every warp of the
/// warpgroup must execute it.
///
/// # Safety
/// The block's warpgroups together must never ask for more registers than the launch holds.
#[inline(always)]
pub unsafe fn setmaxnreg_inc<const N: u32>() {
    asm!("setmaxnreg.inc.sync.aligned.u32 {n};", n = const N, options(nostack));
}

/// `setmaxnreg.dec.sync.aligned.u32 N`: lowers the calling warpgroup's registers a thread to
/// `N`, releasing the rest to warpgroups waiting in [`setmaxnreg_inc`].
///
/// # Safety
/// As [`setmaxnreg_inc`]; the code that follows must fit `N` registers.
#[inline(always)]
pub unsafe fn setmaxnreg_dec<const N: u32>() {
    asm!("setmaxnreg.dec.sync.aligned.u32 {n};", n = const N, options(nostack));
}
