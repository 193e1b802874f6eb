//! GPU-event timing (wall time on the CPU backend, whose events are host clocks).
use crate::backend::GpuBackend;
use crate::buffer::DeviceBuffer;
use crate::Result;
use std::sync::Arc;

/// Microseconds per call of `f`, from events recorded on `stream` around `iters` (≥ 1)
/// back-to-back calls.
pub fn time_us(
    gpu: &dyn GpuBackend,
    stream: u64,
    iters: u64,
    mut f: impl FnMut() -> Result<()>,
) -> Result<f64> {
    let iters = iters.max(1);
    let a = gpu.record_event(stream)?;
    for _ in 0..iters {
        f()?;
    }
    let b = gpu.record_event(stream)?;
    Ok(gpu.elapsed_ms(a, b)? as f64 * 1e3 / iters as f64)
}

/// The median over `reps` (≥ 1) timings of `iters` calls each, µs per call.
pub fn median_us(
    gpu: &dyn GpuBackend,
    stream: u64,
    reps: usize,
    iters: u64,
    mut f: impl FnMut() -> Result<()>,
) -> Result<f64> {
    let mut v = (0..reps.max(1))
        .map(|_| time_us(gpu, stream, iters, &mut f))
        .collect::<Result<Vec<f64>>>()?;
    v.sort_by(f64::total_cmp);
    Ok(v[v.len() / 2])
}

/// Device-to-device copy bandwidth in GB/s (read + write counted) over a `bytes` buffer, the
/// ceiling decode figures are divided by.
pub fn copy_gbs(gpu: &Arc<dyn GpuBackend>, bytes: usize, reps: usize, iters: u64) -> Result<f64> {
    let (src, dst) = (
        DeviceBuffer::zeroed(gpu, bytes)?,
        DeviceBuffer::zeroed(gpu, bytes)?,
    );
    let us = median_us(&**gpu, 0, reps, iters, || {
        gpu.copy_async(dst.ptr(), src.ptr(), bytes, 0)
    })?;
    Ok(2.0 * bytes as f64 / us / 1e3)
}
