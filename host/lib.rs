//! denseffn: the dense FFN block of a transformer, `down(act(gate·x) ⊙ up·x)`, on NVIDIA GPUs,
//! with kernels written in Rust (compiled to PTX by `cargo build`) and a CPU reference backend.
//!
//! ```no_run
//! use denseffn::{backend::{CudaBackend, GpuBackend}, layer::*, pack::Nvfp4Host};
//! use std::sync::Arc;
//! let gpu: Arc<dyn GpuBackend> = Arc::new(CudaBackend::new()?);
//! let mut rng = rand::rng();
//! let (h, i) = (4096, 14336);
//! let gate = Nvfp4Host::random(i, h, 0.01, &mut rng)?;
//! let up = Nvfp4Host::random(i, h, 0.01, &mut rng)?;
//! let down = Nvfp4Host::random(h, i, 0.01, &mut rng)?;
//! let layer = DenseFfnLayer::new(DenseFfnWeights::upload(&gpu, &gate, &up, &down)?, gpu.clone())?;
//! let mut ctx = ForwardContext::new(&layer, 1)?;
//! let x = gpu.alloc(h * 2)?; // bf16 [hidden]
//! let y = layer.forward(x, &mut ctx, 0)?;
//! # Ok::<(), denseffn::Error>(())
//! ```
pub mod backend;
pub mod bench;
pub mod buffer;
pub mod error;
pub mod layer;
pub mod load;
pub mod pack;
pub mod pack_fp8;
pub mod pack_q2;
pub mod pack_q4k;
pub mod pack_tiled;
pub mod reference;
pub mod shard;
pub mod tp;

pub use error::{Error, Result};

/// The PTX of every kernel, built from `device/` by build.rs (sm_90a, PTX ISA 8.0).
pub const PTX: &str = include_str!(env!("DENSEFFN_PTX"));

/// The CUDA backend when a GPU and driver are present, else the CPU reference (with the reason).
pub fn best_backend() -> (std::sync::Arc<dyn backend::GpuBackend>, Option<Error>) {
    match backend::CudaBackend::new() {
        Ok(c) => (std::sync::Arc::new(c), None),
        Err(e) => (std::sync::Arc::new(backend::CpuBackend::new()), Some(e)),
    }
}
