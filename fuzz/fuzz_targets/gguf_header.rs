//! Arbitrary bytes as a GGUF file: inspecting and loading must return Ok or an Error, never panic.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let path = std::env::temp_dir().join(format!("denseffn-fuzz-{}.gguf", std::process::id()));
    if std::fs::write(&path, data).is_ok() {
        let _ = denseffn::load::gguf::inspect_gguf(&path);
        let _ = denseffn::load::gguf::load_ffn_gguf(&path, 0);
    }
});
