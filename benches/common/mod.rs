//! Shared by the benches: GPU-event timing, the cuBLAS bf16 anchor, random bf16 buffers.
#![allow(dead_code)]
use cudarc::cublas::{result as blas, sys as bsys};
use denseffn::backend::{CudaBackend, DevicePtr, GpuBackend};
use denseffn::buffer::DeviceBuffer;
use denseffn::layer::{DenseFfnLayer, DenseFfnWeights};
use denseffn::pack::Nvfp4Host;
use rand::rngs::SmallRng;
use rand::RngCore;
use std::ffi::c_void;
use std::sync::Arc;
use std::time::Duration;

/// Seconds per call of `f`, from GPU events around `iters` calls.
pub fn gpu_time(gpu: &dyn GpuBackend, iters: u64, mut f: impl FnMut()) -> Duration {
    let a = gpu.record_event(0).unwrap();
    for _ in 0..iters {
        f();
    }
    let b = gpu.record_event(0).unwrap();
    Duration::from_secs_f64(gpu.elapsed_ms(a, b).unwrap() as f64 * 1e-3)
}

/// Median of `reps` timings of `iters` calls each, µs per call.
pub fn median_us(gpu: &dyn GpuBackend, reps: usize, iters: u64, mut f: impl FnMut()) -> f64 {
    let mut v: Vec<f64> = (0..reps)
        .map(|_| gpu_time(gpu, iters, &mut f).as_secs_f64() * 1e6 / iters as f64)
        .collect();
    v.sort_by(f64::total_cmp);
    v[reps / 2]
}

pub struct Cublas {
    pub handle: bsys::cublasHandle_t,
}

impl Cublas {
    /// `y[ntok][out] = W[out][inp] · x[ntok][inp]`, all bf16, f32 compute.
    pub fn gemm(
        &self,
        w: DevicePtr,
        x: DevicePtr,
        y: DevicePtr,
        out: usize,
        inp: usize,
        ntok: usize,
    ) {
        let (alpha, beta) = (1.0f32, 0.0f32);
        // SAFETY: all pointers are live device allocations of the sizes the dimensions imply.
        unsafe {
            blas::gemm_ex(
                self.handle,
                bsys::cublasOperation_t::CUBLAS_OP_T,
                bsys::cublasOperation_t::CUBLAS_OP_N,
                out as i32,
                ntok as i32,
                inp as i32,
                &alpha as *const f32 as *const c_void,
                w.0 as *const c_void,
                bsys::cudaDataType::CUDA_R_16BF,
                inp as i32,
                x.0 as *const c_void,
                bsys::cudaDataType::CUDA_R_16BF,
                inp as i32,
                &beta as *const f32 as *const c_void,
                y.0 as *mut c_void,
                bsys::cudaDataType::CUDA_R_16BF,
                out as i32,
                bsys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                bsys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
            .expect("cublasGemmEx");
        }
    }
}

pub fn random_bf16(gpu: &Arc<dyn GpuBackend>, n: usize, rng: &mut SmallRng) -> DeviceBuffer {
    let mut b = vec![0u8; n * 2];
    rng.fill_bytes(&mut b);
    // Finite values of magnitude 2^-7..2^-6 with random signs and mantissas.
    for c in b.chunks_exact_mut(2) {
        let v = (u16::from_le_bytes([c[0], c[1]]) & 0x807F) | 0x3C00;
        c.copy_from_slice(&v.to_le_bytes());
    }
    DeviceBuffer::from_bytes(gpu, &b).unwrap()
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
    match blas::create_handle() {
        Ok(h) => Some((gpu, Cublas { handle: h })),
        Err(e) => {
            println!("{bench} bench skipped: cuBLAS unavailable: {e:?}");
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
    let (gs, ds) = (0.5 / (h as f32).sqrt(), 0.5 / (i as f32).sqrt());
    let gate = Nvfp4Host::random(i, h, gs, rng).unwrap();
    let up = Nvfp4Host::random(i, h, gs, rng).unwrap();
    let down = Nvfp4Host::random(h, i, ds, rng).unwrap();
    DenseFfnLayer::new(
        DenseFfnWeights::upload(gpu, &gate, &up, &down).unwrap(),
        gpu.clone(),
    )
    .unwrap()
}

impl Drop for Cublas {
    fn drop(&mut self) {
        // SAFETY: the handle was created by `setup` and is used by nobody after this.
        unsafe { blas::destroy_handle(self.handle).ok() };
    }
}
