//! The kernel DSL: the few primitives the kernels need, as small functions over
//! `core::arch::nvptx` and inline PTX, so kernel bodies read like CUDA C.
//!
//! Shared memory is one dynamic window (`dsmem`, declared at module scope by the PTX builder) and
//! is addressed with 32-bit shared-space offsets ([`Smem`]).
pub mod math;
pub mod mbarrier;
pub mod memory;
pub mod mma;
pub mod sync;
pub mod warp;
pub mod wgmma;

pub use math::*;
pub use mbarrier::*;
pub use memory::*;
pub use mma::*;
pub use sync::*;
pub use warp::*;
pub use wgmma::*;

use core::arch::nvptx;

/// `threadIdx.x`.
#[inline(always)]
pub fn thread_x() -> u32 {
    // SAFETY: reads a special register.
    unsafe { nvptx::_thread_idx_x() as u32 }
}

/// `blockDim.x`.
#[inline(always)]
pub fn block_dim_x() -> u32 {
    // SAFETY: reads a special register.
    unsafe { nvptx::_block_dim_x() as u32 }
}

/// `blockIdx.x`.
#[inline(always)]
pub fn block_x() -> u32 {
    // SAFETY: reads a special register.
    unsafe { nvptx::_block_idx_x() as u32 }
}

/// `blockIdx.y`.
#[inline(always)]
pub fn block_y() -> u32 {
    // SAFETY: reads a special register.
    unsafe { nvptx::_block_idx_y() as u32 }
}

/// `blockIdx.z`.
#[inline(always)]
pub fn block_z() -> u32 {
    // SAFETY: reads a special register.
    unsafe { nvptx::_block_idx_z() as u32 }
}

/// `gridDim.x`.
#[inline(always)]
pub fn grid_x() -> u32 {
    // SAFETY: reads a special register.
    unsafe { nvptx::_grid_dim_x() as u32 }
}

/// `gridDim.y`.
#[inline(always)]
pub fn grid_y() -> u32 {
    // SAFETY: reads a special register.
    unsafe { nvptx::_grid_dim_y() as u32 }
}

/// Lane index within the warp.
#[inline(always)]
pub fn lane() -> u32 {
    thread_x() % 32
}

/// Warp index within the block.
#[inline(always)]
pub fn warp_id() -> u32 {
    thread_x() / 32
}
