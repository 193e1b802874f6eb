//! The LoRA overlay on the GPU: CudaBackend against CpuBackend (the reference, itself checked
//! against the f64 merged-weight reference in tests/cpu_lora.rs) on every LoRA path, launch
//! counts, determinism, and zero deltas giving the plain result. Skips (with the reason) without
//! a GPU; `DENSEFFN_GPU_TEST_SMALL=1` shrinks the shapes (for compute-sanitizer runs).
mod common;
use common::*;
use denseffn::backend::{CpuBackend, DevicePtr, GpuBackend};
use denseffn::layer::{DenseFfnLayer, FfnActivation, ForwardContext};
use denseffn::reference::rel_l2;
use std::sync::Arc;

/// (hidden, intermediate, rank): model shapes at ranks 16 and 64, a shape that is not a
/// multiple of the shrink's 512-column step with a rank that pads (8 → 16), and the largest
/// rank.
fn cases() -> Vec<(usize, usize, usize)> {
    if small() {
        vec![(256, 512, 16), (192, 320, 8), (256, 512, 256)]
    } else {
        vec![
            (4096, 14336, 16),
            (4096, 14336, 64),
            (4160, 14400, 8),
            (2048, 5632, 256),
        ]
    }
}

/// A path by name on `m` tokens at `x`, its bf16 output (the whole output buffer of `rows`
/// tokens, poisoned with NaN first so unwritten values show).
fn run(
    layer: &DenseFfnLayer,
    ctx: &mut ForwardContext,
    path: &str,
    m: usize,
    x: DevicePtr,
    rows: usize,
) -> Vec<f64> {
    let gpu = layer.gpu();
    gpu.memset(ctx.output(), 0xFF, rows * layer.hidden() * 2)
        .unwrap();
    let y = match path {
        "forward" => layer.forward(x, ctx, 0),
        "k2" => layer.forward_k2(x, ctx, 0),
        "k3" => layer.forward_k3(x, ctx, 0),
        "km" => layer.forward_km(x, m, ctx, 0),
        "prefill" => layer.forward_prefill(x, m, ctx, 0),
        other => panic!("no path {other}"),
    }
    .unwrap();
    download_bf16(gpu, y, rows * layer.hidden())
}

/// Every LoRA path on the GPU against the CPU reference backend running the same layer:
/// forward (SiLU and GELU), k2, k3, km m = 1..8 (launch counts asserted), prefill N ∈ {1, 64,
/// 512} (sampled tokens; nothing written past N). The first token is also checked against the
/// f64 reference of the merged weights on the smallest model shape.
#[test]
fn lora_matches_cpu_reference_on_every_path() {
    let Some(gpu) = cuda() else { return };
    let cpu: Arc<dyn GpuBackend> = Arc::new(CpuBackend::new());
    let ns: &[usize] = if small() {
        &[1, 64, 130]
    } else {
        &[1, 64, 512]
    };
    let nmax = *ns.iter().max().unwrap();
    for (h, i, rank) in cases() {
        let host = HostLayer::random(h, i, (h + 3 * i + rank) as u64);
        let lora = lora_weights(h, i, rank, rank as u64);
        let x = activations(nmax * h, 7);
        for act in [FfnActivation::Silu, FfnActivation::Gelu] {
            let tag = format!("({h}, {i}) rank {rank} {act:?}");
            let (mut cl, mut gl) = (host.layer(&cpu, act), host.layer(&gpu, act));
            cl.set_lora_weights(lora.clone()).unwrap();
            gl.set_lora_weights(lora.clone()).unwrap();
            let mut cc = ForwardContext::new(&cl, 8).unwrap();
            let mut gc = ForwardContext::new(&gl, nmax).unwrap();
            let (cx, gx) = (upload_bf16(&cpu, &x[..8 * h]), upload_bf16(&gpu, &x));
            let mut worst = 0.0f64;
            let mut check = |what: String, got: &[f64], want: &[f64]| {
                assert!(
                    got.iter().all(|v| v.is_finite()),
                    "{what}: unwritten outputs"
                );
                let e = rel_l2(got, want);
                worst = worst.max(e);
                assert!(e <= 1e-2, "{what}: rel L2 {e}");
            };
            let mut paths = vec![("forward", 1), ("k2", 2), ("k3", 3)];
            paths.extend((1..=8).map(|m| ("km", m)));
            for (path, m) in paths {
                let before = gpu.launch_count();
                let got = run(&gl, &mut gc, path, m, gx, 8);
                let launched = gpu.launch_count() - before;
                let names = match path {
                    "forward" => gl.decode_kernels(),
                    "km" => gl.km_kernels(m),
                    _ => gl.verify_kernels(m),
                };
                assert_eq!(launched, names.len() as u64, "{tag} {path}");
                let want = run(&cl, &mut cc, path, m, cx, m);
                check(format!("{tag} {path} m={m}"), &got[..m * h], &want);
                assert!(
                    got[m * h..].iter().all(|v| v.is_nan()),
                    "{tag} {path}: wrote past m"
                );
            }
            if (h, i) == (2048, 5632) || small() {
                let got = run(&gl, &mut gc, "forward", 1, gx, 1);
                let e = rel_l2(&got, &host.lora_reference(&lora, &x[..h], act));
                assert!(e <= 1e-2, "{tag} forward vs f64 merged reference: {e}");
            }
            for &n in ns {
                let before = gpu.launch_count();
                let got = run(&gl, &mut gc, "prefill", n, gx, nmax);
                assert_eq!(gpu.launch_count() - before, 4, "{tag} prefill N={n}");
                assert!(
                    got[n * h..].iter().all(|v| v.is_nan()),
                    "{tag} N={n}: wrote past the last token"
                );
                let sample = sample_tokens(n);
                let xs = upload_bf16(&cpu, &rows_of(&x, &sample, h));
                let want = download_bf16(
                    &cpu,
                    cl.forward_prefill(xs, sample.len(), &mut cc, 0).unwrap(),
                    sample.len() * h,
                );
                cpu.free(xs).unwrap();
                let got_s = rows_of(&got, &sample, h);
                check(format!("{tag} prefill N={n}"), &got_s, &want);
            }
            eprintln!("{tag}: forward, k2, k3, km 1..8, prefill {ns:?}: worst rel L2 vs CPU reference {worst:.2e}");
        }
    }
}

/// Repeated calls give the same bits (the shrink's split-K sum and the fused expansion are
/// deterministic), and a LoRA with alpha = 0 gives exactly the plain layer's outputs (within
/// the last bf16 bit where the plain prefill splits K and the LoRA one does not), as does the
/// layer after `clear_lora`.
#[test]
fn lora_is_deterministic_and_zero_deltas_equal_the_plain_layer() {
    let Some(gpu) = cuda() else { return };
    let (h, i) = if small() { (256, 512) } else { (4096, 14336) };
    let host = HostLayer::random(h, i, 61);
    let x = upload_bf16(&gpu, &activations(64 * h, 62));
    let paths = [
        ("forward", 1),
        ("k2", 2),
        ("km", 4),
        ("km", 8),
        ("prefill", 8),
        ("prefill", 64),
    ];
    for act in [FfnActivation::Silu, FfnActivation::Gelu] {
        let all = |layer: &DenseFfnLayer| -> Vec<Vec<f64>> {
            let mut ctx = ForwardContext::new(layer, 64).unwrap();
            paths
                .iter()
                .map(|&(p, m)| run(layer, &mut ctx, p, m, x, m))
                .collect()
        };
        let mut layer = host.layer(&gpu, act);
        let plain = all(&layer);
        let split: Vec<bool> = paths
            .iter()
            .map(|&(p, m)| {
                p == "prefill"
                    && layer
                        .prefill_kernels(m)
                        .iter()
                        .any(|k| k.ends_with("_splitk"))
            })
            .collect();
        let mut zero = lora_weights(h, i, 32, 63);
        zero.alpha = 0.0;
        layer.set_lora_weights(zero).unwrap();
        // Bit-equal on every path but a prefill whose plain down GEMM splits K (small N): a
        // LoRA GEMM never splits, and split partials sum in another order (last-bit
        // differences of the bf16 output).
        for (k, (got, want)) in all(&layer).iter().zip(&plain).enumerate() {
            let (path, m) = paths[k];
            if split[k] {
                let e = rel_l2(got, want);
                assert!(
                    e < 4e-3,
                    "{act:?} {path}({m}): alpha = 0 moved the outputs by {e}"
                );
            } else {
                assert_eq!(
                    got, want,
                    "{act:?} {path}({m}): alpha = 0 changed the outputs"
                );
            }
        }
        layer.set_lora_weights(lora_weights(h, i, 32, 64)).unwrap();
        let first = all(&layer);
        for (p, (a, b)) in first.iter().zip(&plain).enumerate() {
            assert!(rel_l2(a, b) > 0.05, "{act:?} path {p}: LoRA had no effect");
        }
        assert_eq!(all(&layer), first, "{act:?}: a second run differs");
        layer.clear_lora();
        assert_eq!(all(&layer), plain, "{act:?}: clear_lora did not restore");
    }
}

/// A LoRA `forward`, `forward_km(8)` and `forward_prefill(64)` captured into a CUDA graph (their
/// GEMVs/GEMMs are programmatic dependents of the shrinks, which the capture must keep) and
/// replayed give the direct calls' bits, on a created stream.
#[test]
fn lora_paths_replayed_from_a_graph_equal_direct_calls() {
    use denseffn::backend::{Graph, Stream};
    let Some(gpu) = cuda() else { return };
    let (h, i) = if small() { (256, 512) } else { (4096, 14336) };
    let host = HostLayer::random(h, i, 71);
    let mut layer = host.layer(&gpu, FfnActivation::Silu);
    layer.set_lora_weights(lora_weights(h, i, 64, 72)).unwrap();
    let x = upload_bf16(&gpu, &activations(64 * h, 73));
    let stream = Stream::new(&gpu).unwrap();
    let s = stream.raw();
    let mut ctx = ForwardContext::new(&layer, 64).unwrap();
    type Call = fn(&DenseFfnLayer, DevicePtr, &mut ForwardContext, u64) -> DevicePtr;
    let calls: [(&str, usize, Call); 3] = [
        ("forward", 1, |l, x, c, s| l.forward(x, c, s).unwrap()),
        ("km(8)", 8, |l, x, c, s| l.forward_km(x, 8, c, s).unwrap()),
        ("prefill(64)", 64, |l, x, c, s| {
            l.forward_prefill(x, 64, c, s).unwrap()
        }),
    ];
    for (name, m, call) in calls {
        let y = call(&layer, x, &mut ctx, s);
        gpu.synchronize(s).unwrap();
        let direct = download_bf16(&gpu, y, m * h);
        gpu.memset(ctx.output(), 0xFF, 64 * h * 2).unwrap();
        let (graph, y) = Graph::capture(&gpu, s, || Ok(call(&layer, x, &mut ctx, s))).unwrap();
        graph.launch(s).unwrap();
        gpu.synchronize(s).unwrap();
        let replayed = download_bf16(&gpu, y, m * h);
        assert!(direct.iter().all(|v| v.is_finite()), "{name}");
        assert_eq!(replayed, direct, "{name}: graph replay differs");
    }
}

/// NaN/±Inf in one token's activations reach that token's outputs through the LoRA paths too
/// (never masked) and leave the other tokens of the call exactly as with clean input.
#[test]
fn non_finite_activations_propagate_through_lora() {
    let Some(gpu) = cuda() else { return };
    let (h, i) = (256, 512);
    let host = HostLayer::random(h, i, 81);
    let mut layer = host.layer(&gpu, FfnActivation::Silu);
    layer.set_lora_weights(lora_weights(h, i, 16, 82)).unwrap();
    let mut ctx = ForwardContext::new(&layer, 3).unwrap();
    let clean = activations(3 * h, 83);
    let all = |x: &[f32], ctx: &mut ForwardContext| -> Vec<Vec<f64>> {
        let xs = upload_bf16(&gpu, x);
        let out = [("forward", 1), ("km", 3), ("prefill", 3)]
            .iter()
            .map(|&(p, m)| run(&layer, ctx, p, m, xs, m))
            .collect();
        gpu.free(xs).unwrap();
        out
    };
    let want = all(&clean, &mut ctx);
    for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
        let mut x = clean.clone();
        x[17] = bad;
        for (p, (y, w)) in all(&x, &mut ctx).iter().zip(&want).enumerate() {
            let n0 = y[..h].iter().filter(|v| !v.is_finite()).count();
            assert!(
                n0 > h / 2,
                "path {p} {bad}: only {n0} of token 0's outputs non-finite"
            );
            assert_eq!(&y[h..], &w[h..], "path {p} {bad}: other tokens changed");
        }
    }
}
