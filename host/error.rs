//! The library's one error type. User input never panics the library: it gets one of these.
use thiserror::Error;

/// Everything that can go wrong, with enough context to act on.
#[derive(Debug, Error)]
pub enum Error {
    /// A shape the layer or format cannot take (names the tensor and the rule).
    #[error("bad shape: {0}")]
    Shape(String),
    /// A buffer or argument of the wrong size or value.
    #[error("invalid argument: {0}")]
    Invalid(String),
    /// The loaded module lacks a kernel this path needs.
    #[error("kernel `{0}` is not in the loaded module")]
    MissingKernel(String),
    /// The path exists in the API but not for this layer's state.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// An allocation did not fit.
    #[error("out of device memory: {requested} bytes requested, {free} free")]
    OutOfMemory { requested: usize, free: usize },
    /// A weight value the format forbids (NaN/Inf/negative scale, …).
    #[error("bad weights: {0}")]
    BadWeights(String),
    /// No usable GPU or driver (the CUDA backend cannot start).
    #[error("no CUDA device: {0}")]
    NoDevice(String),
    /// The CUDA driver reported an error.
    #[error("CUDA driver: {0}")]
    Driver(String),
    /// An access outside any allocation (CPU backend) or a bad device pointer.
    #[error("bad device access: {0}")]
    BadAccess(String),
    /// A checkpoint that cannot be read: a missing or unreadable file, a truncated file or a
    /// corrupt header, a bad shard index, a missing tensor or one of the wrong dtype (names the
    /// file or tensor).
    #[error("cannot load weights: {0}")]
    Load(String),
}

/// `Result` with [`Error`](enum@Error).
pub type Result<T> = std::result::Result<T, Error>;
