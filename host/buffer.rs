//! Owned device allocations.
use crate::backend::{DevicePtr, GpuBackend};
use crate::error::Result;
use std::sync::Arc;

/// A device allocation freed on drop. Weights and scratch are held in these, so an error
/// half-way through building something frees what was already allocated.
pub struct DeviceBuffer {
    gpu: Arc<dyn GpuBackend>,
    ptr: DevicePtr,
    len: usize,
}

impl DeviceBuffer {
    /// Allocates `len` bytes.
    pub fn alloc(gpu: &Arc<dyn GpuBackend>, len: usize) -> Result<Self> {
        let ptr = gpu.alloc(len)?;
        Ok(DeviceBuffer {
            gpu: gpu.clone(),
            ptr,
            len,
        })
    }

    /// Allocates and fills with `data`.
    pub fn from_bytes(gpu: &Arc<dyn GpuBackend>, data: &[u8]) -> Result<Self> {
        let b = Self::alloc(gpu, data.len())?;
        gpu.upload(b.ptr, data)?;
        Ok(b)
    }

    /// Allocates and zeroes.
    pub fn zeroed(gpu: &Arc<dyn GpuBackend>, len: usize) -> Result<Self> {
        let b = Self::alloc(gpu, len)?;
        gpu.memset(b.ptr, 0, len)?;
        Ok(b)
    }

    /// The device address.
    pub fn ptr(&self) -> DevicePtr {
        self.ptr
    }

    /// The backend that owns the allocation.
    pub fn backend(&self) -> &Arc<dyn GpuBackend> {
        &self.gpu
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer is empty (never, allocations are > 0 bytes).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Copies the contents to the host.
    pub fn to_vec(&self) -> Result<Vec<u8>> {
        let mut v = vec![0u8; self.len];
        self.gpu.download(&mut v, self.ptr)?;
        Ok(v)
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        if let Err(e) = self.gpu.free(self.ptr) {
            tracing::warn!("freeing {} bytes at {:#x}: {e}", self.len, self.ptr.0);
        }
    }
}

impl std::fmt::Debug for DeviceBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "DeviceBuffer({:#x}, {} bytes on {})",
            self.ptr.0,
            self.len,
            self.gpu.name()
        )
    }
}
