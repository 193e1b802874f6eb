//! Owned streams and captured graphs over [`GpuBackend`]'s raw stream and graph methods, freed
//! on drop.
//!
//! ```no_run
//! use denseffn::backend::{CpuBackend, GpuBackend, Graph, Stream};
//! use std::sync::Arc;
//! let gpu: Arc<dyn GpuBackend> = Arc::new(CpuBackend::new());
//! let stream = Stream::new(&gpu)?;
//! // Record whatever the closure enqueues on the stream (here: nothing) ...
//! let (graph, ()) = Graph::capture(&gpu, stream.raw(), || Ok(()))?;
//! // ... and replay it as often as needed.
//! graph.launch(stream.raw())?;
//! # Ok::<(), denseffn::Error>(())
//! ```
use super::{GpuBackend, GraphHandle};
use crate::error::Result;
use std::sync::Arc;

/// A stream made by [`GpuBackend::create_stream`], destroyed on drop.
pub struct Stream {
    gpu: Arc<dyn GpuBackend>,
    raw: u64,
}

impl Stream {
    /// Creates a stream on `gpu`.
    pub fn new(gpu: &Arc<dyn GpuBackend>) -> Result<Self> {
        Ok(Stream {
            gpu: gpu.clone(),
            raw: gpu.create_stream()?,
        })
    }

    /// The raw handle, as the layer's `stream` arguments take it.
    pub fn raw(&self) -> u64 {
        self.raw
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        let r = self
            .gpu
            .synchronize(self.raw)
            .and_then(|_| self.gpu.destroy_stream(self.raw));
        if let Err(e) = r {
            tracing::warn!("destroying stream {:#x}: {e}", self.raw);
        }
    }
}

/// A captured graph, destroyed on drop.
pub struct Graph {
    gpu: Arc<dyn GpuBackend>,
    handle: GraphHandle,
}

impl Graph {
    /// Captures what `record` enqueues on `stream` (a created stream, not 0) into a graph.
    /// The capture is ended whether `record` succeeds or not, so the stream stays usable; an
    /// error of `record` is returned in preference to one of ending the capture.
    pub fn capture<T>(
        gpu: &Arc<dyn GpuBackend>,
        stream: u64,
        record: impl FnOnce() -> Result<T>,
    ) -> Result<(Graph, T)> {
        gpu.begin_capture(stream)?;
        let out = record();
        let ended = gpu.end_capture(stream);
        let value = out?;
        let graph = Graph {
            gpu: gpu.clone(),
            handle: ended?,
        };
        Ok((graph, value))
    }

    /// Enqueues the graph on `stream` (any stream, also 0).
    pub fn launch(&self, stream: u64) -> Result<()> {
        self.gpu.launch_graph(&self.handle, stream)
    }
}

impl Drop for Graph {
    fn drop(&mut self) {
        // The handle is not used after this: hand the backend its id once.
        if let Err(e) = self.gpu.destroy_graph(GraphHandle(self.handle.0)) {
            tracing::warn!("destroying a graph: {e}");
        }
    }
}
