//! The cuBLAS bf16 FFN anchor: gate+up as one GEMM, then down (the activation between them is
//! left out, <1% of the bytes), bf16 in and out, f32 compute. cudarc loads libcublas at run
//! time: [`Cublas::new`] checks that it is there first and says so, instead of panicking.
use super::synth;
use crate::backend::{DevicePtr, GpuBackend};
use crate::buffer::DeviceBuffer;
use crate::{Error, Result};
use cudarc::cublas::{result as blas, sys as bsys};
use rand::RngCore;
use std::ffi::c_void;
use std::sync::Arc;

/// A cuBLAS handle on the current CUDA context (make a [`crate::backend::CudaBackend`] first).
pub struct Cublas {
    handle: bsys::cublasHandle_t,
}

impl Cublas {
    /// A handle, or `Error::Unsupported` saying why not (no libcublas on the library path, or
    /// handle creation failed).
    pub fn new() -> Result<Self> {
        // SAFETY: only probes for the library; nothing is called through it when absent.
        if !unsafe { bsys::is_culib_present() } {
            return Err(Error::Unsupported(
                "libcublas was not found (cudarc loads it at run time: put the directory of libcublas.so.* on LD_LIBRARY_PATH)".into(),
            ));
        }
        let handle = blas::create_handle()
            .map_err(|e| Error::Unsupported(format!("cublasCreate: {e:?}")))?;
        Ok(Cublas { handle })
    }

    /// `y[ntok][out] = W[out][inp] · x[ntok][inp]`, all bf16, f32 compute, on the handle's
    /// stream (the legacy default stream).
    pub fn gemm(
        &self,
        w: DevicePtr,
        x: DevicePtr,
        y: DevicePtr,
        out: usize,
        inp: usize,
        ntok: usize,
    ) -> Result<()> {
        let dim = |v: usize| {
            i32::try_from(v).map_err(|_| Error::Invalid(format!("cuBLAS dimension {v} > i32")))
        };
        let (m, n, k) = (dim(out)?, dim(ntok)?, dim(inp)?);
        let (alpha, beta) = (1.0f32, 0.0f32);
        // SAFETY: the handle is live; the pointers are device allocations of the sizes the
        // dimensions imply (the callers in this module hold them).
        unsafe {
            blas::gemm_ex(
                self.handle,
                bsys::cublasOperation_t::CUBLAS_OP_T,
                bsys::cublasOperation_t::CUBLAS_OP_N,
                m,
                n,
                k,
                &alpha as *const f32 as *const c_void,
                w.0 as *const c_void,
                bsys::cudaDataType::CUDA_R_16BF,
                k,
                x.0 as *const c_void,
                bsys::cudaDataType::CUDA_R_16BF,
                k,
                &beta as *const f32 as *const c_void,
                y.0 as *mut c_void,
                bsys::cudaDataType::CUDA_R_16BF,
                m,
                bsys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                bsys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
        .map_err(|e| Error::Driver(format!("cublasGemmEx: {e:?}")))
    }
}

impl Drop for Cublas {
    fn drop(&mut self) {
        // SAFETY: the handle was created by `new` and is used by nobody after this.
        unsafe { blas::destroy_handle(self.handle).ok() };
    }
}

/// A bf16 FFN of `h × i` for up to `max_tokens` tokens: random weights and buffers on the GPU.
pub struct CublasFfn {
    h: usize,
    i: usize,
    max_tokens: usize,
    wgu: DeviceBuffer,
    wd: DeviceBuffer,
    x: DeviceBuffer,
    gu: DeviceBuffer,
    y: DeviceBuffer,
}

impl CublasFfn {
    /// Allocates and fills the weights and buffers.
    pub fn new(
        gpu: &Arc<dyn GpuBackend>,
        h: usize,
        i: usize,
        max_tokens: usize,
        rng: &mut impl RngCore,
    ) -> Result<Self> {
        Ok(CublasFfn {
            h,
            i,
            max_tokens,
            wgu: synth::small_bf16(gpu, 2 * i * h, rng)?,
            wd: synth::small_bf16(gpu, h * i, rng)?,
            x: synth::small_bf16(gpu, max_tokens * h, rng)?,
            gu: synth::small_bf16(gpu, max_tokens * 2 * i, rng)?,
            y: synth::small_bf16(gpu, max_tokens * h, rng)?,
        })
    }

    /// Weight bytes (bf16 gate, up, down).
    pub fn weight_bytes(&self) -> usize {
        3 * self.h * self.i * 2
    }

    /// One FFN over `ntok` tokens (two GEMMs).
    pub fn run(&self, blas: &Cublas, ntok: usize) -> Result<()> {
        if ntok == 0 || ntok > self.max_tokens {
            return Err(Error::Invalid(format!(
                "cuBLAS FFN: {ntok} tokens, buffers hold 1..={}",
                self.max_tokens
            )));
        }
        let (h, i) = (self.h, self.i);
        blas.gemm(self.wgu.ptr(), self.x.ptr(), self.gu.ptr(), 2 * i, h, ntok)?;
        blas.gemm(self.wd.ptr(), self.gu.ptr(), self.y.ptr(), h, i, ntok)
    }
}
