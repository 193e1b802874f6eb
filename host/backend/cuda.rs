//! The CUDA backend: the driver API through cudarc, loaded at run time (no CUDA needed to
//! build), running the PTX that build.rs embedded.
//!
//! Graphs: capture is `cuStreamBeginCapture` in relaxed mode (the layer's host-side checks may
//! query the driver while a capture is open), then `cuStreamEndCapture` and
//! `cuGraphInstantiateWithFlags`; the `CUgraph` is destroyed at once, the `CUgraphExec` is the
//! [`GraphHandle`] until [`GpuBackend::destroy_graph`].
use super::{DevicePtr, Event, GpuBackend, GraphHandle, Launch, TileMap, TileMapSpec};
use crate::error::{Error, Result};
use cudarc::driver::{result as cu, sys};
use std::collections::HashMap;
use std::ffi::{c_void, CString};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// A kernel of the loaded module: its function handle and its one parameter's size in bytes
/// (the driver copies that many bytes from the launch's parameter block).
#[derive(Clone, Copy)]
struct Kernel {
    func: usize,
    param_bytes: usize,
}

/// One CUDA device (its primary context) with the embedded module loaded.
pub struct CudaBackend {
    ctx: sys::CUcontext,
    ordinal: i32,
    module: sys::CUmodule,
    /// Kernels by name: the function and its one parameter's declared size in bytes.
    functions: Mutex<HashMap<String, Option<Kernel>>>,
    /// Occupancy answers by (function, threads, shared-memory bytes).
    resident: Mutex<HashMap<(usize, u32, u32), u32>>,
    name: String,
    sms: u32,
    max_smem: u32,
    launches: AtomicU64,
    /// Streams being captured, with the launches recorded so far.
    capturing: Mutex<HashMap<u64, u64>>,
    /// Live graph executables, with the launches each holds.
    graphs: Mutex<HashMap<u64, u64>>,
}

// SAFETY: CUDA contexts, modules and functions may be used from any thread once made current;
// every method makes the context current first, and the function cache is behind a mutex.
unsafe impl Send for CudaBackend {}
// SAFETY: as above; the driver API is thread-safe.
unsafe impl Sync for CudaBackend {}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The kernel entry points a PTX module declares (`.entry NAME(`), in order.
fn entry_points(ptx: &str) -> impl Iterator<Item = &str> {
    ptx.lines().filter_map(|line| {
        let rest = line.split_once(".entry ")?.1;
        let name = rest.split(['(', ' ', '\t']).next()?.trim();
        (!name.is_empty()).then_some(name)
    })
}

fn drv(e: cu::DriverError) -> Error {
    Error::Driver(format!("{e:?}"))
}

impl CudaBackend {
    /// Device 0 with the library's embedded kernels.
    pub fn new() -> Result<Self> {
        Self::with_ptx(0, crate::PTX)
    }

    /// Device `ordinal` with the given PTX module. Fails cleanly (no panic) when there is no
    /// driver, no device, a device other than compute capability 9.0 (the PTX is sm_90a), or
    /// the module does not load.
    pub fn with_ptx(ordinal: i32, ptx: &str) -> Result<Self> {
        // SAFETY: only probes for the library; nothing is called through it if absent.
        if !unsafe { sys::is_culib_present() } {
            return Err(Error::NoDevice(
                "libcuda (the NVIDIA driver) was not found".into(),
            ));
        }
        cu::init().map_err(|e| Error::NoDevice(format!("cuInit: {e:?}")))?;
        let count = cu::device::get_count().map_err(drv)?;
        if ordinal < 0 || ordinal >= count {
            return Err(Error::NoDevice(format!(
                "device {ordinal} requested, {count} present"
            )));
        }
        let dev = cu::device::get(ordinal).map_err(drv)?;
        // SAFETY: dev is a valid device handle from the driver.
        let ctx = unsafe { cu::primary_ctx::retain(dev) }.map_err(drv)?;
        // SAFETY: ctx was just retained.
        unsafe { cu::ctx::set_current(ctx) }.map_err(drv)?;
        let name = cu::device::get_name(dev).map_err(drv)?;
        let attr = |a| unsafe { cu::device::get_attribute(dev, a) }.map_err(drv);
        let sms = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32;
        let max_smem =
            attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?
                as u32;
        // The module is built for sm_90a (Hopper `wgmma`): say so instead of the driver's
        // "no kernel image" on any other device.
        let cc = (
            attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
            attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
        );
        if cc != (9, 0) {
            return Err(Error::Unsupported(format!(
                "{name} has compute capability {}.{}; denseffn's kernels are built for sm_90a (9.0: H100, H200)",
                cc.0, cc.1
            )));
        }
        let image =
            CString::new(ptx).map_err(|_| Error::Invalid("PTX contains a NUL byte".into()))?;
        // SAFETY: image is a NUL-terminated PTX text that outlives the call.
        let module = unsafe { cu::module::load_data(image.as_ptr() as *const c_void) }
            .map_err(|e| Error::Driver(format!("loading the PTX module: {e:?}")))?;
        let backend = CudaBackend {
            ctx,
            ordinal,
            module,
            functions: Mutex::new(HashMap::new()),
            resident: Mutex::new(HashMap::new()),
            name,
            sms,
            max_smem,
            launches: AtomicU64::new(0),
            capturing: Mutex::new(HashMap::new()),
            graphs: Mutex::new(HashMap::new()),
        };
        // With lazy loading (the driver's default since CUDA 12.2) a kernel's code is put in
        // device memory when its function is first looked up, which would otherwise be its
        // first launch: possibly after an engine sized its KV cache from the free memory,
        // so an allocation the load contract forbids. Every entry point is looked up now.
        for name in entry_points(ptx) {
            backend.function(name)?;
        }
        Ok(backend)
    }

    /// The device's ordinal.
    pub fn ordinal(&self) -> i32 {
        self.ordinal
    }

    /// Makes this backend's context current on the calling thread (for libraries, such as
    /// NCCL, that work on the current context).
    pub fn make_current(&self) -> Result<()> {
        self.current()
    }

    fn current(&self) -> Result<()> {
        // SAFETY: self.ctx stays retained for the backend's life.
        unsafe { cu::ctx::set_current(self.ctx) }.map_err(drv)
    }

    /// The function handle of `name` (as usize for Send), looked up once and cached.
    fn function(&self, name: &str) -> Result<Option<Kernel>> {
        let mut f = self.functions.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(v) = f.get(name) {
            return Ok(*v);
        }
        self.current()?;
        let c = CString::new(name).map_err(|_| Error::Invalid("kernel name with NUL".into()))?;
        // SAFETY: module is loaded; c is a valid C string.
        let func = match unsafe { cu::module::get_function(self.module, c) } {
            Ok(func) => {
                // Let every kernel use the device's opt-in shared memory when it asks for it.
                // SAFETY: func is a valid function of the loaded module.
                unsafe {
                    cu::function::set_function_attribute(
                        func,
                        sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                        self.max_smem as i32,
                    )
                }
                .map_err(drv)?;
                let (mut offset, mut size) = (0usize, 0usize);
                // SAFETY: func is a valid function; the out-pointers are live locals. A kernel
                // without parameters answers an error: size 0.
                let r = unsafe { sys::cuFuncGetParamInfo(func, 0, &mut offset, &mut size) };
                let param_bytes = if r == sys::CUresult::CUDA_SUCCESS {
                    size
                } else {
                    0
                };
                Some(Kernel {
                    func: func as usize,
                    param_bytes,
                })
            }
            Err(_) => None,
        };
        f.insert(name.to_string(), func);
        Ok(func)
    }
}

impl Drop for CudaBackend {
    fn drop(&mut self) {
        let graphs: Vec<u64> = lock(&self.graphs).drain().map(|(g, _)| g).collect();
        // SAFETY: the module was loaded by this backend and nothing uses it after drop; the
        // graph executables left are this backend's and are destroyed once, here.
        unsafe {
            let _ = cu::ctx::set_current(self.ctx);
            for g in graphs {
                let _ = cu::graph::exec_destroy(g as sys::CUgraphExec);
            }
            let _ = cu::module::unload(self.module);
        }
    }
}

impl GpuBackend for CudaBackend {
    fn name(&self) -> &'static str {
        "cuda"
    }
    fn device_name(&self) -> String {
        self.name.clone()
    }
    fn sm_count(&self) -> u32 {
        self.sms
    }
    fn alloc(&self, bytes: usize) -> Result<DevicePtr> {
        if bytes == 0 {
            return Err(Error::Invalid("allocation of 0 bytes".into()));
        }
        self.current()?;
        // SAFETY: a plain device allocation.
        match unsafe { cu::malloc_sync(bytes) } {
            Ok(p) => Ok(DevicePtr(p)),
            Err(e) if e.0 == sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY => {
                let free = cu::mem_get_info().map(|m| m.0).unwrap_or(0);
                Err(Error::OutOfMemory {
                    requested: bytes,
                    free,
                })
            }
            Err(e) => Err(drv(e)),
        }
    }
    fn free(&self, ptr: DevicePtr) -> Result<()> {
        self.current()?;
        // SAFETY: ptr came from alloc (the layer frees each allocation once).
        unsafe { cu::free_sync(ptr.0) }.map_err(drv)
    }
    fn bytes_from(&self, ptr: DevicePtr) -> Option<usize> {
        self.current().ok()?;
        let (mut base, mut size) = (0u64, 0usize);
        // SAFETY: out-pointers are valid; the driver validates ptr.
        let r = unsafe { sys::cuMemGetAddressRange_v2(&mut base, &mut size, ptr.0) };
        (r == sys::CUresult::CUDA_SUCCESS).then(|| size - (ptr.0 - base) as usize)
    }
    fn upload(&self, dst: DevicePtr, src: &[u8]) -> Result<()> {
        self.current()?;
        // SAFETY: the driver checks dst; src is a valid host slice.
        unsafe { cu::memcpy_htod_sync(dst.0, src) }.map_err(drv)
    }
    fn download(&self, dst: &mut [u8], src: DevicePtr) -> Result<()> {
        self.current()?;
        cu::ctx::synchronize().map_err(drv)?;
        // SAFETY: as upload.
        unsafe { cu::memcpy_dtoh_sync(dst, src.0) }.map_err(drv)
    }
    fn memset(&self, dst: DevicePtr, byte: u8, len: usize) -> Result<()> {
        self.current()?;
        // SAFETY: the driver checks the range.
        unsafe { cu::memset_d8_sync(dst.0, byte, len) }.map_err(drv)
    }
    fn copy_async(&self, dst: DevicePtr, src: DevicePtr, len: usize, stream: u64) -> Result<()> {
        self.current()?;
        // SAFETY: the driver checks both ranges; stream is the caller's.
        unsafe { cu::memcpy_dtod_async(dst.0, src.0, len, stream as sys::CUstream) }.map_err(drv)
    }
    fn mem_info(&self) -> Result<(usize, usize)> {
        self.current()?;
        cu::mem_get_info().map_err(drv)
    }
    fn has_kernel(&self, name: &str) -> bool {
        matches!(self.function(name), Ok(Some(_)))
    }
    fn resident_blocks(&self, kernel: &str, threads: u32, smem: u32) -> u32 {
        const FALLBACK: u32 = 4;
        let Ok(Some(Kernel { func, .. })) = self.function(kernel) else {
            return FALLBACK; // the launch itself reports the missing kernel
        };
        let key = (func, threads, smem);
        if let Some(&r) = lock(&self.resident).get(&key) {
            return r;
        }
        if self.current().is_err() {
            return FALLBACK;
        }
        // SAFETY: func is a function of the loaded module.
        let r = unsafe {
            cu::occupancy::max_active_block_per_multiprocessor(
                func as sys::CUfunction,
                threads as i32,
                smem as usize,
            )
        }
        .map(|r| r.max(1) as u32)
        .unwrap_or(FALLBACK);
        lock(&self.resident).insert(key, r);
        r
    }
    fn max_active_clusters(&self, kernel: &str, threads: u32, smem: u32, cluster: u32) -> u32 {
        let fallback = self.sms / cluster.max(1);
        let Ok(Some(Kernel { func, .. })) = self.function(kernel) else {
            return fallback; // the launch itself reports the missing kernel
        };
        // Cached beside the per-SM answers, the cluster size in the key's top bits.
        let key = (func, threads, smem | (cluster << 24));
        if let Some(&r) = lock(&self.resident).get(&key) {
            return r;
        }
        if self.current().is_err() {
            return fallback;
        }
        let config = sys::CUlaunchConfig {
            gridDimX: cluster.max(1) * self.sms.max(1),
            gridDimY: 1,
            gridDimZ: 1,
            blockDimX: threads,
            blockDimY: 1,
            blockDimZ: 1,
            sharedMemBytes: smem,
            hStream: std::ptr::null_mut(),
            attrs: std::ptr::null_mut(),
            numAttrs: 0,
        };
        let mut n = 0i32;
        // SAFETY: func is a function of the loaded module; config and n are live locals. The
        // kernel declares its cluster size, so the config names none.
        let r =
            unsafe { sys::cuOccupancyMaxActiveClusters(&mut n, func as sys::CUfunction, &config) };
        let n = if r == sys::CUresult::CUDA_SUCCESS {
            (n.max(0) as u32).min(fallback)
        } else {
            fallback
        };
        lock(&self.resident).insert(key, n);
        n
    }
    fn encode_tile_map(&self, spec: &TileMapSpec) -> Result<TileMap> {
        use sys::{
            CUtensorMapDataType as Ty, CUtensorMapFloatOOBfill as Fill,
            CUtensorMapInterleave as Il, CUtensorMapL2promotion as L2, CUtensorMapSwizzle as Sw,
        };
        spec.check()?;
        let mut map = sys::CUtensorMap { opaque: [0; 16] };
        let dims = [spec.cols as u64, spec.rows as u64];
        let strides = [spec.cols as u64 * 2];
        let boxes = [spec.box_cols, spec.box_rows];
        let steps = [1u32, 1];
        // SAFETY: the arrays have the rank's lengths (strides: rank − 1) and outlive the call;
        // `map` is the driver's type; no device memory is touched.
        let r = unsafe {
            sys::cuTensorMapEncodeTiled(
                &mut map,
                Ty::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
                2,
                spec.base.0 as *mut c_void,
                dims.as_ptr(),
                strides.as_ptr(),
                boxes.as_ptr(),
                steps.as_ptr(),
                Il::CU_TENSOR_MAP_INTERLEAVE_NONE,
                Sw::CU_TENSOR_MAP_SWIZZLE_128B,
                L2::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                Fill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
            )
        };
        if r != sys::CUresult::CUDA_SUCCESS {
            return Err(Error::Driver(format!(
                "cuTensorMapEncodeTiled({spec:?}): {r:?}"
            )));
        }
        Ok(TileMap(map.opaque))
    }
    fn launch(&self, l: &Launch, stream: u64) -> Result<()> {
        self.launch_with(l, stream, false)
    }
    fn launch_dependent(&self, l: &Launch, stream: u64) -> Result<()> {
        self.launch_with(l, stream, pdl_enabled())
    }
    fn synchronize(&self, stream: u64) -> Result<()> {
        self.current()?;
        // SAFETY: stream is the caller's handle.
        unsafe { cu::stream::synchronize(stream as sys::CUstream) }.map_err(drv)
    }
    fn launch_count(&self) -> u64 {
        self.launches.load(Ordering::Relaxed)
    }
    fn record_event(&self, stream: u64) -> Result<Event> {
        if lock(&self.capturing).contains_key(&stream) {
            return Err(Error::Invalid(format!(
                "record_event on stream {stream:#x}, which is being captured"
            )));
        }
        self.current()?;
        let e = cu::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT).map_err(drv)?;
        // SAFETY: e was just created; stream is the caller's.
        unsafe { cu::event::record(e, stream as sys::CUstream) }.map_err(drv)?;
        Ok(Event(e as u64))
    }
    fn elapsed_ms(&self, start: Event, end: Event) -> Result<f32> {
        self.current()?;
        let (a, b) = (start.0 as sys::CUevent, end.0 as sys::CUevent);
        // SAFETY: both events were recorded by record_event and are destroyed once, here.
        unsafe {
            let r = cu::event::synchronize(b).and_then(|_| cu::event::elapsed(a, b));
            let _ = cu::event::destroy(a);
            let _ = cu::event::destroy(b);
            r.map_err(drv)
        }
    }
    fn create_stream(&self) -> Result<u64> {
        self.current()?;
        let s = cu::stream::create(cu::stream::StreamKind::NonBlocking).map_err(drv)?;
        Ok(s as u64)
    }
    fn destroy_stream(&self, stream: u64) -> Result<()> {
        if stream == 0 {
            return Err(Error::Invalid(
                "destroy_stream: 0 is the legacy default stream".into(),
            ));
        }
        if lock(&self.capturing).contains_key(&stream) {
            return Err(Error::Invalid(format!(
                "destroy_stream: stream {stream:#x} is being captured (end the capture first)"
            )));
        }
        self.current()?;
        // SAFETY: stream is a handle from create_stream, destroyed once by its owner.
        unsafe { cu::stream::destroy(stream as sys::CUstream) }.map_err(drv)
    }
    fn begin_capture(&self, stream: u64) -> Result<()> {
        if stream == 0 {
            return Err(Error::Invalid(
                "begin_capture: the legacy default stream (0) cannot be captured; capture a stream made by create_stream".into(),
            ));
        }
        let mut capturing = lock(&self.capturing);
        if capturing.contains_key(&stream) {
            return Err(Error::Invalid(format!(
                "begin_capture: stream {stream:#x} is already being captured"
            )));
        }
        self.current()?;
        // SAFETY: stream is the caller's live stream; relaxed mode keeps other threads' and
        // this thread's driver calls legal while the capture is open.
        unsafe {
            cu::stream::begin_capture(
                stream as sys::CUstream,
                sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
            )
        }
        .map_err(|e| Error::Driver(format!("begin_capture: {e:?}")))?;
        capturing.insert(stream, 0);
        Ok(())
    }
    fn end_capture(&self, stream: u64) -> Result<GraphHandle> {
        let launches = lock(&self.capturing).remove(&stream).ok_or_else(|| {
            Error::Invalid(format!(
                "end_capture: stream {stream:#x} is not being captured"
            ))
        })?;
        self.current()?;
        // SAFETY: the stream is capturing (begin_capture succeeded on it); the graph it yields
        // is instantiated and then destroyed once (the executable does not need it).
        unsafe {
            let graph = cu::stream::end_capture(stream as sys::CUstream)
                .map_err(|e| Error::Driver(format!("end_capture: {e:?}")))?;
            let exec = cu::graph::instantiate(graph, sys::CUgraphInstantiate_flags(0));
            let _ = cu::graph::destroy(graph);
            let exec = exec.map_err(|e| Error::Driver(format!("instantiating a graph: {e:?}")))?;
            lock(&self.graphs).insert(exec as u64, launches);
            Ok(GraphHandle(exec as u64))
        }
    }
    fn launch_graph(&self, graph: &GraphHandle, stream: u64) -> Result<()> {
        let launches = *lock(&self.graphs).get(&graph.0).ok_or_else(|| {
            Error::Invalid(format!("launch_graph: {:#x} is not a live graph", graph.0))
        })?;
        self.current()?;
        // SAFETY: graph.0 is a live executable of this backend (checked above); stream is the
        // caller's.
        unsafe { cu::graph::launch(graph.0 as sys::CUgraphExec, stream as sys::CUstream) }
            .map_err(|e| Error::Driver(format!("launch_graph: {e:?}")))?;
        self.launches.fetch_add(launches, Ordering::Relaxed);
        Ok(())
    }
    fn destroy_graph(&self, graph: GraphHandle) -> Result<()> {
        if lock(&self.graphs).remove(&graph.0).is_none() {
            return Err(Error::Invalid(format!(
                "destroy_graph: {:#x} is not a live graph",
                graph.0
            )));
        }
        self.current()?;
        // SAFETY: graph.0 was a live executable of this backend, removed from the table above,
        // so it is destroyed once.
        unsafe { cu::graph::exec_destroy(graph.0 as sys::CUgraphExec) }.map_err(drv)
    }
}

/// Whether [`GpuBackend::launch_dependent`] uses programmatic dependent launch: yes unless
/// `DENSEFFN_PDL=0` (read once per process; a switch for measuring what it gains).
fn pdl_enabled() -> bool {
    static V: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *V.get_or_init(|| std::env::var("DENSEFFN_PDL").map_or(true, |v| v != "0"))
}

impl CudaBackend {
    /// Launches `l` on `stream`; `dependent`: with the programmatic-stream-serialization
    /// attribute (`cuLaunchKernelEx`), falling back to an ordinary launch where the driver
    /// refuses it.
    fn launch_with(&self, l: &Launch, stream: u64, dependent: bool) -> Result<()> {
        let k = self
            .function(l.kernel)?
            .ok_or_else(|| Error::MissingKernel(l.kernel.into()))?;
        if l.params.len() != k.param_bytes {
            return Err(Error::Invalid(format!(
                "{}: a {}-byte parameter block for a kernel that declares {} bytes",
                l.kernel,
                l.params.len(),
                k.param_bytes
            )));
        }
        let func = k.func as sys::CUfunction;
        if l.smem > self.max_smem {
            return Err(Error::Invalid(format!(
                "{}: {} bytes of shared memory, device allows {}",
                l.kernel, l.smem, self.max_smem
            )));
        }
        self.current()?;
        // The kernel's one parameter (the block in l.params) by pointer, not as a raw
        // parameter buffer: the driver copies it to the offset the kernel declares, which is
        // not 0 where the block is aligned beyond the parameter space's base (the BF16 GEMMs'
        // `.align 128` for their TMA map; a `CU_LAUNCH_PARAM_BUFFER_POINTER` buffer would land
        // at offset 0 and the kernel would read past it).
        let mut args = [l.params.as_ptr() as *mut c_void];
        let mut r = sys::CUresult::CUDA_ERROR_NOT_SUPPORTED;
        if dependent {
            // SAFETY: a zeroed attribute value is valid (a C union of plain data).
            let mut value: sys::CUlaunchAttributeValue = unsafe { std::mem::zeroed() };
            value.programmaticStreamSerializationAllowed = 1;
            let mut attr = sys::CUlaunchAttribute {
                id: sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
                pad: [0; 4],
                value,
            };
            let config = sys::CUlaunchConfig {
                gridDimX: l.grid.0,
                gridDimY: l.grid.1,
                gridDimZ: l.grid.2,
                blockDimX: l.block.0,
                blockDimY: l.block.1,
                blockDimZ: l.block.2,
                sharedMemBytes: l.smem,
                hStream: stream as sys::CUstream,
                attrs: &mut attr,
                numAttrs: 1,
            };
            // SAFETY: as the ordinary launch below; `config` and `attr` outlive the call.
            r = unsafe {
                sys::cuLaunchKernelEx(&config, func, args.as_mut_ptr(), std::ptr::null_mut())
            };
        }
        if r != sys::CUresult::CUDA_SUCCESS {
            // SAFETY: func is a kernel of the loaded module whose single parameter is the block
            // in l.params (built from the same struct the kernel declares, as long as its
            // declaration); `args` and the block outlive the call.
            r = unsafe {
                sys::cuLaunchKernel(
                    func,
                    l.grid.0,
                    l.grid.1,
                    l.grid.2,
                    l.block.0,
                    l.block.1,
                    l.block.2,
                    l.smem,
                    stream as sys::CUstream,
                    args.as_mut_ptr(),
                    std::ptr::null_mut(),
                )
            };
        }
        if r != sys::CUresult::CUDA_SUCCESS {
            return Err(Error::Driver(format!("launching {}: {r:?}", l.kernel)));
        }
        match lock(&self.capturing).get_mut(&stream) {
            Some(n) => *n += 1,
            None => {
                self.launches.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::entry_points;

    #[test]
    fn entry_points_are_every_declared_kernel_of_the_module() {
        let names: Vec<&str> = entry_points(crate::PTX).collect();
        let declared = crate::PTX.matches(".entry ").count();
        assert_eq!(names.len(), declared);
        assert!(names.contains(&"bf16_gemm") && names.contains(&"gemv_nvfp4_gate_up"));
        assert!(names
            .iter()
            .all(|n| n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')));
        let text = ".visible .entry a_b(\n\t.param .u64 p\n)\n.entry c\t(\n";
        assert_eq!(entry_points(text).collect::<Vec<_>>(), ["a_b", "c"]);
    }
}
