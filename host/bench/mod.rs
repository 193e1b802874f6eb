//! What `denseffn bench` and the criterion benches share: GPU-event timing, synthetic layers and
//! overlay weights, the weight formats measured, the copy-bandwidth anchor, the ggml anchor
//! figures, and (feature `cublas`) the cuBLAS bf16 FFN anchor.
pub mod anchors;
#[cfg(feature = "cublas")]
pub mod cublas;
pub mod formats;
pub mod synth;
pub mod timing;
