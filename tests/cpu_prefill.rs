//! forward_prefill on the CPU reference backend: numerics, the dispatch table, the timer lines.
mod common;
use common::*;
use denseffn::backend::{CpuBackend, GpuBackend};
use denseffn::layer::{DenseFfnLayer, DenseFfnWeights, FfnActivation, ForwardContext, PrefillArm};
use denseffn::reference::rel_l2;
use denseffn::Error;
use denseffn_device::params::gemm_shape;
use std::io::Write;
use std::sync::{Arc, Mutex};

const H: usize = 192;
const I: usize = 320;

#[test]
fn prefill_matches_reference_for_token_counts_with_tails() {
    let host = HostLayer::quantized(H, I, 31);
    let x = activations(130 * H, 37);
    for act in [FfnActivation::Silu, FfnActivation::Gelu] {
        let want = host.reference(&x, act);
        let gpu: Arc<dyn GpuBackend> = Arc::new(CpuBackend::new());
        let layer = host.layer(&gpu, act);
        assert_eq!(layer.prefill_arm().unwrap(), PrefillArm::Nvfp4TM128);
        let mut ctx = ForwardContext::new(&layer, 130).unwrap();
        let xs = upload_bf16(&gpu, &x);
        for n in [1usize, 7, 64, 65, 130] {
            gpu.memset(ctx.output(), 0xFF, 130 * H * 2).unwrap();
            let before = gpu.launch_count();
            let got = download_bf16(
                &gpu,
                layer.forward_prefill(xs, n, &mut ctx, 0).unwrap(),
                130 * H,
            );
            assert_eq!(gpu.launch_count() - before, 2);
            let err = rel_l2(&got[..n * H], &want[..n * H]);
            assert!(err < 1e-2, "{act:?} N={n}: rel L2 {err}");
            // Nothing past the last token is written (still the 0xFFFF poison, a NaN).
            assert!(
                got[n * H..].iter().all(|v| v.is_nan()),
                "{act:?} N={n}: wrote past the end"
            );
        }
    }
}

/// A down GEMM whose grid fills less than half the machine splits K (one launch still, the
/// `_splitk` entry point): with intermediate 4096 (64 chunks) and a 256-row hidden, every N
/// here has at most 4 tiles, so down runs 4 splits of 16 chunks, each tile summed by its last
/// block. Tails, poison and the f64 reference as above; the counters are zero again after each call (the CPU backend
/// refuses a split launch whose counters are not).
#[test]
fn prefill_splits_k_of_a_small_down_grid() {
    let (h, i) = (256, 4096);
    let host = HostLayer::quantized(h, i, 41);
    let x = activations(130 * h, 43);
    let want = host.reference(&x, FfnActivation::Silu);
    let (cpu, gpu) = cpu_backend();
    let layer = host.layer(&gpu, FfnActivation::Silu);
    let mut ctx = ForwardContext::new(&layer, 130).unwrap();
    let xs = upload_bf16(&gpu, &x);
    for n in [1usize, 65, 130, 7] {
        gpu.memset(ctx.output(), 0xFF, 130 * h * 2).unwrap();
        let got = download_bf16(
            &gpu,
            layer.forward_prefill(xs, n, &mut ctx, 0).unwrap(),
            130 * h,
        );
        let shape = gemm_shape("gemm_nvfp4_t_down_splitk", false).unwrap();
        let grid = Some((
            (h as u32).div_ceil(shape.rows),
            (n as u32).div_ceil(shape.tokens),
            4,
        ));
        assert_eq!(cpu.last_grid("gemm_nvfp4_t_down_splitk"), grid);
        assert_eq!(layer.prefill_kernels(n)[1], "gemm_nvfp4_t_down_splitk");
        let err = rel_l2(&got[..n * h], &want[..n * h]);
        assert!(err < 1e-2, "N={n}: rel L2 {err}");
        assert!(
            got[n * h..].iter().all(|v| v.is_nan()),
            "N={n}: wrote past the end"
        );
    }
    // The gate+up kernel never splits, nor does the plain down entry point ever run here.
    assert_eq!(cpu.last_grid("gemm_nvfp4_t_gate_up_act").unwrap().2, 1);
    assert_eq!(cpu.last_grid("gemm_nvfp4_t_down"), None);

    // A module without the split entry point runs the plain one over all of K.
    let cpu = Arc::new(CpuBackend::new().without_kernels(&["gemm_nvfp4_t_down_splitk"]));
    let gpu: Arc<dyn GpuBackend> = cpu.clone();
    let layer = host.layer(&gpu, FfnActivation::Silu);
    let mut ctx = ForwardContext::new(&layer, 130).unwrap();
    let xs = upload_bf16(&gpu, &x);
    let got = download_bf16(
        &gpu,
        layer.forward_prefill(xs, 65, &mut ctx, 0).unwrap(),
        65 * h,
    );
    assert!(rel_l2(&got, &want[..65 * h]) < 1e-2);
    let shape = gemm_shape("gemm_nvfp4_t_down", false).unwrap();
    let grid = (
        (h as u32).div_ceil(shape.rows),
        65u32.div_ceil(shape.tokens),
        1,
    );
    assert_eq!(cpu.last_grid("gemm_nvfp4_t_down"), Some(grid));
    assert_eq!(layer.prefill_kernels(65)[1], "gemm_nvfp4_t_down");
}

/// BF16's gate+up GEMM splits K over the tiles of its grid's last, partial wave
/// (`bf16_gemm_gate_up_act_splitk`, `plan::gemm_tail_split`), here on a backend that answers 4
/// SMs: h = 2048 (32 chunks: 2 splits), i = 256 (2 row blocks). N = 65: 2 tiles, both split;
/// N = 260: 6 tiles, 4 whole and 2 split in one launch; N = 130 runs in cluster pairs
/// (`bf16_gemms_run_in_cluster_pairs_over_even_token_blocks`). The CPU backend checks the launch (the persistent grid of `params::gemm_grid`,
/// workspace, counters zero at launch); the
/// result against the f64 FFN of the overlay's weights, the same bits on a second call, and
/// nothing written past the last token.
#[test]
fn bf16_gate_up_splits_k_over_its_last_wave() {
    use denseffn::layer::OverlayKind;
    let (h, i) = (2048, 256);
    let o = OverlayHost::random(OverlayKind::Bf16, h, i, 51);
    let x = activations(260 * h, 53);
    let want = o.reference(&x, FfnActivation::Silu);
    let cpu = Arc::new(CpuBackend::new().with_sm_count(4));
    let gpu: Arc<dyn GpuBackend> = cpu.clone();
    let mut layer = HostLayer::random(h, i, 55).layer(&gpu, FfnActivation::Silu);
    o.install(&mut layer).unwrap();
    let mut ctx = ForwardContext::new(&layer, 260).unwrap();
    let xs = upload_bf16(&gpu, &x);
    // N = 130: two token blocks, so the cluster-pair form (below); N = 65 and 260 are odd.
    assert_eq!(layer.prefill_kernels(130)[0], "bf16_gemm_gate_up_act_x2");
    for n in [65usize, 260] {
        assert_eq!(
            layer.prefill_kernels(n)[0],
            "bf16_gemm_gate_up_act_splitk",
            "N={n}"
        );
        let mut runs = Vec::new();
        for _ in 0..if n == 260 { 2 } else { 1 } {
            gpu.memset(ctx.output(), 0xFF, 260 * h * 2).unwrap();
            let y = layer.forward_prefill(xs, n, &mut ctx, 0).unwrap();
            runs.push(download_bf16(&gpu, y, 260 * h));
        }
        // Persistent: one block an SM over the units, the whole tiles then 2 a split tile
        // (N = 65: 0 + 2 × 2; N = 260: 4 + 2 × 2).
        let tiles = 2 * n.div_ceil(128) as u32;
        let from = tiles - tiles % 4;
        let units = from + (tiles - from) * 2;
        assert_eq!(units, if n == 65 { 4 } else { 8 });
        let grid = (units.min(4), 1, 1);
        assert_eq!(cpu.last_grid("bf16_gemm_gate_up_act_splitk"), Some(grid));
        let err = rel_l2(&runs[0][..n * h], &want[..n * h]);
        assert!(err < 1e-2, "N={n}: rel L2 {err}");
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(
            bits(&runs[0]),
            bits(runs.last().unwrap()),
            "N={n}: runs differ"
        );
        assert!(
            runs[0][n * h..].iter().all(|v| v.is_nan()),
            "N={n}: wrote past the end"
        );
    }
    // A grid capped at 3 blocks (`set_gemm_grid_cap`): the launch says so, the result is the
    // same bits.
    let whole = download_bf16(
        &gpu,
        layer.forward_prefill(xs, 260, &mut ctx, 0).unwrap(),
        260 * h,
    );
    layer.set_gemm_grid_cap(std::num::NonZeroU32::new(3));
    let capped = download_bf16(
        &gpu,
        layer.forward_prefill(xs, 260, &mut ctx, 0).unwrap(),
        260 * h,
    );
    assert_eq!(
        cpu.last_grid("bf16_gemm_gate_up_act_splitk"),
        Some((3, 1, 1))
    );
    assert_eq!(cpu.last_grid("bf16_gemm"), Some((3, 1, 1)));
    assert!(whole
        .iter()
        .zip(&capped)
        .all(|(a, b)| a.to_bits() == b.to_bits()));
}

/// Over an even number of 128-token blocks the BF16 GEMMs run their cluster-pair (`_x2`) forms
/// (two blocks a cluster, a unit two tiles of adjacent token blocks sharing the weight chunks):
/// on 4 SMs (2 clusters), h = 2048, i = 384, N = 256: gate+up 3 units (3 row blocks × one token
/// pair), 2 whole and the last split 2 ways (4 blocks); down 8 units, none split (4 blocks).
/// The result matches the f64 FFN; a grid capped at 1 block launches one pair with the same
/// plan; an odd number of token blocks or a module without the `_x2` kernels runs the plain
/// forms.
#[test]
fn bf16_gemms_run_in_cluster_pairs_over_even_token_blocks() {
    use denseffn::layer::OverlayKind;
    let (h, i) = (2048, 384);
    let o = OverlayHost::random(OverlayKind::Bf16, h, i, 61);
    let x = activations(384 * h, 63);
    let want = o.reference(&x, FfnActivation::Silu);
    let run = |cpu: CpuBackend, n: usize, cap: Option<u32>| {
        let cpu = Arc::new(cpu.with_sm_count(4));
        let gpu: Arc<dyn GpuBackend> = cpu.clone();
        let mut layer = HostLayer::random(h, i, 65).layer(&gpu, FfnActivation::Silu);
        o.install(&mut layer).unwrap();
        layer.set_gemm_grid_cap(cap.and_then(std::num::NonZeroU32::new));
        let mut ctx = ForwardContext::new(&layer, 384).unwrap();
        let y = layer
            .forward_prefill(upload_bf16(&gpu, &x), n, &mut ctx, 0)
            .unwrap();
        let got = download_bf16(&gpu, y, n * h);
        let err = rel_l2(&got, &want[..n * h]);
        assert!(err < 1e-2, "N={n} cap {cap:?}: rel L2 {err}");
        (cpu, layer.prefill_kernels(n))
    };
    let (cpu, kernels) = run(CpuBackend::new(), 256, None);
    assert_eq!(kernels, ["bf16_gemm_gate_up_act_splitk_x2", "bf16_gemm_x2"]);
    assert_eq!(
        cpu.last_grid("bf16_gemm_gate_up_act_splitk_x2"),
        Some((4, 1, 1))
    );
    assert_eq!(cpu.last_grid("bf16_gemm_x2"), Some((4, 1, 1)));
    let (_, kernels) = run(CpuBackend::new(), 384, None);
    assert_eq!(kernels, ["bf16_gemm_gate_up_act_splitk", "bf16_gemm"]);
    // A grid cap does not change the plan; a cap of 1 still launches one pair.
    let (cpu, kernels) = run(CpuBackend::new(), 256, Some(1));
    assert_eq!(kernels, ["bf16_gemm_gate_up_act_splitk_x2", "bf16_gemm_x2"]);
    assert_eq!(cpu.last_grid("bf16_gemm_x2"), Some((2, 1, 1)));
    let plain = CpuBackend::new().without_kernels(&[
        "bf16_gemm_gate_up_act_x2",
        "bf16_gemm_gate_up_act_splitk_x2",
        "bf16_gemm_x2",
        "bf16_gemm_splitk_x2",
    ]);
    let (_, kernels) = run(plain, 256, None);
    assert_eq!(kernels, ["bf16_gemm_gate_up_act_splitk", "bf16_gemm"]);
}

/// The BF16 GEMMs read their activations through a TMA tensor map in their parameter block
/// (`GemmParams::xmap`): the PTX declares those blocks 128-byte aligned (the map's alignment),
/// bad map specs are refused, and the CPU reference reads through the map, so a launch
/// without one fails instead of reading `x` behind the map's back.
#[test]
fn bf16_gemms_read_activations_through_their_tile_map() {
    use denseffn::backend::{DevicePtr, Launch, TileMapSpec};
    use denseffn_device::params::{GemmParams, ParamBlock};
    for k in [
        "bf16_gemm_gate_up_act",
        "bf16_gemm_gate_up_act_splitk",
        "bf16_gemm",
        "bf16_gemm_splitk",
    ] {
        let decl = format!(".param .align 128 .b8 {k}_param_0[264]");
        assert!(denseffn::PTX.contains(&decl), "{k}: no `{decl}` in the PTX");
        assert!(gemm_shape(k, k.contains("gate_up")).unwrap().x_map, "{k}");
        // The cluster-pair form: the same block, declared a 2-block cluster kernel.
        let x2 = format!("{k}_x2");
        let decl = format!(
            ".param .align 128 .b8 {x2}_param_0[264]\n)\n.maxntid 384, 1, 1\n.minnctapersm 1\n\
             .explicitcluster\n.reqnctapercluster 2, 1, 1\n{{"
        );
        let entry = denseffn::PTX
            .find(&format!(".entry {x2}("))
            .unwrap_or_else(|| panic!("no entry {x2}"));
        let header: String = denseffn::PTX[entry..]
            .lines()
            .take(8)
            .map(|l| l.split("//").next().unwrap().trim_end().to_string() + "\n")
            .collect();
        assert!(header.contains(&decl), "{x2}: header {header:?}");
        assert_eq!(gemm_shape(&x2, k.contains("gate_up")).unwrap().cluster, 2);
    }
    let gpu: Arc<dyn GpuBackend> = Arc::new(CpuBackend::new());
    let x = gpu.alloc(64 * 256 * 2).unwrap();
    let good = TileMapSpec {
        base: x,
        rows: 64,
        cols: 256,
        box_rows: 128,
        box_cols: 64,
    };
    assert!(gpu.encode_tile_map(&good).is_ok());
    for bad in [
        TileMapSpec {
            base: x.offset(8),
            ..good
        },
        TileMapSpec {
            base: DevicePtr::NULL,
            ..good
        },
        TileMapSpec { rows: 0, ..good },
        TileMapSpec { cols: 4, ..good },
        TileMapSpec {
            box_rows: 257,
            ..good
        },
        TileMapSpec {
            box_cols: 32,
            ..good
        },
    ] {
        assert!(
            matches!(gpu.encode_tile_map(&bad), Err(Error::Invalid(_))),
            "{bad:?}"
        );
    }
    // A bf16_gemm launch whose map was never encoded.
    let (n, k, t) = (256u32, 256u32, 64u32);
    let w = gpu.alloc((n * k * 2) as usize).unwrap();
    let out = gpu.alloc((n * t * 2) as usize).unwrap();
    let p = GemmParams {
        w0: w.0,
        x: x.0,
        out: out.0,
        gscale0: 1.0,
        n,
        k,
        tokens: t,
        ..Default::default()
    };
    let shape = gemm_shape("bf16_gemm", false).unwrap();
    let launch = Launch {
        kernel: "bf16_gemm",
        grid: (1, 1, 1),
        block: (shape.threads, 1, 1),
        smem: shape.smem,
        params: p.as_bytes(),
    };
    match gpu.launch(&launch, 0) {
        Err(Error::Invalid(m)) => assert!(m.contains("activation map"), "{m}"),
        other => panic!("launch without a map: {other:?}"),
    }
    let p = GemmParams {
        xmap: gpu
            .encode_tile_map(&TileMapSpec {
                rows: t,
                cols: k,
                ..good
            })
            .unwrap(),
        ..p
    };
    let launch = Launch {
        params: p.as_bytes(),
        ..launch
    };
    gpu.launch(&launch, 0).unwrap();
}

#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl Write for Capture {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn every_prefill_call_logs_exactly_one_timer_line() {
    let host = HostLayer::quantized(H, I, 5);
    let gpu: Arc<dyn GpuBackend> = Arc::new(CpuBackend::new());
    let layer = host.layer(&gpu, FfnActivation::Silu);
    let mut ctx = ForwardContext::new(&layer, 64).unwrap();
    let xs = upload_bf16(&gpu, &activations(64 * H, 1));
    let cap = Capture::default();
    let writer = cap.clone();
    let sub = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .finish();
    tracing::subscriber::with_default(sub, || {
        for n in [1usize, 7, 64] {
            layer.forward_prefill(xs, n, &mut ctx, 0).unwrap();
        }
    });
    let log = String::from_utf8(cap.0.lock().unwrap().clone()).unwrap();
    let lines: Vec<&str> = log.lines().filter(|l| l.contains("FFN prefill")).collect();
    assert_eq!(lines.len(), 3, "{log}");
    for (line, n) in lines.iter().zip([1, 7, 64]) {
        let tail = &line[line.find("FFN prefill").unwrap()..];
        let prefix = format!("FFN prefill [nvfp4_t_m128] N={n}: ");
        assert!(tail.starts_with(&prefix), "{tail}");
        let us: f64 = tail[prefix.len()..].trim_end_matches("µs").parse().unwrap();
        assert!(us >= 0.0 && tail.ends_with("µs"), "{tail}");
    }
}

#[test]
fn prefill_errors_are_clear() {
    let host = HostLayer::quantized(H, I, 5);
    let gpu: Arc<dyn GpuBackend> = Arc::new(CpuBackend::new());
    let layer = host.layer(&gpu, FfnActivation::Silu);
    let mut ctx = ForwardContext::new(&layer, 8).unwrap();
    let xs = upload_bf16(&gpu, &activations(8 * H, 1));
    assert!(matches!(
        layer.forward_prefill(xs, 0, &mut ctx, 0),
        Err(Error::Invalid(_))
    ));
    assert!(matches!(
        layer.forward_prefill(xs, 9, &mut ctx, 0),
        Err(Error::Invalid(_))
    ));

    // No `_t` copies: the table has no arm, and says why.
    let mut w = DenseFfnWeights::upload(&gpu, &host.gate, &host.up, &host.down).unwrap();
    w.up_t = None;
    let layer = DenseFfnLayer::new(w, gpu.clone()).unwrap();
    let mut ctx = ForwardContext::new(&layer, 8).unwrap();
    assert!(
        matches!(layer.forward_prefill(xs, 4, &mut ctx, 0), Err(Error::Unsupported(ref s)) if s.contains("_t"))
    );

    // A module without the arm's down kernel: named, nothing launched.
    let gpu: Arc<dyn GpuBackend> =
        Arc::new(CpuBackend::new().without_kernels(&["gemm_nvfp4_t_down"]));
    let layer = host.layer(&gpu, FfnActivation::Gelu);
    let mut ctx = ForwardContext::new(&layer, 8).unwrap();
    let xs = upload_bf16(&gpu, &activations(8 * H, 1));
    match layer.forward_prefill(xs, 8, &mut ctx, 0) {
        Err(Error::MissingKernel(k)) => assert_eq!(k, "gemm_nvfp4_t_down"),
        other => panic!("expected MissingKernel, got {:?}", other.map(|_| ())),
    }
    assert_eq!(gpu.launch_count(), 0);
}
