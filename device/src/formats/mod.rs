//! Weight formats: one module per format, each with its block layout, a scalar decode, and the
//! constants kernels need. Bit-exact with the references users hold (see each module).
pub mod e2m1;
pub mod e4m3;
pub mod nvfp4;
pub mod nvfp4_mmq;
pub mod packed;
pub mod q2_0;
pub mod q4k;
pub mod q4k_mmq;
pub mod tiles;
