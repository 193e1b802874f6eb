//! Contracts of the public types, checked on the CPU reference backend.
//!
//! Threads: [`DenseFfnLayer`], [`DenseFfnWeights`], [`ForwardContext`], both backends and
//! `Arc<dyn GpuBackend>` are `Send + Sync`, and so are the tensor-parallel rank
//! (`tp::ShardedFfnLayer`) and its communicators (one rank's collective calls come from one
//! thread at a time). A layer may be shared by any number of threads
//! (e.g. behind an `Arc`) and called from them at once, each call with its own
//! [`ForwardContext`]; a context is used by one call at a time, which the `&mut ForwardContext`
//! parameter of every forward path enforces. Concurrent calls on distinct contexts give exactly
//! the results the same calls give one after another.
//!
//! Non-finite activations: a NaN or ±Inf in a token's input is not masked; it makes that token's
//! outputs non-finite (on the CPU reference: every output of that token) and leaves the other
//! tokens of the same call untouched — for the NVFP4 weights (with and without LoRA deltas) and
//! every overlay.
mod common;
use common::*;
use denseffn::backend::{CpuBackend, CudaBackend, DevicePtr, GpuBackend};
use denseffn::buffer::DeviceBuffer;
use denseffn::layer::{DenseFfnLayer, DenseFfnWeights, FfnActivation, ForwardContext, Nvfp4Weight};
use std::sync::{Arc, Barrier};

const H: usize = 128;
const I: usize = 256;

fn assert_send_sync<T: Send + Sync + ?Sized>() {}

#[test]
fn public_types_are_send_and_sync() {
    assert_send_sync::<DenseFfnLayer>();
    assert_send_sync::<DenseFfnWeights>();
    assert_send_sync::<Nvfp4Weight>();
    assert_send_sync::<ForwardContext>();
    assert_send_sync::<DeviceBuffer>();
    assert_send_sync::<CpuBackend>();
    assert_send_sync::<CudaBackend>();
    assert_send_sync::<Arc<dyn GpuBackend>>();
    assert_send_sync::<dyn GpuBackend>();
    assert_send_sync::<denseffn::layer::TiledWeight>();
    assert_send_sync::<denseffn::layer::Overlay>();
    assert_send_sync::<denseffn::layer::LoraFfnWeights>();
    assert_send_sync::<denseffn::load::HostFfn>();
    assert_send_sync::<denseffn::backend::Stream>();
    assert_send_sync::<denseffn::backend::Graph>();
    assert_send_sync::<denseffn::tp::ShardedFfnLayer>();
    assert_send_sync::<denseffn::tp::CpuAllReduce>();
    assert_send_sync::<denseffn::tp::NcclAllReduce>();
    assert_send_sync::<dyn denseffn::tp::AllReduce>();
}

fn cpu() -> Arc<dyn GpuBackend> {
    Arc::new(CpuBackend::new())
}

/// Raw bf16 bits of `n` values at `p`.
fn download_bits(gpu: &Arc<dyn GpuBackend>, p: DevicePtr, n: usize) -> Vec<u16> {
    let mut b = vec![0u8; n * 2];
    gpu.download(&mut b, p).unwrap();
    b.chunks_exact(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]))
        .collect()
}

const ITERS: u64 = 6;
const PREFILL_TOKENS: [usize; 3] = [1, 9, 33];

/// `forward`, `forward_km` and `forward_prefill` on fresh random inputs (seeded by `seed` and
/// the iteration), `ITERS` times: every output as raw bf16 bits, in call order.
fn calls(
    layer: &DenseFfnLayer,
    ctx: &mut ForwardContext,
    seed: u64,
    start: Option<&Barrier>,
) -> Vec<Vec<u16>> {
    let gpu = layer.gpu();
    if let Some(b) = start {
        b.wait();
    }
    let mut out = Vec::new();
    for it in 0..ITERS {
        let s = seed * 1000 + it * 10;
        let x = upload_bf16(gpu, &activations(H, s));
        let y = layer.forward(x, ctx, 0).unwrap();
        out.push(download_bits(gpu, y, H));
        gpu.free(x).unwrap();

        let m = 1 + (seed + it) as usize % 8;
        let x = upload_bf16(gpu, &activations(m * H, s + 1));
        let y = layer.forward_km(x, m, ctx, 0).unwrap();
        out.push(download_bits(gpu, y, m * H));
        gpu.free(x).unwrap();

        let n = PREFILL_TOKENS[(seed + it) as usize % PREFILL_TOKENS.len()];
        let x = upload_bf16(gpu, &activations(n * H, s + 2));
        let y = layer.forward_prefill(x, n, ctx, 0).unwrap();
        out.push(download_bits(gpu, y, n * H));
        gpu.free(x).unwrap();
    }
    out
}

#[test]
fn two_contexts_on_one_layer_from_two_threads_match_serial_calls() {
    let host = HostLayer::quantized(H, I, 41);
    for act in [FfnActivation::Silu, FfnActivation::Gelu] {
        let gpu = cpu();
        let layer = host.layer(&gpu, act);
        let max_tokens = *PREFILL_TOKENS.iter().max().unwrap();
        let (mut c1, mut c2) = (
            ForwardContext::new(&layer, max_tokens).unwrap(),
            ForwardContext::new(&layer, max_tokens).unwrap(),
        );
        let start = Barrier::new(2);
        let (a, b) = std::thread::scope(|sc| {
            let (layer, start) = (&layer, &start);
            let t1 = sc.spawn(move || calls(layer, &mut c1, 1, Some(start)));
            let t2 = sc.spawn(move || calls(layer, &mut c2, 2, Some(start)));
            (t1.join().unwrap(), t2.join().unwrap())
        });
        // The same calls one after another, through one fresh context.
        let mut ctx = ForwardContext::new(&layer, max_tokens).unwrap();
        let (sa, sb) = (
            calls(&layer, &mut ctx, 1, None),
            calls(&layer, &mut ctx, 2, None),
        );
        for (who, conc, serial) in [("thread 1", &a, &sa), ("thread 2", &b, &sb)] {
            assert_eq!(conc.len(), serial.len());
            for (i, (c, s)) in conc.iter().zip(serial).enumerate() {
                let path = ["forward", "forward_km", "forward_prefill"][i % 3];
                assert!(
                    c == s,
                    "{act:?} {who}: call {i} ({path}) differs from the serial run"
                );
                assert!(
                    c.iter().all(|&b| half::bf16::from_bits(b).is_finite()),
                    "{act:?} {who}: call {i} ({path}) has non-finite outputs"
                );
            }
        }
        assert_ne!(
            a, b,
            "the two threads' inputs differ, so must their outputs"
        );
    }
}

/// Every path's output for `tokens` tokens of `x` (`[tokens][H]`): (name, f64 values).
fn all_paths(
    layer: &DenseFfnLayer,
    ctx: &mut ForwardContext,
    x: &[f32],
    tokens: usize,
) -> Vec<(&'static str, Vec<f64>)> {
    let gpu = layer.gpu().clone();
    let xs = upload_bf16(&gpu, x);
    let mut out = Vec::new();
    let y = layer.forward(xs, ctx, 0).unwrap();
    out.push(("forward", download_bf16(&gpu, y, H)));
    let y = layer.forward_km(xs, tokens, ctx, 0).unwrap();
    out.push(("forward_km", download_bf16(&gpu, y, tokens * H)));
    let y = layer.forward_prefill(xs, tokens, ctx, 0).unwrap();
    out.push(("forward_prefill", download_bf16(&gpu, y, tokens * H)));
    gpu.free(xs).unwrap();
    out
}

#[test]
fn nan_and_inf_in_activations_propagate() {
    const TOKENS: usize = 3;
    let host = HostLayer::quantized(H, I, 43);
    let clean = activations(TOKENS * H, 47);
    use denseffn::layer::OverlayKind;
    // (overlay, LoRA deltas on the NVFP4 weights)
    let overlays = [
        (None, false),
        (Some(OverlayKind::Q2), false),
        (Some(OverlayKind::Fp8), false),
        (Some(OverlayKind::Bf16), false),
        (None, true),
    ];
    for (act, (overlay, lora)) in [FfnActivation::Silu, FfnActivation::Gelu]
        .into_iter()
        .flat_map(|a| overlays.map(|o| (a, o)))
    {
        let gpu = cpu();
        let mut layer = host.layer(&gpu, act);
        if let Some(kind) = overlay {
            OverlayHost::random(kind, H, I, 44)
                .install(&mut layer)
                .unwrap();
        }
        if lora {
            layer.set_lora_weights(lora_weights(H, I, 16, 45)).unwrap();
        }
        let mut ctx = ForwardContext::new(&layer, TOKENS).unwrap();
        let want = all_paths(&layer, &mut ctx, &clean, TOKENS);
        for (_, y) in &want {
            assert!(y.iter().all(|v| v.is_finite()), "{act:?}: clean input");
        }
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            // One bad element in token 0 (the token `forward` reads).
            let mut x = clean.clone();
            x[37] = bad;
            for (path, y) in all_paths(&layer, &mut ctx, &x, TOKENS) {
                let tok0 = &y[..H];
                if bad.is_nan() {
                    assert!(
                        tok0.iter().all(|v| v.is_nan()),
                        "{act:?} {path}: NaN input, {} of {H} outputs are not NaN",
                        tok0.iter().filter(|v| !v.is_nan()).count()
                    );
                } else {
                    assert!(
                        tok0.iter().all(|v| !v.is_finite()),
                        "{act:?} {path}: {bad} input, {} of {H} outputs are finite",
                        tok0.iter().filter(|v| v.is_finite()).count()
                    );
                }
                // The other tokens of the call are exactly as without the bad element.
                let clean_y = &want.iter().find(|(p, _)| *p == path).unwrap().1;
                assert!(
                    y[H..] == clean_y[H..],
                    "{act:?} {path}: {bad} in token 0 changed other tokens"
                );
            }
        }
    }
}
