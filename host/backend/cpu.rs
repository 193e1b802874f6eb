//! The CPU reference backend: host memory behind fake device addresses, launches executed by
//! plain Rust (f64 accumulation), an optional memory capacity, and a launch counter.
//!
//! Streams and graphs: [`GpuBackend::create_stream`] hands out stream ids (work on any stream
//! runs at once, in call order). Capturing a created stream records its launches and copies
//! (checked then for missing kernels, as the driver checks them, but not run);
//! [`GpuBackend::launch_graph`] replays the record in order, each replayed launch counted. As
//! on CUDA: stream 0 cannot be captured, nor a stream twice, and events cannot be recorded on a
//! stream being captured.
use super::{cpu_kernels, DevicePtr, Event, GpuBackend, GraphHandle, Launch, TileMap, TileMapSpec};
use crate::error::{Error, Result};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Host memory addressed like device memory.
pub(crate) struct Memory {
    allocs: BTreeMap<u64, Vec<u8>>,
    next: u64,
    used: usize,
}

impl Memory {
    fn find(&self, ptr: u64) -> Option<(u64, usize)> {
        let (&base, v) = self.allocs.range(..=ptr).next_back()?;
        (ptr < base + v.len() as u64).then_some((base, v.len()))
    }

    /// `len` bytes at `ptr`, which must lie inside one allocation.
    pub(crate) fn read(&self, ptr: u64, len: usize) -> Result<&[u8]> {
        let (base, size) = self.find(ptr).ok_or_else(|| {
            Error::BadAccess(format!(
                "read of {len} bytes at {ptr:#x}: not in any allocation"
            ))
        })?;
        let off = (ptr - base) as usize;
        if off + len > size {
            return Err(Error::BadAccess(format!(
                "read of {len} bytes at {ptr:#x} runs {} bytes past its allocation",
                off + len - size
            )));
        }
        Ok(&self.allocs[&base][off..off + len])
    }

    /// Mutable `len` bytes at `ptr`.
    pub(crate) fn write(&mut self, ptr: u64, len: usize) -> Result<&mut [u8]> {
        let (base, size) = self.find(ptr).ok_or_else(|| {
            Error::BadAccess(format!(
                "write of {len} bytes at {ptr:#x}: not in any allocation"
            ))
        })?;
        let off = (ptr - base) as usize;
        if off + len > size {
            return Err(Error::BadAccess(format!(
                "write of {len} bytes at {ptr:#x} runs {} bytes past its allocation",
                off + len - size
            )));
        }
        Ok(&mut self.allocs.get_mut(&base).expect("found above")[off..off + len])
    }
}

/// One recorded stream operation of a captured graph.
enum Op {
    Launch {
        kernel: &'static str,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        smem: u32,
        params: Vec<u8>,
    },
    Copy {
        dst: DevicePtr,
        src: DevicePtr,
        len: usize,
    },
}

/// Streams, captures in progress and captured graphs.
#[derive(Default)]
struct Graphs {
    streams: HashSet<u64>,
    capturing: HashMap<u64, Vec<Op>>,
    graphs: HashMap<u64, Arc<Vec<Op>>>,
    next: u64,
}

/// The reference backend. Not a mock: each launch computes the function the GPU kernel of the
/// same name must compute (see `cpu_kernels`), so GPU results are checked against it.
pub struct CpuBackend {
    mem: Mutex<Memory>,
    capacity: Option<usize>,
    /// Allocations made so far, and the index of one that must fail (fault injection).
    allocs_made: AtomicU64,
    fail_alloc: AtomicU64,
    /// What [`GpuBackend::resident_blocks`] answers for every kernel.
    resident: u32,
    /// What `sm_count` answers ([`CpuBackend::with_sm_count`]).
    sm_count: u32,
    missing: HashSet<String>,
    launches: AtomicU64,
    /// The grid of each kernel's latest launch (what the layer's launch plans chose).
    grids: Mutex<HashMap<&'static str, (u32, u32, u32)>>,
    events: Mutex<HashMap<u64, Instant>>,
    next_event: AtomicU64,
    graphs: Mutex<Graphs>,
}

impl Default for CpuBackend {
    fn default() -> Self {
        Self::new()
    }
}

impl CpuBackend {
    /// Unlimited memory, every kernel present.
    pub fn new() -> Self {
        CpuBackend {
            mem: Mutex::new(Memory {
                allocs: BTreeMap::new(),
                next: 0x1_0000_0000,
                used: 0,
            }),
            capacity: None,
            allocs_made: AtomicU64::new(0),
            fail_alloc: AtomicU64::new(u64::MAX),
            resident: 4,
            sm_count: 132,
            missing: HashSet::new(),
            launches: AtomicU64::new(0),
            grids: Mutex::new(HashMap::new()),
            events: Mutex::new(HashMap::new()),
            next_event: AtomicU64::new(1),
            graphs: Mutex::new(Graphs::default()),
        }
    }

    /// Answers `n` (1..=8, clamped) for every kernel's resident blocks per SM, as a GPU whose
    /// kernels had that occupancy would, so the layer's launch plans (K splits, split-K
    /// scratch) can be exercised for each occupancy on the CPU.
    pub fn with_resident_blocks(mut self, n: u32) -> Self {
        self.resident = n.clamp(1, 8);
        self
    }

    /// Answers `n` (at least 1) for the SM count (default 132, an H100's or H200's), so launch
    /// plans that depend on it (the BF16 gate+up tail split: whole tiles, then the last wave's
    /// tiles split) can be exercised on small shapes.
    pub fn with_sm_count(mut self, n: u32) -> Self {
        self.sm_count = n.max(1);
        self
    }

    /// The grid of `kernel`'s latest launch, if it has run (a split-K GEMM's third dimension is
    /// its K splits).
    pub fn last_grid(&self, kernel: &str) -> Option<(u32, u32, u32)> {
        let grids = self.grids.lock().unwrap_or_else(|e| e.into_inner());
        grids.get(kernel).copied()
    }

    /// At most `bytes` allocated at once: allocations past it fail with `OutOfMemory`.
    pub fn with_capacity(bytes: usize) -> Self {
        CpuBackend {
            capacity: Some(bytes),
            ..Self::new()
        }
    }

    /// Fault injection: the allocation with index `n` (0-based, counted from creation) fails
    /// with `OutOfMemory`; all others succeed (within the capacity, if any).
    pub fn failing_allocation(self, n: u64) -> Self {
        self.fail_allocation_at(n);
        self
    }

    /// Fault injection on a live backend: from now on the allocation with index `n` (counted
    /// from creation, see [`CpuBackend::allocations_attempted`]) fails with `OutOfMemory`.
    pub fn fail_allocation_at(&self, n: u64) {
        self.fail_alloc.store(n, Ordering::Relaxed);
    }

    /// Allocations attempted so far (successful or not).
    pub fn allocations_attempted(&self) -> u64 {
        self.allocs_made.load(Ordering::Relaxed)
    }

    /// Every kernel the reference backend executes (the library's whole kernel set).
    pub fn kernels() -> &'static [&'static str] {
        cpu_kernels::KERNELS
    }

    /// A module without these kernels (for testing missing-kernel errors).
    pub fn without_kernels(mut self, names: &[&str]) -> Self {
        self.missing.extend(names.iter().map(|s| s.to_string()));
        self
    }

    /// Bytes allocated now.
    pub fn used_bytes(&self) -> usize {
        self.mem.lock().expect("cpu memory lock").used
    }

    /// Allocations alive now.
    pub fn live_allocations(&self) -> usize {
        self.mem.lock().expect("cpu memory lock").allocs.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Memory> {
        self.mem.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn graphs(&self) -> std::sync::MutexGuard<'_, Graphs> {
        self.graphs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records `op` if `stream` is being captured (then it must not run now).
    fn captured(&self, stream: u64, op: impl FnOnce() -> Op) -> bool {
        match self.graphs().capturing.get_mut(&stream) {
            Some(ops) => {
                ops.push(op());
                true
            }
            None => false,
        }
    }

    fn run_launch(&self, launch: &Launch) -> Result<()> {
        self.launches.fetch_add(1, Ordering::Relaxed);
        self.grids
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(launch.kernel, launch.grid);
        cpu_kernels::run(&mut self.lock(), launch, self.sm_count)
    }

    fn run_copy(&self, dst: DevicePtr, src: DevicePtr, len: usize) -> Result<()> {
        let mut m = self.lock();
        let data = m.read(src.0, len)?.to_vec();
        m.write(dst.0, len)?.copy_from_slice(&data);
        Ok(())
    }
}

impl GpuBackend for CpuBackend {
    fn name(&self) -> &'static str {
        "cpu"
    }
    fn device_name(&self) -> String {
        "CPU reference".into()
    }
    fn sm_count(&self) -> u32 {
        self.sm_count
    }
    fn alloc(&self, bytes: usize) -> Result<DevicePtr> {
        if bytes == 0 {
            return Err(Error::Invalid("allocation of 0 bytes".into()));
        }
        let index = self.allocs_made.fetch_add(1, Ordering::Relaxed);
        let mut m = self.lock();
        if self.fail_alloc.load(Ordering::Relaxed) == index {
            return Err(Error::OutOfMemory {
                requested: bytes,
                free: 0,
            });
        }
        if let Some(cap) = self.capacity {
            if m.used + bytes > cap {
                return Err(Error::OutOfMemory {
                    requested: bytes,
                    free: cap - m.used,
                });
            }
        }
        let ptr = m.next;
        m.next += (bytes as u64).div_ceil(256) * 256 + 256;
        m.used += bytes;
        m.allocs.insert(ptr, vec![0xA5; bytes]);
        Ok(DevicePtr(ptr))
    }
    fn free(&self, ptr: DevicePtr) -> Result<()> {
        let mut m = self.lock();
        let v = m
            .allocs
            .remove(&ptr.0)
            .ok_or_else(|| Error::BadAccess(format!("free of {:#x}: not an allocation", ptr.0)))?;
        m.used -= v.len();
        Ok(())
    }
    fn bytes_from(&self, ptr: DevicePtr) -> Option<usize> {
        let m = self.lock();
        m.find(ptr.0)
            .map(|(base, len)| len - (ptr.0 - base) as usize)
    }
    fn upload(&self, dst: DevicePtr, src: &[u8]) -> Result<()> {
        self.lock().write(dst.0, src.len())?.copy_from_slice(src);
        Ok(())
    }
    fn download(&self, dst: &mut [u8], src: DevicePtr) -> Result<()> {
        dst.copy_from_slice(self.lock().read(src.0, dst.len())?);
        Ok(())
    }
    fn memset(&self, dst: DevicePtr, byte: u8, len: usize) -> Result<()> {
        self.lock().write(dst.0, len)?.fill(byte);
        Ok(())
    }
    fn copy_async(&self, dst: DevicePtr, src: DevicePtr, len: usize, stream: u64) -> Result<()> {
        if self.captured(stream, || Op::Copy { dst, src, len }) {
            return Ok(());
        }
        self.run_copy(dst, src, len)
    }
    fn mem_info(&self) -> Result<(usize, usize)> {
        let used = self.lock().used;
        let total = self.capacity.unwrap_or(usize::MAX / 2);
        Ok((total - used, total))
    }
    fn has_kernel(&self, name: &str) -> bool {
        cpu_kernels::KERNELS.contains(&name) && !self.missing.contains(name)
    }
    fn resident_blocks(&self, _kernel: &str, _threads: u32, _smem: u32) -> u32 {
        self.resident
    }
    fn encode_tile_map(&self, spec: &TileMapSpec) -> Result<TileMap> {
        cpu_kernels::encode_tile_map(spec)
    }
    fn launch(&self, launch: &Launch, stream: u64) -> Result<()> {
        if !self.has_kernel(launch.kernel) {
            return Err(Error::MissingKernel(launch.kernel.into()));
        }
        let op = || Op::Launch {
            kernel: launch.kernel,
            grid: launch.grid,
            block: launch.block,
            smem: launch.smem,
            params: launch.params.to_vec(),
        };
        if self.captured(stream, op) {
            return Ok(());
        }
        self.run_launch(launch)
    }
    fn synchronize(&self, _stream: u64) -> Result<()> {
        Ok(())
    }
    fn launch_count(&self) -> u64 {
        self.launches.load(Ordering::Relaxed)
    }
    fn record_event(&self, stream: u64) -> Result<Event> {
        if self.graphs().capturing.contains_key(&stream) {
            return Err(Error::Invalid(format!(
                "record_event on stream {stream:#x}, which is being captured"
            )));
        }
        let id = self.next_event.fetch_add(1, Ordering::Relaxed);
        self.events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, Instant::now());
        Ok(Event(id))
    }
    fn elapsed_ms(&self, start: Event, end: Event) -> Result<f32> {
        let mut ev = self.events.lock().unwrap_or_else(|e| e.into_inner());
        let (a, b) = (ev.remove(&start.0), ev.remove(&end.0));
        match (a, b) {
            (Some(a), Some(b)) => Ok(b.saturating_duration_since(a).as_secs_f32() * 1e3),
            _ => Err(Error::Invalid("unknown event".into())),
        }
    }
    fn create_stream(&self) -> Result<u64> {
        let mut g = self.graphs();
        g.next += 1;
        let id = 0x5_0000_0000 + g.next;
        g.streams.insert(id);
        Ok(id)
    }
    fn destroy_stream(&self, stream: u64) -> Result<()> {
        let mut g = self.graphs();
        if g.capturing.contains_key(&stream) {
            return Err(Error::Invalid(format!(
                "destroy_stream: stream {stream:#x} is being captured (end the capture first)"
            )));
        }
        if !g.streams.remove(&stream) {
            return Err(Error::Invalid(format!(
                "destroy_stream: {stream:#x} is not a stream made by create_stream"
            )));
        }
        Ok(())
    }
    fn begin_capture(&self, stream: u64) -> Result<()> {
        let mut g = self.graphs();
        if stream == 0 {
            return Err(Error::Invalid(
                "begin_capture: the legacy default stream (0) cannot be captured; capture a stream made by create_stream".into(),
            ));
        }
        if !g.streams.contains(&stream) {
            return Err(Error::Invalid(format!(
                "begin_capture: {stream:#x} is not a stream made by create_stream"
            )));
        }
        if g.capturing.contains_key(&stream) {
            return Err(Error::Invalid(format!(
                "begin_capture: stream {stream:#x} is already being captured"
            )));
        }
        g.capturing.insert(stream, Vec::new());
        Ok(())
    }
    fn end_capture(&self, stream: u64) -> Result<GraphHandle> {
        let mut g = self.graphs();
        let ops = g.capturing.remove(&stream).ok_or_else(|| {
            Error::Invalid(format!(
                "end_capture: stream {stream:#x} is not being captured"
            ))
        })?;
        g.next += 1;
        let id = 0x6_0000_0000 + g.next;
        g.graphs.insert(id, Arc::new(ops));
        Ok(GraphHandle(id))
    }
    fn launch_graph(&self, graph: &GraphHandle, stream: u64) -> Result<()> {
        // Run from a shared copy of the record, the graph table unlocked (a graph launched into
        // a capture is recorded op by op like any other work).
        let ops = self.graphs().graphs.get(&graph.0).cloned().ok_or_else(|| {
            Error::Invalid(format!("launch_graph: {:#x} is not a live graph", graph.0))
        })?;
        for op in ops.iter() {
            match op {
                Op::Launch {
                    kernel,
                    grid,
                    block,
                    smem,
                    params,
                } => self.launch(
                    &Launch {
                        kernel,
                        grid: *grid,
                        block: *block,
                        smem: *smem,
                        params,
                    },
                    stream,
                ),
                Op::Copy { dst, src, len } => self.copy_async(*dst, *src, *len, stream),
            }?;
        }
        Ok(())
    }
    fn destroy_graph(&self, graph: GraphHandle) -> Result<()> {
        match self.graphs().graphs.remove(&graph.0) {
            Some(_) => Ok(()),
            None => Err(Error::Invalid(format!(
                "destroy_graph: {:#x} is not a live graph",
                graph.0
            ))),
        }
    }
}
