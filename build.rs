//! Builds the device crate to PTX (pinned nightly, nvptx64, -Zbuild-std=core, llvm-link/opt/llc)
//! and hands its path to the host library, which embeds it with `include_str!`.
fn main() {
    let mut ptx = denseffn_ptx_builder::PtxBuilder::new("device")
        .toolchain("nightly-2026-05-20")
        .arch("sm_90a")
        .ptx_isa("80")
        .dynamic_shared("dsmem")
        // 64 registers instead of 72: four 256-thread blocks per SM instead of three (no
        // spills; the other GEMVs are at ≤ 64 already or are dual kernels).
        .launch_bounds("bf16_gemv", 256, 4);
    for k in [
        "bf16_gemm_gate_up_act",
        "bf16_gemm_gate_up_act_splitk",
        "bf16_gemm",
        "bf16_gemm_splitk",
        "w8a8_gemm_gate_up_act",
        "w8a8_gemm",
        "w8a16_gemm_gate_up_act",
        "w8a16_gemm",
    ] {
        // The persistent BF16, FP8 × FP8 and FP8 × bf16 GEMMs: one 384-thread block per SM,
        // so at most 168 registers (without the bound ptxas gave the tail-split gate+up kernel
        // 230, which cannot launch); their parameter block starts with the activations' TMA
        // tensor map (`GemmParams::xmap`), which must be 128-byte aligned (CUDA 13's
        // `CUtensorMap`). Their `_x2` forms run in clusters of two blocks
        // (`GemmShape::cluster`).
        let x2 = format!("{k}_x2");
        ptx = ptx
            .launch_bounds(k, 384, 1)
            .param_align(k, 128)
            .launch_bounds(&x2, 384, 1)
            .param_align(&x2, 128)
            .cluster_dims(&x2, 2);
    }
    let ptx = ptx.build().unwrap_or_else(|e| panic!("{e}"));
    println!("cargo:rustc-env=DENSEFFN_PTX={}", ptx.display());
}
