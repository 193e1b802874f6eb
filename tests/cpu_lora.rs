//! The LoRA FFN overlay on the CPU reference backend: every path it claims against the f64
//! reference of the merged weights (`W + (alpha/rank)·B·A`), launch counts, `clear_lora`, every
//! rejection (overlays either way round, placeholder weights, ranks, shapes, values), and failed
//! installs leaving the layer exactly as it was.
mod common;
use common::*;
use denseffn::backend::{CpuBackend, GpuBackend};
use denseffn::layer::{
    kernels, DenseFfnLayer, DenseFfnWeights, DenseWeight, FfnActivation, ForwardContext,
    LoraFfnWeights, OverlayKind, MAX_LORA_RANK,
};
use denseffn::reference::rel_l2;
use denseffn::Error;
use half::bf16;
use std::sync::Arc;

/// Not multiples of 512 (the shrink's step) nor of 128.
const H: usize = 192;
const I: usize = 320;

fn cpu() -> Arc<dyn GpuBackend> {
    Arc::new(CpuBackend::new())
}

/// Every path LoRA claims, with its token count.
fn paths() -> Vec<(&'static str, usize)> {
    let mut v = vec![("forward", 1), ("batched", 3), ("k2", 2), ("k3", 3)];
    v.extend((1..=8).map(|m| ("km", m)));
    v.extend([1, 7, 64].map(|n| ("prefill", n)));
    v
}

/// Launches of `path` on an NVFP4 layer, without and with LoRA.
fn launches(path: &str, m: usize, act: FfnActivation, lora: bool) -> u64 {
    let decode = if act == FfnActivation::Silu { 2 } else { 3 };
    let plain = match path {
        "forward" => decode,
        "batched" => decode,
        "k2" | "k3" => 3,
        "km" => 4,
        "prefill" => 2,
        other => panic!("{other}"),
    };
    let per_call = plain + if lora { 2 } else { 0 };
    if path == "batched" {
        per_call * m as u64
    } else {
        per_call
    }
}

#[test]
fn every_path_with_lora_matches_the_merged_f64_reference() {
    // Rank 5 pads to 16 (zero rows of A, zero columns of B), 16 is exact, 40 pads to 48.
    for (h, i, rank) in [(H, I, 5), (256, 512, 16), (H, I, 40)] {
        let host = HostLayer::random(h, i, 3);
        let lora = lora_weights(h, i, rank, 4);
        let x = activations(64 * h, 5);
        for act in [FfnActivation::Silu, FfnActivation::Gelu] {
            let gpu = cpu();
            let mut layer = host.layer(&gpu, act);
            layer.set_lora_weights(lora.clone()).unwrap();
            assert_eq!(layer.lora_rank(), Some(rank));
            let mut ctx = ForwardContext::new(&layer, 64).unwrap();
            let want = host.lora_reference(&lora, &x, act);
            let plain = host.reference(&x, act);
            // The deltas matter: without them the result is far off.
            assert!(
                rel_l2(&plain, &want) > 0.05,
                "({h}, {i}) r={rank}: LoRA too small"
            );
            for (path, m) in paths() {
                let before = gpu.launch_count();
                let got = path_output(&layer, &gpu, path, m, &x, &mut ctx).unwrap();
                assert_eq!(
                    gpu.launch_count() - before,
                    launches(path, m, act, true),
                    "({h}, {i}) r={rank} {act:?} {path} m={m}"
                );
                let e = rel_l2(&got, &want[..m * h]);
                assert!(
                    e <= 1e-2,
                    "({h}, {i}) r={rank} {act:?} {path} m={m}: rel L2 {e}"
                );
            }
            // The kernel lists say the same, shrink first and before the down GEMV.
            let shrink = kernels::LORA_SHRINK;
            let d = layer.decode_kernels();
            assert_eq!(d.len() as u64, launches("forward", 1, act, true));
            assert_eq!((d[0], d[d.len() - 2]), (shrink, shrink));
            assert_eq!(layer.verify_kernels(2)[3], shrink);
            assert_eq!(layer.km_kernels(5)[4], shrink);
            let p = layer.prefill_kernels(64);
            let [gu, down] = kernels::LORA_GEMMS;
            assert_eq!(p, [shrink, gu, shrink, down]);
        }
    }
}

#[test]
fn the_largest_rank_works_and_ranks_outside_1_to_256_are_refused() {
    let (h, i) = (128, 256);
    let host = HostLayer::random(h, i, 6);
    let gpu = cpu();
    let mut layer = host.layer(&gpu, FfnActivation::Silu);
    for rank in [0, MAX_LORA_RANK + 1] {
        let mut w = lora_weights(h, i, 1, 7);
        w.rank = rank;
        let e = layer.set_lora_weights(w).unwrap_err();
        assert!(
            matches!(e, Error::Shape(_)) && e.to_string().contains("rank"),
            "{e}"
        );
    }
    let lora = lora_weights(h, i, MAX_LORA_RANK, 8);
    layer.set_lora_weights(lora.clone()).unwrap();
    let mut ctx = ForwardContext::new(&layer, 9).unwrap();
    let x = activations(9 * h, 9);
    let want = host.lora_reference(&lora, &x, FfnActivation::Silu);
    for (path, m) in [("forward", 1), ("km", 8), ("prefill", 9)] {
        let got = path_output(&layer, &gpu, path, m, &x, &mut ctx).unwrap();
        let e = rel_l2(&got, &want[..m * h]);
        assert!(e <= 1e-2, "rank 256 {path}: {e}");
    }
    let pad = MAX_LORA_RANK;
    assert_eq!(layer.footprint().lora, 6 * pad * (h + i));
}

/// Every path's output, on a fresh context.
fn outputs(layer: &DenseFfnLayer, gpu: &Arc<dyn GpuBackend>, x: &[f32]) -> Vec<Vec<f64>> {
    let mut ctx = ForwardContext::new(layer, 64).unwrap();
    paths()
        .into_iter()
        .map(|(path, m)| path_output(layer, gpu, path, m, x, &mut ctx).unwrap())
        .collect()
}

#[test]
fn clear_lora_restores_the_exact_plain_outputs_and_launch_counts() {
    let host = HostLayer::random(H, I, 10);
    let x = activations(64 * H, 11);
    for act in [FfnActivation::Silu, FfnActivation::Gelu] {
        let cpu = Arc::new(CpuBackend::new());
        let gpu: Arc<dyn GpuBackend> = cpu.clone();
        let mut layer = host.layer(&gpu, act);
        let plain = outputs(&layer, &gpu, &x);
        let (foot, used) = (layer.footprint(), cpu.used_bytes());
        layer.set_lora_weights(lora_weights(H, I, 8, 12)).unwrap();
        assert_eq!(layer.footprint().lora, 6 * 16 * (H + I));
        assert_eq!(cpu.used_bytes(), used + layer.footprint().lora);
        let with = outputs(&layer, &gpu, &x);
        for (p, (a, b)) in plain.iter().zip(&with).enumerate() {
            assert!(rel_l2(b, a) > 0.05, "{act:?} path {p}: LoRA had no effect");
        }
        layer.clear_lora();
        assert_eq!(layer.lora_rank(), None);
        assert_eq!((layer.footprint(), cpu.used_bytes()), (foot, used));
        assert_eq!(outputs(&layer, &gpu, &x), plain, "{act:?}");
        for (path, m) in paths() {
            let mut ctx = ForwardContext::new(&layer, 64).unwrap();
            let before = gpu.launch_count();
            path_output(&layer, &gpu, path, m, &x, &mut ctx).unwrap();
            assert_eq!(gpu.launch_count() - before, launches(path, m, act, false));
        }
        assert!(!layer.decode_kernels().contains(&kernels::LORA_SHRINK));
    }
}

const OVERLAYS: [OverlayKind; 4] = [
    OverlayKind::Q2,
    OverlayKind::Q4k,
    OverlayKind::Fp8,
    OverlayKind::Bf16,
];

/// LoRA and overlays exclude each other, whichever comes first; the refused call changes
/// nothing.
#[test]
fn lora_and_overlays_refuse_each_other_in_either_order() {
    let (h, i) = (256, 512); // Q4_K rows are whole 256-value super-blocks
    let host = HostLayer::random(h, i, 13);
    let lora = lora_weights(h, i, 16, 14);
    let x = activations(64 * h, 15);
    for kind in OVERLAYS {
        let o = OverlayHost::random(kind, h, i, 16);
        // Overlay first: LoRA is refused, naming the overlay.
        let gpu = cpu();
        let mut layer = host.layer(&gpu, FfnActivation::Silu);
        o.install(&mut layer).unwrap();
        let foot = layer.footprint();
        let want = outputs(&layer, &gpu, &x);
        let e = layer.set_lora_weights(lora.clone()).unwrap_err();
        assert!(
            matches!(e, Error::Unsupported(_)) && e.to_string().contains(kind.name()),
            "{kind:?}: {e}"
        );
        assert_eq!(layer.lora_rank(), None);
        assert_eq!(layer.footprint(), foot);
        assert_eq!(outputs(&layer, &gpu, &x), want);
        // LoRA first: the overlay is refused, naming LoRA.
        let gpu = cpu();
        let mut layer = host.layer(&gpu, FfnActivation::Silu);
        layer.set_lora_weights(lora.clone()).unwrap();
        let foot = layer.footprint();
        let want = outputs(&layer, &gpu, &x);
        let e = o.install(&mut layer).unwrap_err();
        assert!(
            matches!(e, Error::Unsupported(_)) && e.to_string().contains("LoRA"),
            "{kind:?}: {e}"
        );
        assert_eq!(layer.active_overlay(), None);
        assert!(!layer.has_overlay(kind));
        assert_eq!(layer.footprint(), foot);
        assert_eq!(outputs(&layer, &gpu, &x), want);
        // After clear_lora the overlay installs.
        layer.clear_lora();
        o.install(&mut layer).unwrap();
        assert_eq!(layer.active_overlay(), Some(kind));
    }
}

#[test]
fn placeholder_layers_refuse_lora() {
    let gpu = cpu();
    let w = DenseFfnWeights::placeholder(&gpu, H, I).unwrap();
    let mut layer = DenseFfnLayer::new(w, gpu.clone()).unwrap();
    let e = layer
        .set_lora_weights(lora_weights(H, I, 16, 17))
        .unwrap_err();
    assert!(
        matches!(e, Error::Unsupported(_)) && e.to_string().contains("placeholder"),
        "{e}"
    );
    assert_eq!((layer.lora_rank(), layer.footprint().lora), (None, 0));
}

/// Each bad input is its own clear error and leaves an installed LoRA in place and working.
#[test]
fn bad_lora_inputs_are_clear_errors_and_change_nothing() {
    let host = HostLayer::random(H, I, 18);
    let gpu = cpu();
    let mut layer = host.layer(&gpu, FfnActivation::Gelu);
    let good = lora_weights(H, I, 8, 19);
    layer.set_lora_weights(good.clone()).unwrap();
    let x = activations(64 * H, 20);
    let want = outputs(&layer, &gpu, &x);
    let foot = layer.footprint();
    type Edit = fn(&mut LoraFfnWeights);
    let cases: &[(&str, Edit, &str)] = &[
        ("A rows", |w| w.gate.a.rows += 1, "gate A"),
        ("A cols", |w| w.up.a.cols = H + 64, "up A"),
        ("B rows", |w| w.down.b.rows = I, "down B"),
        ("B cols", |w| w.gate.b.cols += 1, "gate B"),
        ("short data", |w| w.up.b.data.truncate(5), "up B"),
        (
            "swapped",
            |w| std::mem::swap(&mut w.gate, &mut w.down),
            "gate A",
        ),
        ("NaN in A", |w| w.down.a.data[5] = bf16::NAN, "down A"),
        ("Inf in B", |w| w.gate.b.data[3] = bf16::INFINITY, "gate B"),
        ("-Inf in B", |w| w.up.b.data[0] = bf16::NEG_INFINITY, "up B"),
        ("NaN alpha", |w| w.alpha = f32::NAN, "alpha"),
        ("Inf alpha", |w| w.alpha = f32::INFINITY, "alpha"),
    ];
    for (what, edit, names) in cases {
        let mut w = good.clone();
        edit(&mut w);
        let e = layer.set_lora_weights(w).unwrap_err();
        let kind_ok = match *what {
            w if w.contains("NaN") || w.contains("Inf") => matches!(e, Error::BadWeights(_)),
            _ => matches!(e, Error::Shape(_)),
        };
        assert!(kind_ok && e.to_string().contains(names), "{what}: {e}");
        assert_eq!(layer.footprint(), foot, "{what}");
        assert_eq!(layer.lora_rank(), Some(8));
    }
    assert_eq!(outputs(&layer, &gpu, &x), want);
}

/// A DenseWeight of the right shape with every value `v`: zero alpha or zero matrices are legal
/// and give the plain result.
#[test]
fn zero_deltas_give_the_plain_result() {
    let host = HostLayer::random(H, I, 21);
    let gpu = cpu();
    let mut layer = host.layer(&gpu, FfnActivation::Silu);
    let x = activations(64 * H, 22);
    let plain = outputs(&layer, &gpu, &x);
    let mut w = lora_weights(H, I, 4, 23);
    w.alpha = 0.0;
    layer.set_lora_weights(w).unwrap();
    assert_eq!(outputs(&layer, &gpu, &x), plain);
    let mut w = lora_weights(H, I, 4, 24);
    let zeros = |rows: usize, cols: usize| DenseWeight {
        rows,
        cols,
        data: vec![bf16::ZERO; rows * cols],
    };
    w.gate.b = zeros(I, 4);
    w.up.a = zeros(4, H);
    w.down.b = zeros(H, 4);
    layer.set_lora_weights(w).unwrap();
    assert_eq!(outputs(&layer, &gpu, &x), plain);
}

/// Without `lora_shrink` in the module every path of a LoRA layer names it and launches
/// nothing; the same layer without LoRA runs.
#[test]
fn a_missing_lora_kernel_is_named_and_nothing_launches() {
    let gpu: Arc<dyn GpuBackend> =
        Arc::new(CpuBackend::new().without_kernels(&[kernels::LORA_SHRINK]));
    let mut layer = HostLayer::random(H, I, 25).layer(&gpu, FfnActivation::Silu);
    layer.set_lora_weights(lora_weights(H, I, 16, 26)).unwrap();
    let mut ctx = ForwardContext::new(&layer, 64).unwrap();
    let x = activations(64 * H, 27);
    for (path, m) in paths() {
        let before = gpu.launch_count();
        match path_output(&layer, &gpu, path, m, &x, &mut ctx) {
            Err(Error::MissingKernel(k)) => assert_eq!(k, kernels::LORA_SHRINK, "{path}"),
            other => panic!("{path}: {other:?}"),
        }
        assert_eq!(gpu.launch_count(), before, "{path} launched before failing");
    }
    assert!(!(1..=8).any(|m| layer.can_forward_km(m)));
    layer.clear_lora();
    for (path, m) in paths() {
        path_output(&layer, &gpu, path, m, &x, &mut ctx).unwrap();
    }
}

/// A context made before `set_lora_weights` serves every path of up to 8 tokens; a longer
/// prefill asks for a new context (nothing launched), which then works.
#[test]
fn contexts_made_before_lora_serve_decode_and_ask_to_be_remade_for_long_prefill() {
    let host = HostLayer::random(H, I, 28);
    let gpu = cpu();
    let mut layer = host.layer(&gpu, FfnActivation::Silu);
    let mut old = ForwardContext::new(&layer, 64).unwrap();
    let lora = lora_weights(H, I, 64, 29);
    layer.set_lora_weights(lora.clone()).unwrap();
    let x = activations(64 * H, 30);
    let want = host.lora_reference(&lora, &x, FfnActivation::Silu);
    for (path, m) in [("forward", 1), ("k3", 3), ("km", 8), ("prefill", 8)] {
        let got = path_output(&layer, &gpu, path, m, &x, &mut old).unwrap();
        assert!(rel_l2(&got, &want[..m * H]) <= 1e-2, "{path}");
    }
    let before = gpu.launch_count();
    let e = path_output(&layer, &gpu, "prefill", 64, &x, &mut old).unwrap_err();
    assert!(
        matches!(e, Error::Invalid(_)) && e.to_string().contains("new ForwardContext"),
        "{e}"
    );
    assert_eq!(gpu.launch_count(), before);
    let mut ctx = ForwardContext::new(&layer, 64).unwrap();
    let got = path_output(&layer, &gpu, "prefill", 64, &x, &mut ctx).unwrap();
    assert!(rel_l2(&got, &want) <= 1e-2);
}

/// Each row of a LoRA batch equals `forward` of that row (the deltas are per token).
#[test]
fn lora_batch_rows_equal_single_token_forward() {
    let host = HostLayer::random(H, I, 31);
    let gpu = cpu();
    let mut layer = host.layer(&gpu, FfnActivation::Silu);
    layer.set_lora_weights(lora_weights(H, I, 16, 32)).unwrap();
    let mut ctx = ForwardContext::new(&layer, 8).unwrap();
    let x = activations(8 * H, 33);
    let batch = path_output(&layer, &gpu, "km", 8, &x, &mut ctx).unwrap();
    for t in 0..8 {
        let one = path_output(&layer, &gpu, "forward", 1, &x[t * H..], &mut ctx).unwrap();
        let e = rel_l2(&batch[t * H..(t + 1) * H], &one);
        assert!(e < 5e-3, "row {t}: {e}");
    }
}

/// The `q4k_mmq` prefill arm does not apply LoRA deltas: with the arm enabled, LoRA still runs
/// on `nvfp4_t_m128`; `finalize_q4k_load` is refused while LoRA is installed (the layer and its
/// results unchanged), and LoRA is refused once the layer was finalized.
#[test]
fn lora_and_the_q4k_mmq_finalize_refuse_each_other() {
    use denseffn::layer::{PrefillArm, PrefillConfig};
    let (h, i) = (256, 512); // Q4_K super-blocks
    let host = HostLayer::random(h, i, 34);
    let lora = lora_weights(h, i, 16, 35);
    let x = activations(64 * h, 36);
    let cpu = Arc::new(CpuBackend::new());
    let gpu: Arc<dyn GpuBackend> = cpu.clone();
    let mut layer = host.layer(&gpu, FfnActivation::Silu);
    layer.set_prefill_config(PrefillConfig {
        q4k_mmq: true,
        ..Default::default()
    });
    layer.set_lora_weights(lora.clone()).unwrap();
    assert_eq!(layer.prefill_arm().unwrap(), PrefillArm::Nvfp4TM128);
    let want = outputs(&layer, &gpu, &x);
    let merged = host.lora_reference(&lora, &x, FfnActivation::Silu);
    assert!(rel_l2(want.last().unwrap(), &merged) <= 1e-2);
    let (foot, used) = (layer.footprint(), cpu.used_bytes());
    let e = layer.finalize_q4k_load(&gpu, h, i, 0).unwrap_err();
    assert!(
        matches!(e, Error::Unsupported(_)) && e.to_string().contains("LoRA"),
        "{e}"
    );
    assert_eq!((layer.footprint(), cpu.used_bytes()), (foot, used));
    assert!(!layer.has_q4k_mmq_copies());
    assert_eq!(outputs(&layer, &gpu, &x), want);
    // Finalized first: LoRA is refused, the layer unchanged.
    layer.clear_lora();
    layer.finalize_q4k_load(&gpu, h, i, 0).unwrap();
    assert_eq!(layer.prefill_arm().unwrap(), PrefillArm::Q4kMmq);
    let foot = layer.footprint();
    let e = layer.set_lora_weights(lora).unwrap_err();
    assert!(
        matches!(e, Error::Unsupported(_)) && e.to_string().contains("finalize_q4k_load"),
        "{e}"
    );
    assert_eq!((layer.lora_rank(), layer.footprint()), (None, foot));
}

#[test]
fn lora_and_the_nvfp4_mmq_finalize_refuse_each_other() {
    use denseffn::layer::{PrefillArm, PrefillConfig};
    let (h, i) = (256, 512);
    let host = HostLayer::random(h, i, 37);
    let lora = lora_weights(h, i, 16, 38);
    let x = activations(64 * h, 39);
    let cpu = Arc::new(CpuBackend::new());
    let gpu: Arc<dyn GpuBackend> = cpu.clone();
    let mut layer = host.layer(&gpu, FfnActivation::Gelu);
    layer.set_prefill_config(PrefillConfig {
        nvfp4_mmq: true,
        ..Default::default()
    });
    layer.set_lora_weights(lora.clone()).unwrap();
    assert_eq!(layer.prefill_arm().unwrap(), PrefillArm::Nvfp4TM128);
    let want = outputs(&layer, &gpu, &x);
    let (foot, used) = (layer.footprint(), cpu.used_bytes());
    let e = layer.finalize_nvfp4_mmq_load(&gpu, h, i, 0).unwrap_err();
    assert!(
        matches!(e, Error::Unsupported(_)) && e.to_string().contains("LoRA"),
        "{e}"
    );
    assert_eq!((layer.footprint(), cpu.used_bytes()), (foot, used));
    assert_eq!(outputs(&layer, &gpu, &x), want);
    // Finalized first: LoRA is refused, the layer unchanged.
    layer.clear_lora();
    layer.finalize_nvfp4_mmq_load(&gpu, h, i, 0).unwrap();
    assert_eq!(layer.prefill_arm().unwrap(), PrefillArm::Nvfp4Mmq);
    let foot = layer.footprint();
    let e = layer.set_lora_weights(lora).unwrap_err();
    assert!(
        matches!(e, Error::Unsupported(_)) && e.to_string().contains("finalize_nvfp4_mmq_load"),
        "{e}"
    );
    assert_eq!((layer.lora_rank(), layer.footprint()), (None, foot));
}
