//! Builds the device crate to PTX (pinned nightly, nvptx64, -Zbuild-std=core, llvm-link/opt/llc)
//! and hands its path to the host library, which embeds it with `include_str!`.
fn main() {
    let ptx = denseffn_ptx_builder::PtxBuilder::new("device")
        .toolchain("nightly-2026-05-20")
        .arch("sm_90a")
        .ptx_isa("80")
        .dynamic_shared("dsmem")
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    println!("cargo:rustc-env=DENSEFFN_PTX={}", ptx.display());
}
