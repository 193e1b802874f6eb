//! Real weights from checkpoints on disk.
//!
//! - [`safetensors`](mod@self::safetensors): NVIDIA ModelOpt NVFP4 FFN weights from a
//!   safetensors checkpoint, one file or sharded with a `model.safetensors.index.json`
//!   ([`load_nvfp4_layer`]), FP8 block-scaled ([`load_fp8_layer`]) and BF16
//!   ([`load_bf16_layer`]) ones, and a listing of the FFN tensors a checkpoint holds
//!   ([`inspect`]).
//! - [`gguf`]: `blk.N.ffn_{gate,up,down}.weight` in Q4_K, Q2_0, NVFP4, BF16, F16, F32.
//! - [`load_ffn`]: either, into the weight set the layer runs ([`HostFfn`]).
mod ffn;
pub mod gguf;
pub mod safetensors;

pub use ffn::{is_gguf, load_ffn, HostFfn};

pub use self::safetensors::{
    inspect, load_bf16_layer, load_fp8_layer, load_nvfp4_layer, FfnTensorInfo,
};
