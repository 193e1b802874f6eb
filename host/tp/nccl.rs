//! NCCL communicators (cudarc's `nccl`, loaded at run time like the driver: building needs no
//! NCCL, and a machine without `libnccl.so` on the loader path gets an error, not a panic).
//! One process drives every rank's device (`ncclCommInitAll`); each rank's calls are made from
//! its own thread.
use super::AllReduce;
use crate::backend::{CudaBackend, DevicePtr};
use crate::error::{Error, Result};
use cudarc::nccl::{result as nc, sys};
use std::sync::Arc;

/// One rank of an NCCL group over CUDA backends.
pub struct NcclAllReduce {
    comm: sys::ncclComm_t,
    rank: usize,
    world: usize,
    gpu: Arc<CudaBackend>,
}

// SAFETY: an NCCL communicator may be used from any thread; the layer's contract is that one
// rank's collective calls are not made from two threads at once (each rank has its own thread).
unsafe impl Send for NcclAllReduce {}
// SAFETY: as above: `all_reduce_bf16` only enqueues work on the caller's stream.
unsafe impl Sync for NcclAllReduce {}

fn nccl_err(what: &str, e: nc::NcclError) -> Error {
    Error::Driver(format!("{what}: {e:?}"))
}

impl NcclAllReduce {
    /// Whether `libnccl.so` can be loaded here.
    pub fn available() -> bool {
        // SAFETY: only probes for the library.
        unsafe { sys::is_culib_present() }
    }

    /// One communicator per backend, rank `r` on `gpus[r]`'s device (distinct devices).
    pub fn group(gpus: &[Arc<CudaBackend>]) -> Result<Vec<NcclAllReduce>> {
        if gpus.is_empty() {
            return Err(Error::Invalid("an NCCL group of 0 ranks".into()));
        }
        if !Self::available() {
            return Err(Error::NoDevice(
                "NCCL (libnccl.so) was not found on the loader path".into(),
            ));
        }
        let devs: Vec<i32> = gpus.iter().map(|g| g.ordinal()).collect();
        for (i, d) in devs.iter().enumerate() {
            if devs[..i].contains(d) {
                return Err(Error::Invalid(format!(
                    "device {d} given to two ranks of one NCCL group"
                )));
            }
        }
        let mut comms = vec![std::ptr::null_mut(); gpus.len()];
        // SAFETY: comms has one slot per device in devs.
        unsafe { nc::comm_init_all(comms.as_mut_ptr(), devs.len() as i32, devs.as_ptr()) }
            .map_err(|e| nccl_err("ncclCommInitAll", e))?;
        Ok(comms
            .into_iter()
            .zip(gpus)
            .enumerate()
            .map(|(rank, (comm, gpu))| NcclAllReduce {
                comm,
                rank,
                world: gpus.len(),
                gpu: gpu.clone(),
            })
            .collect())
    }
}

impl Drop for NcclAllReduce {
    fn drop(&mut self) {
        // SAFETY: the communicator was made by group() and is destroyed once, here.
        let _ = unsafe { nc::comm_destroy(self.comm) };
    }
}

impl AllReduce for NcclAllReduce {
    fn rank(&self) -> usize {
        self.rank
    }

    fn world_size(&self) -> usize {
        self.world
    }

    fn all_reduce_bf16(&self, buf: DevicePtr, count: usize, stream: u64) -> Result<()> {
        self.gpu.make_current()?;
        let p = buf.0 as *mut std::ffi::c_void;
        // SAFETY: buf holds `count` bf16 values on this rank's device (the layer's output);
        // in-place all-reduce is allowed; the stream is a raw CUstream of this context.
        unsafe {
            nc::all_reduce(
                p,
                p,
                count,
                sys::ncclDataType_t::ncclBfloat16,
                sys::ncclRedOp_t::ncclSum,
                self.comm,
                stream as sys::cudaStream_t,
            )
        }
        .map(|_| ())
        .map_err(|e| nccl_err("ncclAllReduce", e))
    }
}
