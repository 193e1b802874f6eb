//! Shared by the benches: the library's bench helpers (`denseffn::bench`) in the shapes
//! criterion wants, and the GPU + cuBLAS setup.
#![allow(dead_code)]
use denseffn::backend::{CudaBackend, GpuBackend};
pub use denseffn::bench::cublas::{Cublas, CublasFfn};
use denseffn::bench::{synth, timing};
use denseffn::buffer::DeviceBuffer;
use denseffn::layer::{DenseFfnLayer, FfnActivation};
use rand::rngs::SmallRng;
use std::sync::Arc;
use std::time::Duration;

/// Time per call of `f`, from GPU events on the default stream around `iters` calls.
pub fn gpu_time(gpu: &dyn GpuBackend, iters: u64, mut f: impl FnMut()) -> Duration {
    let us = timing::time_us(gpu, 0, iters, || {
        f();
        Ok(())
    })
    .expect("GPU events");
    Duration::from_secs_f64(us * 1e-6 * iters as f64)
}

/// Median of `reps` timings of `iters` calls each on `stream`, µs per call.
pub fn median_us_on(
    gpu: &dyn GpuBackend,
    stream: u64,
    reps: usize,
    iters: u64,
    mut f: impl FnMut(),
) -> f64 {
    timing::median_us(gpu, stream, reps, iters, || {
        f();
        Ok(())
    })
    .expect("GPU events")
}

/// Median of `reps` timings of `iters` calls each on the default stream, µs per call.
pub fn median_us(gpu: &dyn GpuBackend, reps: usize, iters: u64, f: impl FnMut()) -> f64 {
    median_us_on(gpu, 0, reps, iters, f)
}

/// Device-to-device copy bandwidth (read + write), GB/s, over 1 GiB.
pub fn copy_gbs(gpu: &Arc<dyn GpuBackend>) -> f64 {
    timing::copy_gbs(gpu, 1 << 30, 5, 10).expect("copy bandwidth")
}

/// `n` random small bf16 values on the GPU.
pub fn random_bf16(gpu: &Arc<dyn GpuBackend>, n: usize, rng: &mut SmallRng) -> DeviceBuffer {
    synth::small_bf16(gpu, n, rng).unwrap()
}

/// The GPU and a cuBLAS handle, or `None` (with the reason printed) when either is missing.
pub fn setup(bench: &str) -> Option<(Arc<dyn GpuBackend>, Cublas)> {
    let gpu: Arc<dyn GpuBackend> = match CudaBackend::new() {
        Ok(g) => Arc::new(g),
        Err(e) => {
            println!("{bench} bench skipped: {e}");
            return None;
        }
    };
    match Cublas::new() {
        Ok(b) => Some((gpu, b)),
        Err(e) => {
            println!("{bench} bench skipped: {e}");
            None
        }
    }
}

/// A random NVFP4 SiLU layer of `hidden × inter` on `gpu` (activations stay O(1)).
pub fn random_layer(
    gpu: &Arc<dyn GpuBackend>,
    h: usize,
    i: usize,
    rng: &mut SmallRng,
) -> DenseFfnLayer {
    synth::nvfp4_layer(gpu, h, i, FfnActivation::Silu, rng).unwrap()
}
