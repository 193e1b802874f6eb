//! Builds the device crate to PTX (pinned nightly, nvptx64, -Zbuild-std=core, llvm-link/opt/llc)
//! and hands its path to the host library, which embeds it with `include_str!`.
fn main() {
    let ptx = denseffn_ptx_builder::PtxBuilder::new("device")
        .toolchain("nightly-2026-05-20")
        .arch("sm_90a")
        .ptx_isa("80")
        .dynamic_shared("dsmem")
        // 64 registers instead of 72: four 256-thread blocks per SM instead of three (no
        // spills; the other GEMVs are at ≤ 64 already or are dual kernels).
        .launch_bounds("bf16_gemv", 256, 4)
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    println!("cargo:rustc-env=DENSEFFN_PTX={}", ptx.display());
}
