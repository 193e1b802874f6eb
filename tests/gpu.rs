//! CudaBackend against CpuBackend on model shapes. Skips (with the reason) without a GPU.
mod common;
use common::*;
use denseffn::backend::{CpuBackend, CudaBackend, GpuBackend};
use denseffn::layer::{FfnActivation, ForwardContext};
use denseffn::reference::rel_l2;
use std::num::NonZeroU32;
use std::sync::Arc;

/// The device's memory, shared by the tests of this binary: the KV-cache tests take all free
/// memory, so they hold it exclusively; every other test holds it shared (tests may run on
/// several threads at once).
enum Memory {
    Shared(#[allow(dead_code)] std::sync::RwLockReadGuard<'static, ()>),
    Exclusive(#[allow(dead_code)] std::sync::RwLockWriteGuard<'static, ()>),
}

fn device_memory(exclusive: bool) -> Memory {
    static LOCK: std::sync::RwLock<()> = std::sync::RwLock::new(());
    if exclusive {
        Memory::Exclusive(LOCK.write().unwrap_or_else(|e| e.into_inner()))
    } else {
        Memory::Shared(LOCK.read().unwrap_or_else(|e| e.into_inner()))
    }
}

fn shapes(full: &[(usize, usize)]) -> Vec<(usize, usize)> {
    if small() {
        vec![(256, 512), (192, 320)]
    } else {
        full.to_vec()
    }
}

const SHAPES: &[(usize, usize)] = &[(2048, 5632), (1536, 8960), (4096, 14336), (5120, 25600)];

#[test]
fn decode_matches_cpu_reference_on_model_shapes() {
    let _memory = device_memory(false);
    let Some(gpu) = cuda() else { return };
    let cpu: Arc<dyn GpuBackend> = Arc::new(CpuBackend::new());
    for (h, i) in shapes(SHAPES) {
        let host = HostLayer::random(h, i, (h * 31 + i) as u64);
        for act in [FfnActivation::Silu, FfnActivation::Gelu] {
            let x = activations(3 * h, h as u64 + 1);
            eprintln!("({h}, {i}) {act:?}: CPU reference");
            let want = {
                let layer = host.layer(&cpu, act);
                let mut ctx = ForwardContext::new(&layer, 3).unwrap();
                let y = layer
                    .forward_batched(upload_bf16(&cpu, &x), 3, &mut ctx, 0)
                    .unwrap();
                download_bf16(&cpu, y, 3 * h)
            };
            eprintln!("({h}, {i}) {act:?}: GPU");
            let layer = host.layer(&gpu, act);
            let mut ctx = ForwardContext::new(&layer, 3).unwrap();
            let xg = upload_bf16(&gpu, &x);
            // Poison the output so unwritten elements show up as NaN.
            gpu.memset(ctx.output(), 0xFF, 3 * h * 2).unwrap();
            let before = gpu.launch_count();
            let y = layer.forward(xg, &mut ctx, 0).unwrap();
            assert_eq!(
                gpu.launch_count() - before,
                layer.decode_kernels().len() as u64
            );
            let got1 = download_bf16(&gpu, y, h);
            let err1 = rel_l2(&got1, &want[..h]);
            // Again: split-K counters must have been reset by the first call.
            let again = download_bf16(&gpu, layer.forward(xg, &mut ctx, 0).unwrap(), h);
            assert_eq!(got1, again, "({h},{i}) {act:?}: second call differs");
            gpu.memset(ctx.output(), 0xFF, 3 * h * 2).unwrap();
            let got3 = download_bf16(
                &gpu,
                layer.forward_batched(xg, 3, &mut ctx, 0).unwrap(),
                3 * h,
            );
            let err3 = rel_l2(&got3, &want);
            eprintln!("({h}, {i}) {act:?}: rel L2 vs CPU reference: forward {err1:.2e}, forward_batched(3) {err3:.2e}");
            assert!(
                got3.iter().all(|v| v.is_finite()),
                "unwritten or non-finite outputs"
            );
            assert!(
                err1 <= 1e-2 && err3 <= 1e-2,
                "({h},{i}) {act:?}: {err1} {err3}"
            );
        }
    }
}

#[test]
fn verify_paths_match_cpu_reference() {
    let _memory = device_memory(false);
    let Some(gpu) = cuda() else { return };
    let cpu: Arc<dyn GpuBackend> = Arc::new(CpuBackend::new());
    for (h, i) in shapes(&[(2048, 5632), (4096, 14336)]) {
        let host = HostLayer::random(h, i, (h + i) as u64);
        let x = activations(8 * h, 77);
        for act in [FfnActivation::Silu, FfnActivation::Gelu] {
            let (cl, gl) = (host.layer(&cpu, act), host.layer(&gpu, act));
            let (mut cc, mut gc) = (
                ForwardContext::new(&cl, 8).unwrap(),
                ForwardContext::new(&gl, 8).unwrap(),
            );
            let (cx, gx) = (upload_bf16(&cpu, &x), upload_bf16(&gpu, &x));
            let mut worst = 0.0f64;
            for m in 1..=8 {
                assert!(gl.can_forward_km(m));
                let want = download_bf16(&cpu, cl.forward_km(cx, m, &mut cc, 0).unwrap(), m * h);
                gpu.memset(gc.output(), 0xFF, 8 * h * 2).unwrap();
                let before = gpu.launch_count();
                let got = download_bf16(&gpu, gl.forward_km(gx, m, &mut gc, 0).unwrap(), m * h);
                assert_eq!(gpu.launch_count() - before, 4);
                assert!(
                    got.iter().all(|v| v.is_finite()),
                    "({h},{i}) {act:?} m={m}: unwritten outputs"
                );
                let e = rel_l2(&got, &want);
                worst = worst.max(e);
                assert!(e <= 1e-2, "({h},{i}) {act:?} km m={m}: {e}");
            }
            for k in [2usize, 3] {
                let want = download_bf16(
                    &cpu,
                    if k == 2 {
                        cl.forward_k2(cx, &mut cc, 0)
                    } else {
                        cl.forward_k3(cx, &mut cc, 0)
                    }
                    .unwrap(),
                    k * h,
                );
                gpu.memset(gc.output(), 0xFF, 8 * h * 2).unwrap();
                let got = download_bf16(
                    &gpu,
                    if k == 2 {
                        gl.forward_k2(gx, &mut gc, 0)
                    } else {
                        gl.forward_k3(gx, &mut gc, 0)
                    }
                    .unwrap(),
                    k * h,
                );
                let e = rel_l2(&got, &want);
                worst = worst.max(e);
                assert!(e <= 1e-2, "({h},{i}) {act:?} k{k}: {e}");
            }
            eprintln!("({h}, {i}) {act:?}: forward_km m=1..8, k2, k3: worst rel L2 vs CPU reference {worst:.2e}");
        }
    }
}

/// The verify paths on inputs and intermediates whose magnitude changes every 64 columns
/// (2^-4..2^4, `common::graded`): up reads gate's staged copy and down the packer's output,
/// each with one scale per token and K split, so a scale applied to the wrong split is off by
/// powers of two. GPU against the f64 reference and the CPU backend.
#[test]
fn verify_paths_track_magnitudes_that_change_along_k() {
    let _memory = device_memory(false);
    let Some(gpu) = cuda() else { return };
    let cpu: Arc<dyn GpuBackend> = Arc::new(CpuBackend::new());
    let (h, i) = if small() { (256, 512) } else { (2048, 5632) };
    let host = HostLayer::quantized_graded(h, i, 41);
    let x = graded_activations(8 * h, h, 42);
    for act in [FfnActivation::Silu, FfnActivation::Gelu] {
        let (cl, gl) = (host.layer(&cpu, act), host.layer(&gpu, act));
        let (mut cc, mut gc) = (
            ForwardContext::new(&cl, 8).unwrap(),
            ForwardContext::new(&gl, 8).unwrap(),
        );
        let want = host.reference(&x, act);
        let mut worst = (0.0f64, 0.0f64);
        for &(path, m) in GRADED_PATHS {
            gpu.memset(gc.output(), 0xFF, 8 * h * 2).unwrap();
            let got = path_output(&gl, &gpu, path, m, &x, &mut gc).unwrap();
            let cpu_got = path_output(&cl, &cpu, path, m, &x, &mut cc).unwrap();
            let (e, ec) = (rel_l2(&got, &want[..m * h]), rel_l2(&got, &cpu_got));
            worst = (worst.0.max(e), worst.1.max(ec));
            assert!(
                e <= 1e-2 && ec <= 1e-2,
                "{act:?} {path} m={m}: {e} vs f64, {ec} vs CPU"
            );
        }
        eprintln!(
            "({h}, {i}) {act:?} graded: worst rel L2 {:.2e} vs f64, {:.2e} vs CPU",
            worst.0, worst.1
        );
    }
}

/// The decode and verify paths chain their kernels as programmatic dependents (each GEMV,
/// packer or activation kernel may start while the one before it finishes, and waits for it
/// before reading its output). Captured into a CUDA graph and replayed, and run ten times back
/// to back without a synchronization, they give the bits of one direct call, SiLU and GELU.
#[test]
fn chained_paths_replayed_and_back_to_back_equal_direct_calls() {
    use denseffn::backend::{DevicePtr, Graph, Stream};
    use denseffn::layer::DenseFfnLayer;
    let _memory = device_memory(false);
    let Some(gpu) = cuda() else { return };
    let (h, i) = if small() { (256, 512) } else { (4096, 14336) };
    let host = HostLayer::random(h, i, 91);
    let x = upload_bf16(&gpu, &activations(8 * h, 92));
    let stream = Stream::new(&gpu).unwrap();
    let s = stream.raw();
    type Call = fn(&DenseFfnLayer, DevicePtr, &mut ForwardContext, u64) -> DevicePtr;
    let calls: [(&str, usize, Call); 4] = [
        ("forward", 1, |l, x, c, s| l.forward(x, c, s).unwrap()),
        ("k2", 2, |l, x, c, s| l.forward_k2(x, c, s).unwrap()),
        ("km(3)", 3, |l, x, c, s| l.forward_km(x, 3, c, s).unwrap()),
        ("km(8)", 8, |l, x, c, s| l.forward_km(x, 8, c, s).unwrap()),
    ];
    for act in [FfnActivation::Silu, FfnActivation::Gelu] {
        let layer = host.layer(&gpu, act);
        let mut ctx = ForwardContext::new(&layer, 8).unwrap();
        for (name, m, call) in calls {
            let y = call(&layer, x, &mut ctx, s);
            gpu.synchronize(s).unwrap();
            let direct = download_bf16(&gpu, y, m * h);
            assert!(direct.iter().all(|v| v.is_finite()), "{act:?} {name}");
            gpu.memset(ctx.output(), 0xFF, 8 * h * 2).unwrap();
            let (graph, y) = Graph::capture(&gpu, s, || Ok(call(&layer, x, &mut ctx, s))).unwrap();
            graph.launch(s).unwrap();
            gpu.synchronize(s).unwrap();
            let replayed = download_bf16(&gpu, y, m * h);
            assert_eq!(replayed, direct, "{act:?} {name}: graph replay differs");
            gpu.memset(ctx.output(), 0xFF, 8 * h * 2).unwrap();
            let mut y = y;
            for _ in 0..10 {
                y = call(&layer, x, &mut ctx, s);
            }
            gpu.synchronize(s).unwrap();
            let again = download_bf16(&gpu, y, m * h);
            assert_eq!(again, direct, "{act:?} {name}: back-to-back calls differ");
        }
    }
}

#[test]
fn prefill_matches_cpu_reference_on_sampled_tokens() {
    let _memory = device_memory(false);
    let Some(gpu) = cuda() else { return };
    let cpu: Arc<dyn GpuBackend> = Arc::new(CpuBackend::new());
    let ns = arm_ns(&[1, 7, 64, 511, 512, 4096]);
    let nmax = *ns.iter().max().unwrap();
    for (h, i) in shapes(&[(4096, 14336), (5120, 25600)]) {
        let host = HostLayer::random(h, i, (3 * h + i) as u64);
        let x = activations(nmax * h, 91);
        for act in [FfnActivation::Silu, FfnActivation::Gelu] {
            let (cl, gl) = (host.layer(&cpu, act), host.layer(&gpu, act));
            let mut cc = ForwardContext::new(&cl, 8).unwrap();
            let mut gc = ForwardContext::new(&gl, nmax).unwrap();
            let gx = upload_bf16(&gpu, &x);
            let mut worst = 0.0f64;
            for &n in ns {
                gpu.memset(gc.output(), 0xFF, nmax * h * 2).unwrap();
                let y = gl.forward_prefill(gx, n, &mut gc, 0).unwrap();
                let got = download_bf16(&gpu, y, nmax * h);
                assert!(
                    got[..n * h].iter().all(|v| v.is_finite()),
                    "({h},{i}) {act:?} N={n}: unwritten outputs"
                );
                assert!(
                    got[n * h..].iter().all(|v| v.is_nan()),
                    "({h},{i}) {act:?} N={n}: wrote past the last token"
                );
                let mut sample: Vec<usize> =
                    vec![0, 1, 2, n / 3, n / 2, n.saturating_sub(2), n - 1];
                sample.retain(|&t| t < n);
                sample.sort();
                sample.dedup();
                let xs: Vec<f32> = sample
                    .iter()
                    .flat_map(|&t| x[t * h..(t + 1) * h].iter().copied())
                    .collect();
                let want = download_bf16(
                    &cpu,
                    cl.forward_prefill(upload_bf16(&cpu, &xs), sample.len(), &mut cc, 0)
                        .unwrap(),
                    sample.len() * h,
                );
                let got_s: Vec<f64> = sample
                    .iter()
                    .flat_map(|&t| got[t * h..(t + 1) * h].iter().copied())
                    .collect();
                let e = rel_l2(&got_s, &want);
                worst = worst.max(e);
                assert!(
                    e <= 1e-2,
                    "({h},{i}) {act:?} N={n}: rel L2 {e} on tokens {sample:?}"
                );
            }
            eprintln!("({h}, {i}) {act:?}: forward_prefill N={ns:?}: worst rel L2 vs CPU reference (sampled tokens) {worst:.2e}");
        }
    }
}

/// The split-K prefill GEMMs (`*_splitk`, every format) against the CPU reference backend:
/// a 256-row hidden and intermediate 4096 (64 chunks) put every N here in at most 3 tiles, so
/// down splits K 4 ways (NVFP4, and the overlays' 4-way minimum); N = 1, 65 and 130 cover
/// token tails. Output poisoned first; nothing past the last token may be written. Fast
/// enough to run under compute-sanitizer as it is.
#[test]
fn prefill_split_k_matches_cpu_reference() {
    use denseffn::layer::OverlayKind;
    let _memory = device_memory(false);
    let Some(gpu) = cuda() else { return };
    let cpu: Arc<dyn GpuBackend> = Arc::new(CpuBackend::new());
    let (h, i) = (256, 4096);
    let host = HostLayer::random(h, i, 61);
    let x = activations(130 * h, 62);
    for kind in [
        None,
        Some(OverlayKind::Q2),
        Some(OverlayKind::Q4k),
        Some(OverlayKind::Fp8),
        Some(OverlayKind::Bf16),
    ] {
        let (mut cl, mut gl) = (
            host.layer(&cpu, FfnActivation::Silu),
            host.layer(&gpu, FfnActivation::Silu),
        );
        if let Some(kind) = kind {
            let o = OverlayHost::random(kind, h, i, 63);
            o.install(&mut cl).unwrap();
            o.install(&mut gl).unwrap();
        }
        let mut cc = ForwardContext::new(&cl, 130).unwrap();
        let mut gc = ForwardContext::new(&gl, 130).unwrap();
        let (cx, gx) = (upload_bf16(&cpu, &x), upload_bf16(&gpu, &x));
        for n in [1usize, 65, 130] {
            // A BF16 layer runs one token through its decode GEMV (the prefill table's row).
            let down = gl.prefill_kernels(n)[1];
            if kind == Some(OverlayKind::Bf16) && n == 1 {
                assert_eq!(down, "bf16_gemv", "{kind:?} N={n}");
            } else {
                assert!(
                    down.ends_with("_splitk") || down.ends_with("_splitk_x2"),
                    "{kind:?} N={n}: {down}"
                );
            }
            gpu.memset(gc.output(), 0xFF, 130 * h * 2).unwrap();
            let got = download_bf16(
                &gpu,
                gl.forward_prefill(gx, n, &mut gc, 0).unwrap(),
                130 * h,
            );
            let want = download_bf16(&cpu, cl.forward_prefill(cx, n, &mut cc, 0).unwrap(), n * h);
            let err = rel_l2(&got[..n * h], &want);
            println!("{kind:?} N={n} ({down}): rel L2 vs CPU reference {err:.2e}");
            assert!(err < 1e-2, "{kind:?} N={n}: rel L2 {err}");
            assert!(
                got[n * h..].iter().all(|v| v.is_nan()),
                "{kind:?} N={n}: wrote past the end"
            );
        }
    }
}

/// BF16's gate+up GEMM splits K over the tiles of its grid's last wave
/// (`bf16_gemm_gate_up_act_splitk`): against the CPU reference for both activations, the
/// same bits on a second run (the split counters are back at zero and the sum order fixed)
/// and on a persistent grid capped at 3 blocks, nothing written past the last token; N = 130
/// runs the cluster-pair form (`_x2`; the cap then gives one pair).
#[test]
fn prefill_gate_up_tail_split_matches_cpu_reference() {
    use denseffn::layer::OverlayKind;
    let _memory = device_memory(false);
    let Some(gpu) = cuda() else { return };
    let cpu: Arc<dyn GpuBackend> = Arc::new(CpuBackend::new());
    // K = 2048 (32 chunks: 2 splits); 8 row blocks × 1..3 token blocks, all in the last wave.
    let (h, i) = (2048, 1024);
    let host = HostLayer::random(h, i, 71);
    let x = activations(300 * h, 72);
    let o = OverlayHost::random(OverlayKind::Bf16, h, i, 73);
    for act in [FfnActivation::Silu, FfnActivation::Gelu] {
        let (mut cl, mut gl) = (host.layer(&cpu, act), host.layer(&gpu, act));
        o.install(&mut cl).unwrap();
        o.install(&mut gl).unwrap();
        let mut cc = ForwardContext::new(&cl, 300).unwrap();
        let mut gc = ForwardContext::new(&gl, 300).unwrap();
        let (cx, gx) = (upload_bf16(&cpu, &x), upload_bf16(&gpu, &x));
        for n in [65usize, 130, 300] {
            let gate_up = gl.prefill_kernels(n)[0];
            // N = 130 (two token blocks) in cluster pairs, the others in single blocks.
            let want_kernel = if n == 130 {
                "bf16_gemm_gate_up_act_splitk_x2"
            } else {
                "bf16_gemm_gate_up_act_splitk"
            };
            assert_eq!(gate_up, want_kernel, "{act:?} N={n}");
            // Twice on the whole GPU, then on a persistent grid capped at 3 blocks, each block
            // running many whole and split tiles in turn.
            let mut runs = Vec::new();
            for cap in [None, None, NonZeroU32::new(3)] {
                gl.set_gemm_grid_cap(cap);
                gpu.memset(gc.output(), 0xFF, 300 * h * 2).unwrap();
                let y = gl.forward_prefill(gx, n, &mut gc, 0).unwrap();
                runs.push(download_bf16(&gpu, y, 300 * h));
            }
            gl.set_gemm_grid_cap(None);
            let want = download_bf16(&cpu, cl.forward_prefill(cx, n, &mut cc, 0).unwrap(), n * h);
            let err = rel_l2(&runs[0][..n * h], &want);
            println!("{act:?} N={n} ({gate_up}): rel L2 vs CPU reference {err:.2e}");
            assert!(err < 1e-2, "{act:?} N={n}: rel L2 {err}");
            let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&runs[0]), bits(&runs[1]), "{act:?} N={n}: runs differ");
            assert_eq!(
                bits(&runs[0]),
                bits(&runs[2]),
                "{act:?} N={n}: capped grid differs"
            );
            assert!(
                runs[0][n * h..].iter().all(|v| v.is_nan()),
                "{act:?} N={n}: wrote past the end"
            );
        }
    }
}

/// Whether `DENSEFFN_GPU_TEST_OVERLAYS` (a comma list of `q2`, `q4k`, `fp8`, `bf16`; unset:
/// all) selects `kind`, so a device run can check one format's kernels on full shapes alone.
fn overlay_selected(kind: denseffn::layer::OverlayKind) -> bool {
    std::env::var("DENSEFFN_GPU_TEST_OVERLAYS").map_or(true, |v| {
        v.split(',')
            .any(|s| s.trim().eq_ignore_ascii_case(&format!("{kind:?}")))
    })
}

/// The Q2_0, Q4_K, FP8 and BF16 overlays on every path (forward, k2, k3, km m = 1..8, prefill
/// N ∈ {1, 64, 512, 4096}), against the CPU reference backend running the same layer (sampled
/// tokens for prefill) and, for one token, the f64 reference of the format's own values. One
/// shape is not a multiple of 128 (FP8's partial scale blocks).
#[test]
fn overlays_match_cpu_reference_on_every_path() {
    use denseffn::layer::OverlayKind;
    let _memory = device_memory(false);
    let Some(gpu) = cuda() else { return };
    let cpu: Arc<dyn GpuBackend> = Arc::new(CpuBackend::new());
    let ns: &[usize] = if small() {
        &[1, 64, 130]
    } else {
        &[1, 64, 512, 4096]
    };
    let nmax = *ns.iter().max().unwrap();
    for (h, i) in shapes(&[(4096, 14336), (4160, 14400)]) {
        for kind in [
            OverlayKind::Q2,
            OverlayKind::Q4k,
            OverlayKind::Fp8,
            OverlayKind::Bf16,
        ] {
            if !overlay_selected(kind) {
                continue;
            }
            if kind == OverlayKind::Q4k && (h % 256 != 0 || i % 256 != 0) {
                continue; // Q4_K rows are whole 256-value super-blocks
            }
            let o = OverlayHost::random(kind, h, i, (h + 7 * i) as u64);
            let base = HostLayer::random(h, i, 3);
            let x = activations(nmax * h, 5);
            for act in [FfnActivation::Silu, FfnActivation::Gelu] {
                let (mut cl, mut gl) = (base.layer(&cpu, act), base.layer(&gpu, act));
                o.install(&mut cl).unwrap();
                o.install(&mut gl).unwrap();
                let mut cc = ForwardContext::new(&cl, 8).unwrap();
                let mut gc = ForwardContext::new(&gl, nmax).unwrap();
                let (cx, gx) = (upload_bf16(&cpu, &x[..8 * h]), upload_bf16(&gpu, &x));
                let mut worst = 0.0f64;
                let mut check = |what: String, got: Vec<f64>, want: Vec<f64>| {
                    assert!(
                        got.iter().all(|v| v.is_finite()),
                        "{what}: unwritten outputs"
                    );
                    let e = rel_l2(&got, &want);
                    worst = worst.max(e);
                    assert!(e <= 1e-2, "{what}: rel L2 {e}");
                };
                let tag = format!("{kind:?} ({h},{i}) {act:?}");
                // forward, and the f64 reference of the format's values for that token.
                gpu.memset(gc.output(), 0xFF, nmax * h * 2).unwrap();
                let got = download_bf16(&gpu, gl.forward(gx, &mut gc, 0).unwrap(), h);
                let f64_err = rel_l2(&got, &o.reference(&x[..h], act));
                assert!(f64_err <= 1e-2, "{tag} forward vs f64: {f64_err}");
                let want = download_bf16(&cpu, cl.forward(cx, &mut cc, 0).unwrap(), h);
                check(format!("{tag} forward"), got, want);
                for m in 1..=8 {
                    gpu.memset(gc.output(), 0xFF, nmax * h * 2).unwrap();
                    let before = gpu.launch_count();
                    let got = download_bf16(&gpu, gl.forward_km(gx, m, &mut gc, 0).unwrap(), m * h);
                    assert_eq!(gpu.launch_count() - before, gl.km_kernels(m).len() as u64);
                    let want =
                        download_bf16(&cpu, cl.forward_km(cx, m, &mut cc, 0).unwrap(), m * h);
                    check(format!("{tag} km m={m}"), got, want);
                }
                for k in [2usize, 3] {
                    let run = |l: &denseffn::layer::DenseFfnLayer, c: &mut ForwardContext, p| {
                        if k == 2 {
                            l.forward_k2(p, c, 0)
                        } else {
                            l.forward_k3(p, c, 0)
                        }
                        .unwrap()
                    };
                    gpu.memset(gc.output(), 0xFF, nmax * h * 2).unwrap();
                    let got = download_bf16(&gpu, run(&gl, &mut gc, gx), k * h);
                    let want = download_bf16(&cpu, run(&cl, &mut cc, cx), k * h);
                    check(format!("{tag} k{k}"), got, want);
                }
                for &n in ns {
                    gpu.memset(gc.output(), 0xFF, nmax * h * 2).unwrap();
                    let got = download_bf16(
                        &gpu,
                        gl.forward_prefill(gx, n, &mut gc, 0).unwrap(),
                        nmax * h,
                    );
                    assert!(
                        got[n * h..].iter().all(|v| v.is_nan()),
                        "{tag} N={n}: wrote past the last token"
                    );
                    let mut sample: Vec<usize> = vec![0, 1, n / 2, n.saturating_sub(2), n - 1];
                    sample.retain(|&t| t < n);
                    sample.sort();
                    sample.dedup();
                    let xs: Vec<f32> = sample
                        .iter()
                        .flat_map(|&t| x[t * h..(t + 1) * h].iter().copied())
                        .collect();
                    let want = download_bf16(
                        &cpu,
                        cl.forward_prefill(upload_bf16(&cpu, &xs), sample.len(), &mut cc, 0)
                            .unwrap(),
                        sample.len() * h,
                    );
                    let got_s: Vec<f64> = sample
                        .iter()
                        .flat_map(|&t| got[t * h..(t + 1) * h].iter().copied())
                        .collect();
                    check(format!("{tag} prefill N={n}"), got_s, want);
                }
                eprintln!("{tag}: forward, km 1..8, k2, k3, prefill {ns:?}: worst rel L2 vs CPU reference {worst:.2e}; forward vs f64 of the format's values {f64_err:.2e}");
            }
        }
    }
}

/// Two `ForwardContext`s on two created streams, driven from two threads at once over one
/// shared layer (NVFP4 and an overlay), give bit-for-bit the results of the same calls made one
/// after another on the default stream.
#[test]
fn two_streams_on_one_layer_match_serial_calls() {
    use denseffn::backend::Stream;
    use denseffn::layer::OverlayKind;
    let _memory = device_memory(false);
    let Some(gpu) = cuda() else { return };
    let (h, i) = if small() { (256, 512) } else { (4096, 14336) };
    let host = HostLayer::random(h, i, 71);
    for overlay in [None, Some(OverlayKind::Q4k)] {
        let mut layer = host.layer(&gpu, FfnActivation::Silu);
        if let Some(kind) = overlay {
            OverlayHost::random(kind, h, i, 72)
                .install(&mut layer)
                .unwrap();
        }
        let layer = Arc::new(layer);
        let n = 64usize;
        let xs: Vec<_> = (0..2)
            .map(|t| upload_bf16(&gpu, &activations(n * h, 80 + t)))
            .collect();
        // The calls each thread makes, in order: decode, km(5), prefill(n); 20 rounds (3 under
        // compute-sanitizer, whose racecheck runs them an order of magnitude slower).
        let rounds = if small() { 3 } else { 20 };
        let calls = |l: &denseffn::layer::DenseFfnLayer,
                     x: denseffn::backend::DevicePtr,
                     c: &mut ForwardContext,
                     s: u64|
         -> Vec<Vec<f64>> {
            let mut out = Vec::new();
            for _ in 0..rounds {
                let y = l.forward(x, c, s).unwrap();
                gpu.synchronize(s).unwrap();
                out.push(download_bf16(&gpu, y, h));
                let y = l.forward_km(x, 5, c, s).unwrap();
                gpu.synchronize(s).unwrap();
                out.push(download_bf16(&gpu, y, 5 * h));
                let y = l.forward_prefill(x, n, c, s).unwrap();
                gpu.synchronize(s).unwrap();
                out.push(download_bf16(&gpu, y, n * h));
            }
            out
        };
        let serial: Vec<Vec<Vec<f64>>> = xs
            .iter()
            .map(|&x| {
                let mut c = ForwardContext::new(&layer, n).unwrap();
                calls(&layer, x, &mut c, 0)
            })
            .collect();
        let concurrent: Vec<Vec<Vec<f64>>> = std::thread::scope(|sc| {
            let hs: Vec<_> = xs
                .iter()
                .map(|&x| {
                    let (layer, gpu) = (layer.clone(), gpu.clone());
                    sc.spawn(move || {
                        let stream = Stream::new(&gpu).unwrap();
                        let mut c = ForwardContext::new(&layer, n).unwrap();
                        calls(&layer, x, &mut c, stream.raw())
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for (t, (a, b)) in serial.iter().zip(&concurrent).enumerate() {
            assert!(a.iter().flatten().all(|v| v.is_finite()));
            assert_eq!(
                a, b,
                "{overlay:?} thread {t}: concurrent results differ from serial"
            );
        }
        eprintln!("{overlay:?} ({h}, {i}): 2 threads × 2 streams × 60 calls equal the serial calls bit for bit");
    }
}

/// NaN/±Inf in one token's activations reach that token's outputs on the GPU too (never masked
/// to finite values) and leave the other tokens of the call exactly as with clean input.
#[test]
fn non_finite_activations_propagate_on_the_gpu() {
    use denseffn::layer::OverlayKind;
    let _memory = device_memory(false);
    let Some(gpu) = cuda() else { return };
    let (h, i) = (256, 512);
    let host = HostLayer::random(h, i, 91);
    let clean = activations(3 * h, 92);
    for overlay in [
        None,
        Some(OverlayKind::Q2),
        Some(OverlayKind::Q4k),
        Some(OverlayKind::Fp8),
        Some(OverlayKind::Bf16),
    ] {
        let mut layer = host.layer(&gpu, FfnActivation::Silu);
        if let Some(kind) = overlay {
            OverlayHost::random(kind, h, i, 93)
                .install(&mut layer)
                .unwrap();
        }
        let mut ctx = ForwardContext::new(&layer, 3).unwrap();
        let run = |x: &[f32], ctx: &mut ForwardContext| -> Vec<Vec<f64>> {
            let xs = upload_bf16(&gpu, x);
            let a = download_bf16(&gpu, layer.forward(xs, ctx, 0).unwrap(), h);
            let b = download_bf16(&gpu, layer.forward_km(xs, 3, ctx, 0).unwrap(), 3 * h);
            let c = download_bf16(&gpu, layer.forward_prefill(xs, 3, ctx, 0).unwrap(), 3 * h);
            vec![a, b, c]
        };
        let want = run(&clean, &mut ctx);
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            let mut x = clean.clone();
            x[17] = bad;
            for (p, (y, w)) in run(&x, &mut ctx).iter().zip(&want).enumerate() {
                let n0 = y[..h].iter().filter(|v| !v.is_finite()).count();
                assert!(
                    n0 > h / 2,
                    "{overlay:?} path {p} {bad}: only {n0} of token 0's outputs non-finite"
                );
                assert_eq!(
                    &y[h..],
                    &w[h..],
                    "{overlay:?} path {p} {bad}: other tokens changed"
                );
            }
        }
    }
}

/// Runs every path of every weight set with both activations on small shapes and checks that
/// together they launch every kernel entry point the library has (the CPU backend's list): under
/// `run.sh sanitize` this is what puts every entry point through compute-sanitizer.
#[test]
fn every_kernel_entry_point_runs() {
    let _memory = device_memory(false);
    let Some(gpu) = cuda() else { return };
    let missed = kernels_no_path_launches(&gpu);
    assert!(
        missed.is_empty(),
        "entry points no path launched: {missed:?}"
    );
}

/// Tensor parallelism on the GPUs present (one on the H200 machine): every device a rank with
/// an NCCL communicator; every path's all-reduced output equals the unsharded layer's on the
/// first device (bit for bit with one rank, within rounding with several). Skips without
/// NCCL (`libnccl.so` on the loader path).
#[test]
fn tensor_parallel_ranks_with_nccl_match_the_unsharded_layer() {
    use denseffn::backend::DevicePtr;
    use denseffn::load::HostFfn;
    use denseffn::tp::{shard_layers, AllReduce, NcclAllReduce, ShardedFfnLayer};
    let _memory = device_memory(false);
    let Some(gpu0) = cuda() else { return };
    if !NcclAllReduce::available() {
        eprintln!("skipping tensor-parallel GPU test: libnccl.so not on the loader path");
        return;
    }
    let mut devs = vec![Arc::new(CudaBackend::new().unwrap())];
    while let Ok(d) = CudaBackend::with_ptx(devs.len() as i32, denseffn::PTX) {
        devs.push(Arc::new(d));
    }
    let (h, i) = if small() { (256, 1024) } else { (4096, 14336) };
    let world = devs.len();
    let nv = HostLayer::quantized(h, i, 81);
    let host = HostFfn::Nvfp4([nv.gate, nv.up, nv.down]);
    let n = 64;
    let x = activations(n * h, 82);
    type Run = fn(&ShardedFfnLayer, DevicePtr, &mut ForwardContext, u64) -> DevicePtr;
    let paths: [(&str, usize, Run); 4] = [
        ("forward", 1, |l, x, c, s| l.forward(x, c, s).unwrap()),
        ("forward_k2", 2, |l, x, c, s| l.forward_k2(x, c, s).unwrap()),
        ("forward_km", 8, |l, x, c, s| {
            l.forward_km(x, 8, c, s).unwrap()
        }),
        ("forward_prefill", 64, |l, x, c, s| {
            l.forward_prefill(x, 64, c, s).unwrap()
        }),
    ];
    for act in [FfnActivation::Silu, FfnActivation::Gelu] {
        // The unsharded layer on device 0.
        let whole = host.layer(&gpu0, act).unwrap();
        let mut ctx = ForwardContext::new(&whole, n).unwrap();
        let xg = upload_bf16(&gpu0, &x);
        let want: Vec<Vec<f64>> = vec![
            download_bf16(&gpu0, whole.forward(xg, &mut ctx, 0).unwrap(), h),
            download_bf16(&gpu0, whole.forward_k2(xg, &mut ctx, 0).unwrap(), 2 * h),
            download_bf16(&gpu0, whole.forward_km(xg, 8, &mut ctx, 0).unwrap(), 8 * h),
            download_bf16(
                &gpu0,
                whole.forward_prefill(xg, n, &mut ctx, 0).unwrap(),
                n * h,
            ),
        ];
        let gpus: Vec<Arc<dyn GpuBackend>> = devs
            .iter()
            .map(|d| d.clone() as Arc<dyn GpuBackend>)
            .collect();
        let comms = NcclAllReduce::group(&devs)
            .unwrap()
            .into_iter()
            .map(|c| Box::new(c) as Box<dyn AllReduce>)
            .collect();
        let ranks = shard_layers(&host, act, &gpus, comms).unwrap();
        let outs: Vec<Vec<Vec<f64>>> = std::thread::scope(|s| {
            let hs: Vec<_> = ranks
                .iter()
                .zip(&gpus)
                .map(|(rank, gpu)| {
                    let x = &x;
                    s.spawn(move || {
                        let mut ctx = ForwardContext::new(rank.layer(), n).unwrap();
                        let xs = upload_bf16(gpu, x);
                        let stream = gpu.create_stream().unwrap();
                        let o = paths
                            .iter()
                            .map(|(_, t, run)| {
                                let y = run(rank, xs, &mut ctx, stream);
                                gpu.synchronize(stream).unwrap();
                                download_bf16(gpu, y, t * h)
                            })
                            .collect();
                        gpu.destroy_stream(stream).unwrap();
                        o
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for (p, (name, _, _)) in paths.iter().enumerate() {
            let e = rel_l2(&outs[0][p], &want[p]);
            eprintln!(
                "tensor parallel, {world} rank(s), {act:?} {name}: rel L2 vs unsharded {e:.2e}"
            );
            if world == 1 {
                assert_eq!(outs[0][p], want[p], "{act:?} {name}");
            } else {
                assert!(e < 1e-2, "{act:?} {name}: {e}");
                for r in 1..world {
                    assert_eq!(outs[r][p], outs[0][p], "{act:?} {name}: rank {r} differs");
                }
            }
        }
    }
}

/// The Q4_K MMQ arm on the GPU: an NVFP4 (4096, 14336) layer finalized for it on both backends.
/// The requantized bytes agree with the CPU reference's, and prefill at N ∈ {1, 64, 512, 4096}
/// (sampled tokens) matches the CPU reference running the same arm; tails are masked (nothing
/// written past the last token). `DENSEFFN_GPU_TEST_SMALL=1`: small shapes.
#[test]
fn q4k_mmq_matches_cpu_reference() {
    use denseffn::layer::{PrefillArm, PrefillConfig};
    use denseffn::pack_q4k::Q4kHost;
    let _memory = device_memory(false);
    let Some(gpu) = cuda() else { return };
    let cpu: Arc<dyn GpuBackend> = Arc::new(CpuBackend::new());
    let ns = arm_ns(&[1, 64, 512, 4096]);
    let nmax = *ns.iter().max().unwrap();
    let on = PrefillConfig {
        q4k_mmq: true,
        nvfp4_mmq: false,
        w8a8: false,
    };
    for (h, i) in shapes(&[(4096, 14336)])
        .into_iter()
        .filter(|&(h, i)| h % 256 == 0 && i % 256 == 0)
    {
        let host = HostLayer::random(h, i, (5 * h + i) as u64);
        let x = activations(nmax * h, 97);
        for act in [FfnActivation::Silu, FfnActivation::Gelu] {
            let (mut cl, mut gl) = (host.layer(&cpu, act), host.layer(&gpu, act));
            cl.set_prefill_config(on);
            gl.set_prefill_config(on);
            cl.finalize_q4k_load(&cpu.clone(), h, i, 0).unwrap();
            gl.finalize_q4k_load(&gpu.clone(), h, i, 0).unwrap();
            assert_eq!(gl.prefill_arm().unwrap(), PrefillArm::Q4kMmq);
            assert_eq!(gl.footprint(), cl.footprint());
            if act == FfnActivation::Silu {
                let (cm, gm) = (cl.q4k_mmq_copies().unwrap(), gl.q4k_mmq_copies().unwrap());
                for (name, c, g) in [
                    ("gate", &cm.gate, &gm.gate),
                    ("up", &cm.up, &gm.up),
                    ("down", &cm.down, &gm.down),
                ] {
                    let (cc, gc) = (c.codes.to_vec().unwrap(), g.codes.to_vec().unwrap());
                    let (ch, gh) = (c.heads.to_vec().unwrap(), g.heads.to_vec().unwrap());
                    let diff = cc.iter().zip(&gc).filter(|(a, b)| a != b).count()
                        + ch.iter().zip(&gh).filter(|(a, b)| a != b).count();
                    eprintln!(
                        "({h}, {i}) {name}: requantized bytes differing GPU vs CPU: {diff} of {}",
                        cc.len() + ch.len()
                    );
                    assert!(
                        diff * 10_000 <= cc.len() + ch.len(),
                        "{name}: {diff} bytes differ"
                    );
                    // And the GPU's copies decode as valid Q4_K.
                    Q4kHost::from_mmq(g.rows, g.cols, &gc, &gh)
                        .unwrap()
                        .validate(name)
                        .unwrap();
                }
            }
            let mut cc = ForwardContext::new(&cl, 8).unwrap();
            let mut gc = ForwardContext::new(&gl, nmax).unwrap();
            let gx = upload_bf16(&gpu, &x);
            let mut worst = 0.0f64;
            let run = Prefill {
                gpu: &gpu,
                cpu: &cpu,
                x: &x,
                h,
                nmax,
                launches: 4,
                tol: 1e-2,
            };
            for &n in ns {
                let tag = format!("({h},{i}) {act:?}");
                worst = worst.max(run.check(&gl, &mut gc, &cl, &mut cc, gx, n, &tag));
            }
            eprintln!("({h}, {i}) {act:?}: q4k_mmq N={ns:?}: worst rel L2 vs CPU reference (sampled tokens) {worst:.2e}");
        }
    }
}

/// The load contract on the GPU: finalize_q4k_load, make the context, size a "KV cache" from
/// the free memory `cuMemGetInfo` reports (all of it but 256 MiB) and allocate it; prefill and
/// decode then allocate nothing (free memory does not drop) and the arm's result is right.
#[test]
fn q4k_mmq_finalize_then_kv_cache_then_no_allocation_on_the_gpu() {
    use denseffn::layer::{PrefillArm, PrefillConfig};
    let _memory = device_memory(true);
    let Some(gpu) = cuda() else { return };
    let (h, i) = if small() { (256, 512) } else { (4096, 14336) };
    let host = HostLayer::random(h, i, 77);
    let mut layer = host.layer(&gpu, FfnActivation::Silu);
    layer.set_prefill_config(PrefillConfig {
        q4k_mmq: true,
        nvfp4_mmq: false,
        w8a8: false,
    });
    let baseline = layer.footprint().total();
    let (free0, _) = gpu.mem_info().unwrap();
    layer.finalize_q4k_load(&gpu.clone(), h, i, 0).unwrap();
    let fp = layer.footprint();
    assert_eq!((fp.total(), fp.t_copies), (baseline, 0));
    assert_eq!(layer.prefill_arm().unwrap(), PrefillArm::Q4kMmq);
    let (free1, _) = gpu.mem_info().unwrap();
    eprintln!(
        "finalize_q4k_load: free {free0} -> {free1} bytes (MMQ copies {} bytes)",
        fp.mmq_copies
    );
    let n = 512;
    let x = activations(n * h, 78);
    let y = kv_cache_then_no_allocation(&gpu, &layer, &x, n);
    assert!(y.iter().all(|v| v.is_finite()));
}

/// A test's "KV cache": freed when dropped, also when an assertion fails while it holds the
/// device's free memory (the tests after it would otherwise find none).
struct KvCache(Arc<dyn GpuBackend>, denseffn::backend::DevicePtr);

impl Drop for KvCache {
    fn drop(&mut self) {
        let _ = self.0.free(self.1);
    }
}

/// After a finalize: makes the context, lets a "KV cache" take all free memory but 256 MiB,
/// then runs prefill (N = `n`, returned), decode, km(8) and prefill(1), asserting that free
/// memory did not drop (no call allocated).
fn kv_cache_then_no_allocation(
    gpu: &Arc<dyn GpuBackend>,
    layer: &denseffn::layer::DenseFfnLayer,
    x: &[f32],
    n: usize,
) -> Vec<f64> {
    let h = layer.hidden();
    let mut ctx = ForwardContext::new(layer, n).unwrap();
    let xg = upload_bf16(gpu, x);
    let (free, _) = gpu.mem_info().unwrap();
    let slack = 256 << 20;
    let kv = KvCache(gpu.clone(), gpu.alloc(free.saturating_sub(slack)).unwrap());
    let (before, _) = gpu.mem_info().unwrap();
    let y = download_bf16(
        gpu,
        layer.forward_prefill(xg, n, &mut ctx, 0).unwrap(),
        n * h,
    );
    layer.forward(xg, &mut ctx, 0).unwrap();
    layer.forward_km(xg, 8, &mut ctx, 0).unwrap();
    layer.forward_prefill(xg, 1, &mut ctx, 0).unwrap();
    gpu.synchronize(0).unwrap();
    let (after, _) = gpu.mem_info().unwrap();
    assert!(
        after >= before,
        "free memory dropped from {before} to {after}: a call allocated"
    );
    drop(kv);
    eprintln!(
        "KV cache of {} bytes took the free memory; prefill N={n} and decode allocated nothing",
        free - slack
    );
    y
}

/// The NVFP4 W4A4 MMQ arm on the GPU: an NVFP4 (4096, 14336) layer finalized for it on both
/// backends. The W4A4 copies are byte-identical, `quantize_nvfp4_act` gives the CPU
/// reference's bytes (codes and factors), and prefill at N ∈ {1, 64, 512, 4096} (sampled
/// tokens) matches the CPU reference running the same arm (3 launches); tails are masked
/// (nothing written past the last token). `DENSEFFN_GPU_TEST_SMALL=1`: small shapes.
#[test]
fn nvfp4_mmq_matches_cpu_reference() {
    use denseffn::layer::{nvfp4_mmq_kernels, PrefillArm, PrefillConfig};
    use denseffn_device::params::NVFP4_ACT_THREADS;
    let _memory = device_memory(false);
    let Some(gpu) = cuda() else { return };
    let cpu: Arc<dyn GpuBackend> = Arc::new(CpuBackend::new());
    let ns = arm_ns(&[1, 64, 512, 4096]);
    let nmax = *ns.iter().max().unwrap();
    let on = PrefillConfig {
        q4k_mmq: false,
        nvfp4_mmq: true,
        w8a8: false,
    };
    for (h, i) in shapes(&[(4096, 14336)])
        .into_iter()
        .filter(|&(h, _)| h % 256 == 0)
    {
        let host = HostLayer::random(h, i, (7 * h + i) as u64);
        let x = activations(nmax * h, 98);
        // The activation quantization: the same bytes on both backends.
        let quantized = |g: &Arc<dyn GpuBackend>, n: usize| {
            let q = Quantize {
                kernel: nvfp4_mmq_kernels::QUANTIZE,
                threads: NVFP4_ACT_THREADS,
                smem: 32,
                ds_bytes: n * h / 16 * 4,
            };
            q.run(g, &x[..n * h], n, h)
        };
        let nq = nmax.min(64);
        let (cq, cd) = quantized(&cpu, nq);
        let (gq, gd) = quantized(&gpu, nq);
        let diff = cq.iter().zip(&gq).filter(|(a, b)| a != b).count();
        let fdiff = cd
            .chunks_exact(4)
            .zip(gd.chunks_exact(4))
            .filter(|(a, b)| a != b)
            .count();
        eprintln!(
            "({h}, {i}) quantize_nvfp4_act, {nq} tokens: codes differing GPU vs CPU {diff} of {}, factors {fdiff} of {}",
            cq.len(),
            cd.len() / 4
        );
        assert_eq!((diff, fdiff), (0, 0), "activation quantization differs");
        for act in [FfnActivation::Silu, FfnActivation::Gelu] {
            let (mut cl, mut gl) = (host.layer(&cpu, act), host.layer(&gpu, act));
            cl.set_prefill_config(on);
            gl.set_prefill_config(on);
            cl.finalize_nvfp4_mmq_load(&cpu.clone(), h, i, 0).unwrap();
            gl.finalize_nvfp4_mmq_load(&gpu.clone(), h, i, 0).unwrap();
            assert_eq!(gl.prefill_arm().unwrap(), PrefillArm::Nvfp4Mmq);
            assert_eq!(gl.footprint(), cl.footprint());
            if act == FfnActivation::Silu {
                let (cm, gm) = (
                    cl.nvfp4_mmq_copies().unwrap(),
                    gl.nvfp4_mmq_copies().unwrap(),
                );
                for (c, g) in [(&cm.gate, &gm.gate), (&cm.up, &gm.up)] {
                    assert_eq!(c.codes.to_vec().unwrap(), g.codes.to_vec().unwrap());
                    assert_eq!(c.scales.to_vec().unwrap(), g.scales.to_vec().unwrap());
                }
            }
            let mut cc = ForwardContext::new(&cl, 8).unwrap();
            let mut gc = ForwardContext::new(&gl, nmax).unwrap();
            let gx = upload_bf16(&gpu, &x);
            let mut worst = 0.0f64;
            let run = Prefill {
                gpu: &gpu,
                cpu: &cpu,
                x: &x,
                h,
                nmax,
                launches: 3,
                tol: 1e-2,
            };
            for &n in ns {
                let tag = format!("({h},{i}) {act:?}");
                worst = worst.max(run.check(&gl, &mut gc, &cl, &mut cc, gx, n, &tag));
            }
            eprintln!("({h}, {i}) {act:?}: nvfp4_mmq N={ns:?}: worst rel L2 vs CPU reference (sampled tokens) {worst:.2e}");
        }
    }
}

/// The load contract on the GPU for the W4A4 arm: finalize_nvfp4_mmq_load, make the context,
/// size a "KV cache" from the free memory `cuMemGetInfo` reports (all of it but 256 MiB) and
/// allocate it; prefill and decode then allocate nothing and the arm's result is right.
#[test]
fn nvfp4_mmq_finalize_then_kv_cache_then_no_allocation_on_the_gpu() {
    use denseffn::layer::{PrefillArm, PrefillConfig};
    let _memory = device_memory(true);
    let Some(gpu) = cuda() else { return };
    let (h, i) = if small() { (256, 512) } else { (4096, 14336) };
    let host = HostLayer::random(h, i, 79);
    let mut layer = host.layer(&gpu, FfnActivation::Silu);
    layer.set_prefill_config(PrefillConfig {
        q4k_mmq: false,
        nvfp4_mmq: true,
        w8a8: false,
    });
    let baseline = layer.footprint().total();
    layer
        .finalize_nvfp4_mmq_load(&gpu.clone(), h, i, 0)
        .unwrap();
    let fp = layer.footprint();
    assert_eq!(fp.total(), baseline);
    assert_eq!(layer.prefill_arm().unwrap(), PrefillArm::Nvfp4Mmq);
    let n = 512;
    let x = activations(n * h, 80);
    let y = kv_cache_then_no_allocation(&gpu, &layer, &x, n);
    // Against the f64 reference on a few tokens (the arm's W4A4 bound, tests/cpu_nvfp4_mmq.rs).
    let toks = [0usize, n / 2, n - 1];
    let xs: Vec<f32> = toks
        .iter()
        .flat_map(|&t| x[t * h..(t + 1) * h].iter().copied())
        .collect();
    let ys: Vec<f64> = toks
        .iter()
        .flat_map(|&t| y[t * h..(t + 1) * h].iter().copied())
        .collect();
    let e = rel_l2(&ys, &host.reference(&xs, FfnActivation::Silu));
    eprintln!("nvfp4_mmq N={n} vs f64 reference (3 tokens): rel L2 {e:.3}");
    assert!(e < 0.16, "rel L2 {e}");
}

/// The FP8 × FP8 prefill arm (`w8a8_gemm`) on the GPU: the activation quantization gives the
/// CPU reference's codes (up to the sign of zero) and scales, and prefill (4 launches) matches
/// the CPU reference running the same arm within 4e-2 on sampled tokens, for every N, both
/// activations, a shape whose K is not a multiple of 128; vs the f64 reference of the FP8
/// values, within the arm's measured bound (8e-2, `tests/cpu_overlays.rs`).
#[test]
fn w8a8_matches_cpu_reference() {
    use denseffn::layer::{w8a8_kernels, OverlayKind, PrefillArm, PrefillConfig};
    use denseffn_device::params::Q8_THREADS;
    let _memory = device_memory(false);
    let Some(gpu) = cuda() else { return };
    let cpu: Arc<dyn GpuBackend> = Arc::new(CpuBackend::new());
    let ns = arm_ns(&[1, 64, 511, 4096]);
    let nmax = *ns.iter().max().unwrap();
    let on = PrefillConfig {
        w8a8: true,
        ..PrefillConfig::default()
    };
    for (h, i) in shapes(&[(4096, 14336), (4160, 14400)]) {
        let o = OverlayHost::random(OverlayKind::Fp8, h, i, (3 * h + i) as u64);
        let base = HostLayer::random(h, i, 4);
        let x = activations(nmax * h, 99);
        let quantized = |g: &Arc<dyn GpuBackend>, n: usize| {
            let q = Quantize {
                kernel: w8a8_kernels::QUANTIZE,
                threads: Q8_THREADS,
                smem: Q8_THREADS / 32 * 4,
                ds_bytes: n * 4,
            };
            q.run(g, &x[..n * h], n, h)
        };
        let nq = nmax.min(64);
        let (cq, cd) = quantized(&cpu, nq);
        let (gq, gd) = quantized(&gpu, nq);
        // Codes equal, except that the GPU keeps the sign of a value that rounds to zero.
        let diff = cq
            .iter()
            .zip(&gq)
            .filter(|&(&a, &b)| a != b && (a | b) & 0x7F != 0)
            .count();
        eprintln!(
            "({h}, {i}) quantize_e4m3_act, {nq} tokens: codes differing GPU vs CPU {diff} of {}",
            cq.len()
        );
        assert_eq!(diff, 0, "activation codes differ");
        assert_eq!(cd, gd, "activation scales differ");
        for act in [FfnActivation::Silu, FfnActivation::Gelu] {
            let (mut cl, mut gl) = (base.layer(&cpu, act), base.layer(&gpu, act));
            for l in [&mut cl, &mut gl] {
                l.set_prefill_config(on);
                o.install(l).unwrap();
            }
            assert_eq!(gl.prefill_arm().unwrap(), PrefillArm::W8a8Gemm);
            let mut cc = ForwardContext::new(&cl, 8).unwrap();
            let mut gc = ForwardContext::new(&gl, nmax).unwrap();
            let gx = upload_bf16(&gpu, &x);
            let run = Prefill {
                gpu: &gpu,
                cpu: &cpu,
                x: &x,
                h,
                nmax,
                launches: 4,
                // The intermediate is quantized again: where the GPU's bf16 `act(g)·u` differs
                // from the CPU's by an ulp, its E4M3 code can flip by one step (2^-3 relative);
                // measured 1.6e-2 on (4096, 14336), 8e-3 on small shapes.
                tol: 4e-2,
            };
            let mut worst = 0.0f64;
            for &n in ns {
                let tag = format!("w8a8 ({h},{i}) {act:?}");
                worst = worst.max(run.check(&gl, &mut gc, &cl, &mut cc, gx, n, &tag));
            }
            let y = download_bf16(&gpu, gl.forward_prefill(gx, 3, &mut gc, 0).unwrap(), 3 * h);
            let e = rel_l2(&y, &o.reference(&x[..3 * h], act));
            eprintln!("({h}, {i}) {act:?}: w8a8_gemm N={ns:?}: worst rel L2 vs CPU reference (sampled tokens) {worst:.2e}; vs f64 (3 tokens) {e:.2e}");
            assert!(e < 8e-2, "w8a8 vs f64: rel L2 {e}");
        }
    }
}

/// The token counts a prefill-arm test runs: `full`, or small ones (with a partial token block)
/// under `DENSEFFN_GPU_TEST_SMALL=1`.
fn arm_ns(full: &'static [usize]) -> &'static [usize] {
    if small() {
        &[1, 7, 64, 130]
    } else {
        full
    }
}

/// One activation-quantization launch of a prefill arm: one block of `threads` per token.
struct Quantize {
    kernel: &'static str,
    threads: u32,
    smem: u32,
    /// Bytes of scales the kernel writes for the call.
    ds_bytes: usize,
}

impl Quantize {
    /// Quantizes `x` (`[n][h]` f32, uploaded as bf16) on `g`: (code bytes, scale bytes).
    fn run(&self, g: &Arc<dyn GpuBackend>, x: &[f32], n: usize, h: usize) -> (Vec<u8>, Vec<u8>) {
        use denseffn::backend::Launch;
        use denseffn_device::params::{ParamBlock, Q8Params};
        let xd = upload_bf16(g, x);
        let (qs, ds) = (g.alloc(n * h).unwrap(), g.alloc(self.ds_bytes).unwrap());
        let p = Q8Params {
            x: xd.0,
            qs: qs.0,
            ds: ds.0,
            tokens: n as u32,
            k: h as u32,
        };
        let launch = Launch {
            kernel: self.kernel,
            grid: (n as u32, 1, 1),
            block: (self.threads, 1, 1),
            smem: self.smem,
            params: p.as_bytes(),
        };
        g.launch(&launch, 0).unwrap();
        g.synchronize(0).unwrap();
        let (mut q, mut d) = (vec![0u8; n * h], vec![0u8; self.ds_bytes]);
        g.download(&mut q, qs).unwrap();
        g.download(&mut d, ds).unwrap();
        for p in [xd, qs, ds] {
            g.free(p).unwrap();
        }
        (q, d)
    }
}

/// One prefill arm's GPU run checked against the CPU reference running the same arm.
struct Prefill<'a> {
    gpu: &'a Arc<dyn GpuBackend>,
    cpu: &'a Arc<dyn GpuBackend>,
    /// Input tokens, `[nmax][h]`.
    x: &'a [f32],
    h: usize,
    nmax: usize,
    /// Launches the arm makes per call.
    launches: u64,
    /// Largest relative L2 error allowed against the CPU reference.
    tol: f64,
}

impl Prefill<'_> {
    /// Runs `n` tokens on the GPU layer `gl` (output poisoned first): the launch count, every
    /// token written, nothing past the last, and sampled tokens (first, last, middle) within
    /// `tol` relative L2 of the CPU layer `cl`. Returns that error.
    #[allow(clippy::too_many_arguments)]
    fn check(
        &self,
        gl: &denseffn::layer::DenseFfnLayer,
        gc: &mut ForwardContext,
        cl: &denseffn::layer::DenseFfnLayer,
        cc: &mut ForwardContext,
        gx: denseffn::backend::DevicePtr,
        n: usize,
        tag: &str,
    ) -> f64 {
        let (gpu, cpu, x, h, nmax) = (self.gpu, self.cpu, self.x, self.h, self.nmax);
        gpu.memset(gc.output(), 0xFF, nmax * h * 2).unwrap();
        let before = gpu.launch_count();
        let y = gl.forward_prefill(gx, n, gc, 0).unwrap();
        assert_eq!(
            gpu.launch_count() - before,
            self.launches,
            "{tag} N={n}: launches"
        );
        let got = download_bf16(gpu, y, nmax * h);
        assert!(
            got[..n * h].iter().all(|v| v.is_finite()),
            "{tag} N={n}: unwritten outputs"
        );
        assert!(
            got[n * h..].iter().all(|v| v.is_nan()),
            "{tag} N={n}: wrote past the last token"
        );
        let mut sample: Vec<usize> = vec![0, 1, 2, n / 3, n / 2, n.saturating_sub(2), n - 1];
        sample.retain(|&t| t < n);
        sample.sort();
        sample.dedup();
        let xs: Vec<f32> = sample
            .iter()
            .flat_map(|&t| x[t * h..(t + 1) * h].iter().copied())
            .collect();
        let want = download_bf16(
            cpu,
            cl.forward_prefill(upload_bf16(cpu, &xs), sample.len(), cc, 0)
                .unwrap(),
            sample.len() * h,
        );
        let got_s: Vec<f64> = sample
            .iter()
            .flat_map(|&t| got[t * h..(t + 1) * h].iter().copied())
            .collect();
        let e = rel_l2(&got_s, &want);
        assert!(
            e <= self.tol,
            "{tag} N={n}: rel L2 {e} vs the CPU reference on tokens {sample:?}"
        );
        e
    }
}

/// A launch's parameter block must be exactly the size the kernel declares (the backend passes
/// it by pointer and the driver copies the declared size): a short or long block is a clear
/// `Error::Invalid`, on the CPU reference and (nothing enqueued) on the GPU.
#[test]
fn a_parameter_block_of_the_wrong_size_is_refused() {
    use denseffn::backend::Launch;
    use denseffn::Error;
    use denseffn_device::params::{GemvParams, ParamBlock};
    let cpu: Arc<dyn GpuBackend> = Arc::new(CpuBackend::new());
    let mut backends = vec![cpu];
    backends.extend(cuda());
    let p = GemvParams::default();
    let bytes = p.as_bytes();
    for (b, backend) in backends.iter().enumerate() {
        for params in [
            &bytes[..bytes.len() - 8],
            &[bytes, &[0u8; 8][..]].concat()[..],
        ] {
            let l = Launch {
                kernel: "bf16_gemv",
                grid: (1, 1, 1),
                block: (256, 1, 1),
                smem: 0,
                params,
            };
            let before = backend.launch_count();
            let r = backend.launch(&l, 0);
            assert!(
                matches!(r, Err(Error::Invalid(_))),
                "{}: {r:?}",
                params.len()
            );
            // CUDA counts what it enqueued (the CPU reference counts attempts).
            if b > 0 {
                assert_eq!(backend.launch_count(), before);
            }
        }
    }
}
