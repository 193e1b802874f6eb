//! The seam between the layer and a device: memory, kernels, streams and timing.
//!
//! [`GpuBackend`] is object-safe; the layer holds an `Arc<dyn GpuBackend>`. Two implementations:
//! [`CudaBackend`] (the GPU, through the CUDA driver loaded at run time) and [`CpuBackend`] (the
//! reference: it executes the same [`Launch`]es with plain Rust math on host memory).
mod cpu;
pub(crate) mod cpu_kernels;
mod cpu_mmq;
mod cpu_nvfp4_mmq;
mod cuda;
pub mod graph;

pub use cpu::CpuBackend;
pub use cuda::CudaBackend;
pub use graph::{Graph, Stream};

use crate::error::{Error, Result};

/// An opaque 64-bit device address (a `CUdeviceptr` on CUDA).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct DevicePtr(pub u64);

impl DevicePtr {
    /// The null pointer.
    pub const NULL: DevicePtr = DevicePtr(0);

    /// `self + bytes`.
    pub fn offset(self, bytes: usize) -> DevicePtr {
        DevicePtr(self.0 + bytes as u64)
    }
}

/// One kernel launch: the entry point's name, grid and block sizes, dynamic shared memory in
/// bytes, and the bytes of its parameter block (see `denseffn_device::params`).
#[derive(Clone, Copy, Debug)]
pub struct Launch<'a> {
    /// Entry point name, e.g. `gemv_nvfp4_gate_up`.
    pub kernel: &'static str,
    /// Blocks in x, y, z.
    pub grid: (u32, u32, u32),
    /// Threads per block in x, y, z.
    pub block: (u32, u32, u32),
    /// Dynamic shared memory per block, bytes.
    pub smem: u32,
    /// The parameter block, exactly as the kernel's single by-value parameter.
    pub params: &'a [u8],
}

/// A bf16 matrix in device memory as a kernel's TMA copies read it ([`TileMap`]): `rows ×
/// cols` elements, row-major (rows `2·cols` bytes apart; `cols` a multiple of 8, `base` 16-byte
/// aligned), read in boxes of `box_rows × box_cols` (`box_cols`: 64, one 128-byte row of a
/// box) that land in shared memory with the 128-byte swizzle (16-byte piece `j` of a box's row
/// `r` at piece `j ^ (r % 8)`); elements past the matrix read as zeros.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TileMapSpec {
    /// The matrix's first element.
    pub base: DevicePtr,
    /// Rows (the outer dimension: tokens).
    pub rows: u32,
    /// Columns (the inner dimension).
    pub cols: u32,
    /// Rows of a box (≤ 256).
    pub box_rows: u32,
    /// Columns of a box (64).
    pub box_cols: u32,
}

impl TileMapSpec {
    /// Checks what both backends' maps need: a 16-byte aligned, non-null `base`, at least one
    /// row, `cols` a positive multiple of 8, boxes of 1..=256 rows × 64 columns.
    pub fn check(&self) -> Result<()> {
        let ok = self.base.0 != 0
            && self.base.0 % 16 == 0
            && self.rows >= 1
            && self.cols >= 8
            && self.cols % 8 == 0
            && (1..=256).contains(&self.box_rows)
            && self.box_cols == 64;
        if ok {
            Ok(())
        } else {
            Err(Error::Invalid(format!("tile map: unsupported {self:?}")))
        }
    }
}

pub use denseffn_device::params::TileMap;

/// A recorded point in a stream's timeline, for GPU-event timing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event(pub u64);

/// The error of a stream or graph method a backend does not implement.
fn not_implemented(backend: &str, what: &str) -> Error {
    Error::Unsupported(format!(
        "{backend}: {what} is not implemented by this backend"
    ))
}

/// A captured stream of work, instantiated and ready to launch: a `CUgraphExec` on CUDA, a
/// recorded list of launches and copies on the CPU backend. Made by
/// [`GpuBackend::end_capture`], freed by [`GpuBackend::destroy_graph`] (or hold it in a
/// [`Graph`], which frees it on drop). Deliberately not `Clone`: it is destroyed once.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct GraphHandle(pub u64);

/// What a device offers the layer. `stream` is a raw stream handle (`CUstream`; 0 is the legacy
/// default stream), as engines pass it.
pub trait GpuBackend: Send + Sync {
    /// Short name for logs and tables (`cuda`, `cpu`).
    fn name(&self) -> &'static str;
    /// Device name (e.g. `NVIDIA H200`).
    fn device_name(&self) -> String;
    /// Multiprocessors, for launch planning.
    fn sm_count(&self) -> u32;
    /// Allocates `bytes` (> 0) of device memory.
    fn alloc(&self, bytes: usize) -> Result<DevicePtr>;
    /// Frees an allocation made by [`GpuBackend::alloc`].
    fn free(&self, ptr: DevicePtr) -> Result<()>;
    /// Bytes from `ptr` to the end of its allocation, or `None` if `ptr` is in none.
    fn bytes_from(&self, ptr: DevicePtr) -> Option<usize>;
    /// Copies host bytes to the device (synchronous).
    fn upload(&self, dst: DevicePtr, src: &[u8]) -> Result<()>;
    /// Copies device bytes to the host (synchronous: waits for all prior work).
    fn download(&self, dst: &mut [u8], src: DevicePtr) -> Result<()>;
    /// Sets `len` bytes at `dst` to `byte` (synchronous).
    fn memset(&self, dst: DevicePtr, byte: u8, len: usize) -> Result<()>;
    /// Device-to-device copy, ordered on `stream`.
    fn copy_async(&self, dst: DevicePtr, src: DevicePtr, len: usize, stream: u64) -> Result<()>;
    /// (free, total) device memory in bytes.
    fn mem_info(&self) -> Result<(usize, usize)>;
    /// Whether the loaded module has the entry point `name`.
    fn has_kernel(&self, name: &str) -> bool;
    /// How many blocks of `threads` threads, each with `smem` bytes of dynamic shared memory,
    /// one SM holds at once for `kernel` (registers, shared memory and thread limits: the CUDA
    /// occupancy calculator), for launch planning; at least 1. The default (and the CPU
    /// reference, which has no occupancy) is 4.
    fn resident_blocks(&self, kernel: &str, threads: u32, smem: u32) -> u32 {
        let _ = (kernel, threads, smem);
        4
    }
    /// How many clusters of `cluster` blocks of `kernel` (`threads` threads, `smem` bytes of
    /// dynamic shared memory each; a kernel declared with that cluster size) the device runs
    /// at once (CUDA's `cuOccupancyMaxActiveClusters`: the SMs of a cluster share a GPC, so
    /// this can be less than SMs ÷ `cluster`), for sizing a persistent grid. The default (and
    /// the CPU reference's) is `sm_count() / cluster`.
    fn max_active_clusters(&self, kernel: &str, threads: u32, smem: u32, cluster: u32) -> u32 {
        let _ = (kernel, threads, smem);
        self.sm_count() / cluster.max(1)
    }
    /// The tensor map of `spec` for a launch's parameter block: the driver's encoding
    /// (`cuTensorMapEncodeTiled`) on CUDA, the CPU reference's own description of `spec` on the
    /// CPU backend (whose kernels read through it). A host call: nothing is enqueued.
    fn encode_tile_map(&self, spec: &TileMapSpec) -> Result<TileMap>;
    /// Enqueues a launch on `stream`.
    fn launch(&self, launch: &Launch, stream: u64) -> Result<()>;
    /// Enqueues a launch on `stream` that may start before the kernel launched just before it on
    /// `stream` has finished (Hopper's programmatic dependent launch), so its start-up and main
    /// loop overlap that kernel's tail. The kernel must run `griddepcontrol.wait` before it
    /// reads anything that kernel writes, and must not write anything that kernel reads or
    /// writes. Counted like [`GpuBackend::launch`]. The default (and the CPU backend) is an
    /// ordinary launch.
    fn launch_dependent(&self, launch: &Launch, stream: u64) -> Result<()> {
        self.launch(launch, stream)
    }
    /// Waits until all work on `stream` is done.
    fn synchronize(&self, stream: u64) -> Result<()>;
    /// Launches so far (both backends count them; tests assert per-path launch counts).
    fn launch_count(&self) -> u64;
    /// Records an event on `stream`.
    fn record_event(&self, stream: u64) -> Result<Event>;
    /// Milliseconds between two recorded events (waits for `end`); destroys both.
    fn elapsed_ms(&self, start: Event, end: Event) -> Result<f32>;

    /// Creates a stream (non-blocking with respect to the legacy default stream) and returns
    /// its raw handle. Capture needs one: the legacy default stream (0) cannot be captured.
    /// The default implementation says the backend has no streams of its own.
    fn create_stream(&self) -> Result<u64> {
        Err(not_implemented(self.name(), "create_stream"))
    }
    /// Destroys a stream made by [`GpuBackend::create_stream`] (after its work is done).
    fn destroy_stream(&self, stream: u64) -> Result<()> {
        let _ = stream;
        Err(not_implemented(self.name(), "destroy_stream"))
    }
    /// Starts capturing `stream` (one made by [`GpuBackend::create_stream`]; 0 is refused):
    /// from now until [`GpuBackend::end_capture`], launches and copies enqueued on it are
    /// recorded, not run, and [`GpuBackend::record_event`] on it is refused.
    fn begin_capture(&self, stream: u64) -> Result<()> {
        let _ = stream;
        Err(not_implemented(self.name(), "graph capture"))
    }
    /// Ends the capture of `stream` and returns the recorded work, instantiated. The stream
    /// is no longer capturing afterwards, whether this succeeds or not.
    fn end_capture(&self, stream: u64) -> Result<GraphHandle> {
        let _ = stream;
        Err(not_implemented(self.name(), "graph capture"))
    }
    /// Enqueues the whole captured graph on `stream` (any stream, also 0). Its kernels count
    /// in [`GpuBackend::launch_count`] (captured launches do not: they were not run).
    fn launch_graph(&self, graph: &GraphHandle, stream: u64) -> Result<()> {
        let _ = (graph, stream);
        Err(not_implemented(self.name(), "graph launch"))
    }
    /// Frees a graph made by [`GpuBackend::end_capture`].
    fn destroy_graph(&self, graph: GraphHandle) -> Result<()> {
        let _ = graph;
        Err(not_implemented(self.name(), "graphs"))
    }
}
