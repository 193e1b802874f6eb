//! Real weights from checkpoints on disk.
//!
//! - [`safetensors`](mod@self::safetensors): NVIDIA ModelOpt NVFP4 FFN weights from a
//!   safetensors checkpoint, one file or sharded with a `model.safetensors.index.json`
//!   ([`load_nvfp4_layer`]), and a listing of the FFN tensors a checkpoint holds ([`inspect`]).
pub mod gguf;
pub mod safetensors;

pub use self::safetensors::{
    inspect, load_bf16_layer, load_fp8_layer, load_nvfp4_layer, FfnTensorInfo,
};
