//! The kernels, one file per operation family. Each family is one generic body over a weight
//! format ([`tiles::Tiles`]); the `#[no_mangle] extern "ptx-kernel"` entry points (named
//! op_format_variant) instantiate it.

/// Repeats `$body` with `$f` bound to the constants 0..8, so arrays indexed by it are only
/// ever indexed by constants and stay in registers (a loop LLVM declines to unroll would put
/// them in local memory).
macro_rules! unroll8 {
    ($f:ident => $body:block) => {{
        unroll4!($f, 0 => $body);
        unroll4!($f, 4 => $body);
    }};
}

/// Repeats `$body` with `$f` bound to the constants 0..16.
macro_rules! unroll16 {
    ($f:ident => $body:block) => {{
        unroll4!($f, 0 => $body);
        unroll4!($f, 4 => $body);
        unroll4!($f, 8 => $body);
        unroll4!($f, 12 => $body);
    }};
}

/// Repeats `$body` with `$f` bound to the constants 0..32.
macro_rules! unroll32 {
    ($f:ident => $body:block) => {{
        unroll16!($f => $body);
        unroll4!($f, 16 => $body);
        unroll4!($f, 20 => $body);
        unroll4!($f, 24 => $body);
        unroll4!($f, 28 => $body);
    }};
}

/// Repeats `$body` with `$f` bound to the constants 0 and 1.
macro_rules! unroll2 {
    ($f:ident => $body:block) => {{
        {
            const $f: usize = 0;
            $body
        }
        {
            const $f: usize = 1;
            $body
        }
    }};
}

/// Repeats `$body` with `$f` bound to the constants `$base..$base + 4`.
macro_rules! unroll4 {
    ($f:ident, $base:literal => $body:block) => {{
        {
            const $f: usize = $base;
            $body
        }
        {
            const $f: usize = $base + 1;
            $body
        }
        {
            const $f: usize = $base + 2;
            $body
        }
        {
            const $f: usize = $base + 3;
            $body
        }
    }};
}

pub mod bulk_gemm;
pub mod elementwise;
pub mod gemv;
pub mod lora;
pub mod mmq;
pub mod nvfp4_mmq;
pub mod pack;
pub mod q8;
pub mod tiles;
pub mod w8a8;
pub mod wgemm;

/// The output tile of this block of a prefill GEMM, `(row block, token block)`: the grid (row
/// blocks × token blocks, `blockIdx.x` fastest) walked in groups of `group` row blocks with the
/// token blocks of a group in between, so the blocks resident at one time share a few row
/// blocks' weights (read from DRAM about once per group instead of once per token block).
#[inline(always)]
pub(crate) fn tile_of_block(group: u32) -> (u32, u32) {
    use crate::dsl::{block_x, block_y, grid_x, grid_y};
    let lin = block_y() * grid_x() + block_x();
    tile_of(lin, group, (grid_x(), grid_y()))
}

/// Tile `lin` (0 .. `gx·gy`) of a `gx` × `gy` grid of tiles in [`tile_of_block`]'s order.
#[inline(always)]
pub(crate) fn tile_of(lin: u32, group: u32, (gx, gy): (u32, u32)) -> (u32, u32) {
    let per_group = group * gy;
    let first = lin / per_group * group;
    let rows = core::cmp::min(group, gx - first);
    let r = lin % per_group;
    (first + r % rows, r / rows)
}
