//! Arbitrary bytes as a safetensors file: inspecting and loading must return Ok or an Error,
//! never panic.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let path = std::env::temp_dir().join(format!("denseffn-fuzz-{}.safetensors", std::process::id()));
    if std::fs::write(&path, data).is_ok() {
        let _ = denseffn::load::inspect(&path);
        let _ = denseffn::load::load_nvfp4_layer(&path, 0);
    }
});
