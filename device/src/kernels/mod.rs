//! The kernels, one file per operation family. Each family is one generic body; the
//! `#[no_mangle] extern "ptx-kernel"` entry points (named op_format_variant) instantiate it.
pub mod elementwise;
pub mod gemm_nvfp4;
pub mod gemv_nvfp4;
