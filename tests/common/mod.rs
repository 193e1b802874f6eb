//! Helpers shared by the integration tests.
#![allow(dead_code)]
use denseffn::backend::{DevicePtr, GpuBackend};
use denseffn::layer::{DenseFfnLayer, DenseFfnWeights, FfnActivation};
use denseffn::pack::{random_activations, Nvfp4Host};
use half::bf16;
use rand::rngs::SmallRng;
use rand::SeedableRng;
use std::sync::Arc;

/// Host copies of one layer's weights.
pub struct HostLayer {
    pub hidden: usize,
    pub inter: usize,
    pub gate: Nvfp4Host,
    pub up: Nvfp4Host,
    pub down: Nvfp4Host,
}

impl HostLayer {
    /// Quantized from Gaussian f32 (small shapes: exercises the quantizer too).
    pub fn quantized(hidden: usize, inter: usize, seed: u64) -> Self {
        Self::quantized_rows(hidden, inter, seed, |_| 1.0)
    }

    /// As [`HostLayer::quantized`], with each gate and up row scaled by [`graded`] of its
    /// index: the activation down reads changes magnitude every 64 columns.
    pub fn quantized_graded(hidden: usize, inter: usize, seed: u64) -> Self {
        Self::quantized_rows(hidden, inter, seed, graded)
    }

    fn quantized_rows(hidden: usize, inter: usize, seed: u64, row_scale: fn(usize) -> f32) -> Self {
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut q = |r, c, s: f32, rows: fn(usize) -> f32| {
            let w: Vec<f32> = random_activations(r * c, &mut rng)
                .into_iter()
                .enumerate()
                .map(|(i, v)| v * s * rows(i / c))
                .collect();
            Nvfp4Host::quantize(&w, r, c).unwrap()
        };
        HostLayer {
            hidden,
            inter,
            gate: q(inter, hidden, 0.05, row_scale),
            up: q(inter, hidden, 0.05, row_scale),
            down: q(hidden, inter, 0.03, |_| 1.0),
        }
    }

    /// Random codes and scales (fast at model size). Global scales keep activations O(1).
    pub fn random(hidden: usize, inter: usize, seed: u64) -> Self {
        let mut rng = SmallRng::seed_from_u64(seed);
        let gs = 0.5 / (hidden as f32).sqrt();
        let ds = 0.5 / (inter as f32).sqrt();
        HostLayer {
            hidden,
            inter,
            gate: Nvfp4Host::random(inter, hidden, gs, &mut rng).unwrap(),
            up: Nvfp4Host::random(inter, hidden, gs, &mut rng).unwrap(),
            down: Nvfp4Host::random(hidden, inter, ds, &mut rng).unwrap(),
        }
    }

    pub fn layer(&self, gpu: &Arc<dyn GpuBackend>, act: FfnActivation) -> DenseFfnLayer {
        let w = DenseFfnWeights::upload(gpu, &self.gate, &self.up, &self.down).unwrap();
        DenseFfnLayer::new_with_activation(w, act, gpu.clone()).unwrap()
    }

    /// The f64 reference for `x` (`[m][hidden]`).
    pub fn reference(&self, x: &[f32], act: FfnActivation) -> Vec<f64> {
        denseffn::reference::ffn_f64(
            &self.gate.dequantize(),
            &self.up.dequantize(),
            &self.down.dequantize(),
            self.hidden,
            self.inter,
            x,
            act,
        )
    }
}

impl HostLayer {
    /// The f64 reference for `x` (`[m][hidden]`) with `lora`'s deltas merged into the
    /// dequantized weights (`W + (alpha/rank)·B·A`).
    pub fn lora_reference(
        &self,
        lora: &denseffn::layer::LoraFfnWeights,
        x: &[f32],
        act: FfnActivation,
    ) -> Vec<f64> {
        let [g, u, d] = lora
            .merge([
                &self.gate.dequantize(),
                &self.up.dequantize(),
                &self.down.dequantize(),
            ])
            .unwrap();
        denseffn::reference::ffn_f64(&g, &u, &d, self.hidden, self.inter, x, act)
    }
}

/// Seeded random LoRA adapters of `rank` for a `hidden × inter` layer (`bench::synth::lora`).
pub fn lora_weights(
    hidden: usize,
    inter: usize,
    rank: usize,
    seed: u64,
) -> denseffn::layer::LoraFfnWeights {
    denseffn::bench::synth::lora(hidden, inter, rank, &mut SmallRng::seed_from_u64(seed))
}

/// Runs one path by name (`forward`, `batched`, `k2`, `k3`, `km`, `prefill`) on the first `m`
/// tokens of `x` and returns its bf16 output as f64.
pub fn path_output(
    layer: &DenseFfnLayer,
    gpu: &Arc<dyn GpuBackend>,
    path: &str,
    m: usize,
    x: &[f32],
    ctx: &mut denseffn::layer::ForwardContext,
) -> Result<Vec<f64>, denseffn::Error> {
    let xs = upload_bf16(gpu, &x[..m * layer.hidden()]);
    let y = match path {
        "forward" => layer.forward(xs, ctx, 0),
        "batched" => layer.forward_batched(xs, m, ctx, 0),
        "k2" => layer.forward_k2(xs, ctx, 0),
        "k3" => layer.forward_k3(xs, ctx, 0),
        "km" => layer.forward_km(xs, m, ctx, 0),
        "prefill" => layer.forward_prefill(xs, m, ctx, 0),
        other => panic!("no path {other}"),
    };
    let out = y.map(|y| download_bf16(gpu, y, m * layer.hidden()));
    gpu.free(xs).unwrap();
    out
}

/// The tokens of an `n`-token call that GPU tests compare with the CPU reference: the first
/// two, the middle one and the last two (fewer when `n` is small).
pub fn sample_tokens(n: usize) -> Vec<usize> {
    let mut s = vec![0, 1, n / 2, n.saturating_sub(2), n.saturating_sub(1)];
    s.retain(|&t| t < n);
    s.sort();
    s.dedup();
    s
}

/// Rows `tokens` of `[..][h]` values, concatenated.
pub fn rows_of<T: Copy>(v: &[T], tokens: &[usize], h: usize) -> Vec<T> {
    tokens
        .iter()
        .flat_map(|&t| v[t * h..(t + 1) * h].iter().copied())
        .collect()
}

/// bf16 bytes of `x`.
pub fn bf16_bytes(x: &[f32]) -> Vec<u8> {
    x.iter()
        .flat_map(|&v| bf16::from_f32(v).to_bits().to_le_bytes())
        .collect()
}

/// Uploads bf16 activations into a fresh allocation.
pub fn upload_bf16(gpu: &Arc<dyn GpuBackend>, x: &[f32]) -> DevicePtr {
    let p = gpu.alloc(x.len() * 2).unwrap();
    gpu.upload(p, &bf16_bytes(x)).unwrap();
    p
}

/// Downloads `n` bf16 values as f64.
pub fn download_bf16(gpu: &Arc<dyn GpuBackend>, p: DevicePtr, n: usize) -> Vec<f64> {
    let mut b = vec![0u8; n * 2];
    gpu.download(&mut b, p).unwrap();
    b.chunks_exact(2)
        .map(|c| bf16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f64())
        .collect()
}

/// Seeded N(0,1) bf16-representable activations.
pub fn activations(len: usize, seed: u64) -> Vec<f32> {
    random_activations(len, &mut SmallRng::seed_from_u64(seed))
}

/// `2^((i / 64) % 9 − 4)`: a factor over 2^-4..2^4 that changes every 64 indices, so
/// neighbouring K chunks (and K splits) of a GEMV differ in magnitude: a kernel that applied
/// one split's activation scale to another's values would be off by powers of two.
pub fn graded(i: usize) -> f32 {
    (((i / 64) % 9) as f32 - 4.0).exp2()
}

/// The verify paths (path name for [`path_output`], tokens) the graded-magnitude tests run:
/// km on both sides of the batchm/batch8 switch, k2 and k3.
pub const GRADED_PATHS: &[(&str, usize)] = &[
    ("km", 1),
    ("km", 4),
    ("km", 5),
    ("km", 8),
    ("k2", 2),
    ("k3", 3),
];

/// [`activations`] `[len / k][k]` with column `c` of every row scaled by [`graded`]`(c)`.
pub fn graded_activations(len: usize, k: usize, seed: u64) -> Vec<f32> {
    let mut x = activations(len, seed);
    for (i, v) in x.iter_mut().enumerate() {
        *v *= graded(i % k);
    }
    x
}

/// Host copies of one overlay's weights (random, from Gaussian f32), and their exact values.
pub struct OverlayHost {
    pub kind: denseffn::layer::OverlayKind,
    pub hidden: usize,
    pub inter: usize,
    parts: OverlayParts,
}

enum OverlayParts {
    Fp8([denseffn::layer::Fp8Weight; 3]),
    Bf16([denseffn::layer::DenseWeight; 3]),
    Q2([denseffn::layer::PackedQ2Weight; 3]),
    Q4k([denseffn::layer::Q4kWeight; 3]),
}

impl OverlayHost {
    /// Random weights of `kind` for a `hidden × inter` layer (scaled so activations stay O(1)).
    pub fn random(
        kind: denseffn::layer::OverlayKind,
        hidden: usize,
        inter: usize,
        seed: u64,
    ) -> Self {
        use denseffn::layer::{DenseWeight, OverlayKind};
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut w = |r: usize, c: usize| -> Vec<f32> {
            let s = 1.5 / (c as f32).sqrt();
            random_activations(r * c, &mut rng)
                .into_iter()
                .map(|v| v * s)
                .collect()
        };
        let shapes = [(inter, hidden), (inter, hidden), (hidden, inter)];
        let vals: Vec<Vec<f32>> = shapes.iter().map(|&(r, c)| w(r, c)).collect();
        let parts = match kind {
            OverlayKind::Fp8 => OverlayParts::Fp8(std::array::from_fn(|i| {
                denseffn::pack_fp8::Fp8Host::quantize(&vals[i], shapes[i].0, shapes[i].1).unwrap()
            })),
            OverlayKind::Bf16 => OverlayParts::Bf16(std::array::from_fn(|i| DenseWeight {
                rows: shapes[i].0,
                cols: shapes[i].1,
                data: vals[i].iter().map(|&v| bf16::from_f32(v)).collect(),
            })),
            OverlayKind::Q2 => OverlayParts::Q2(std::array::from_fn(|i| {
                denseffn::pack_q2::Q2Host::quantize_ternary(&vals[i], shapes[i].0, shapes[i].1)
                    .unwrap()
            })),
            OverlayKind::Q4k => OverlayParts::Q4k(std::array::from_fn(|i| {
                denseffn::pack_q4k::Q4kHost::quantize(&vals[i], shapes[i].0, shapes[i].1).unwrap()
            })),
        };
        OverlayHost {
            kind,
            hidden,
            inter,
            parts,
        }
    }

    /// Installs the overlay on `layer`.
    pub fn install(&self, layer: &mut DenseFfnLayer) -> Result<(), denseffn::Error> {
        match &self.parts {
            OverlayParts::Fp8([g, u, d]) => layer.set_fp8_weights(g, u, d),
            OverlayParts::Bf16([g, u, d]) => layer.set_bf16_weights(g, u, d),
            OverlayParts::Q2([g, u, d]) => layer.set_q2_weights(g, u, d),
            OverlayParts::Q4k([g, u, d]) => layer.set_q4k_weights(g, u, d),
        }
    }

    /// The exact values of gate, up, down as the format defines them (row-major f32).
    pub fn values(&self) -> [Vec<f32>; 3] {
        match &self.parts {
            OverlayParts::Fp8(p) => std::array::from_fn(|i| p[i].dequantize()),
            OverlayParts::Bf16(p) => {
                std::array::from_fn(|i| p[i].data.iter().map(|v| v.to_f32()).collect())
            }
            OverlayParts::Q2(p) => std::array::from_fn(|i| p[i].dequantize()),
            OverlayParts::Q4k(p) => std::array::from_fn(|i| p[i].dequantize()),
        }
    }

    /// The same weights as the library's format-tagged host weights.
    pub fn host_ffn(&self) -> denseffn::load::HostFfn {
        use denseffn::load::HostFfn;
        match &self.parts {
            OverlayParts::Fp8(p) => HostFfn::Fp8(p.clone()),
            OverlayParts::Bf16(p) => HostFfn::Bf16(p.clone()),
            OverlayParts::Q2(p) => HostFfn::Q2(p.clone()),
            OverlayParts::Q4k(p) => HostFfn::Q4k(p.clone()),
        }
    }

    /// The f64 reference for `x` (`[m][hidden]`).
    pub fn reference(&self, x: &[f32], act: FfnActivation) -> Vec<f64> {
        let [g, u, d] = self.values();
        denseffn::reference::ffn_f64(&g, &u, &d, self.hidden, self.inter, x, act)
    }
}

/// Runs the `denseffn` binary with `args`.
pub fn denseffn_cli(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_denseffn"))
        .args(args)
        .output()
        .expect("run denseffn")
}

/// Runs every path (forward, forward_batched, k2, k3, km m = 1..8, prefill N = 5 and 64) of every
/// weight set (NVFP4 and each overlay) with both activations on a small layer, and returns the
/// kernel entry points of the library (the CPU backend's list) that none of them dispatched.
pub fn kernels_no_path_launches(gpu: &Arc<dyn GpuBackend>) -> Vec<&'static str> {
    let mut seen = std::collections::BTreeSet::new();
    // Intermediate 512 (8 chunks): no GEMM splits K; 4096 (64 chunks): the prefill down GEMMs
    // of these grids split it, so their `_splitk` entry points run too; hidden 2048 (32
    // chunks): BF16's gate+up grid (2 tiles, all in the last wave) splits it.
    for (h, i) in [(256, 512), (256, 4096), (2048, 256)] {
        launch_every_path(gpu, h, i, &mut seen);
    }
    denseffn::backend::CpuBackend::kernels()
        .iter()
        .copied()
        .filter(|k| !seen.contains(k))
        .collect()
}

/// Runs every path of an `h × i` layer (every overlay, LoRA, both MMQ arms, both
/// activations) and adds the kernels each says it launches to `seen`.
fn launch_every_path(
    gpu: &Arc<dyn GpuBackend>,
    h: usize,
    i: usize,
    seen: &mut std::collections::BTreeSet<&'static str>,
) {
    use denseffn::layer::{ForwardContext, OverlayKind};
    let host = HostLayer::random(h, i, 101);
    let x = upload_bf16(gpu, &activations(64 * h, 102));
    const PAIR_TOKENS: usize = 256;
    let x_pair = upload_bf16(gpu, &activations(PAIR_TOKENS * h, 105));
    let sets = [
        None,
        Some(OverlayKind::Q2),
        Some(OverlayKind::Q4k),
        Some(OverlayKind::Fp8),
        Some(OverlayKind::Bf16),
    ];
    for act in [FfnActivation::Silu, FfnActivation::Gelu] {
        // Every overlay, then NVFP4 with LoRA deltas (None twice: without and with LoRA).
        for (n, set) in sets.into_iter().chain([None]).enumerate() {
            let mut layer = host.layer(gpu, act);
            if let Some(kind) = set {
                OverlayHost::random(kind, h, i, 103)
                    .install(&mut layer)
                    .unwrap();
            }
            if n == sets.len() {
                layer.set_lora_weights(lora_weights(h, i, 16, 104)).unwrap();
            }
            let mut ctx = ForwardContext::new(&layer, 64).unwrap();
            seen.extend(layer.decode_kernels());
            layer.forward(x, &mut ctx, 0).unwrap();
            layer.forward_batched(x, 2, &mut ctx, 0).unwrap();
            seen.extend(layer.verify_kernels(2));
            layer.forward_k2(x, &mut ctx, 0).unwrap();
            seen.extend(layer.verify_kernels(3));
            layer.forward_k3(x, &mut ctx, 0).unwrap();
            for m in 1..=8 {
                seen.extend(layer.km_kernels(m));
                layer.forward_km(x, m, &mut ctx, 0).unwrap();
            }
            for n in [5, 64] {
                seen.extend(layer.prefill_kernels(n));
                layer.forward_prefill(x, n, &mut ctx, 0).unwrap();
            }
            if matches!(set, Some(OverlayKind::Bf16 | OverlayKind::Fp8)) {
                // Two 128-token blocks: the BF16 and FP8 × bf16 GEMMs' cluster-pair (`_x2`)
                // entry points.
                let mut ctx = ForwardContext::new(&layer, PAIR_TOKENS).unwrap();
                seen.extend(layer.prefill_kernels(PAIR_TOKENS));
                layer
                    .forward_prefill(x_pair, PAIR_TOKENS, &mut ctx, 0)
                    .unwrap();
            }
            gpu.synchronize(0).unwrap();
        }
        // The Q4_K MMQ arm: an NVFP4 layer finalized for it (requantization at load), and
        // native Q4_K weights installed with it enabled.
        let on = denseffn::layer::PrefillConfig {
            q4k_mmq: true,
            nvfp4_mmq: false,
            w8a8: false,
        };
        for native in [false, true] {
            let mut layer = host.layer(gpu, act);
            layer.set_prefill_config(on);
            if native {
                OverlayHost::random(OverlayKind::Q4k, h, i, 104)
                    .install(&mut layer)
                    .unwrap();
            } else {
                layer.finalize_q4k_load(&gpu.clone(), h, i, 0).unwrap();
                seen.insert(denseffn::layer::mmq_kernels::REQUANT);
            }
            let mut ctx = ForwardContext::new(&layer, 64).unwrap();
            for n in [5, 64] {
                seen.extend(layer.prefill_kernels(n));
                layer.forward_prefill(x, n, &mut ctx, 0).unwrap();
            }
            gpu.synchronize(0).unwrap();
        }
        // The FP8 × FP8 arm: an FP8 overlay with it enabled.
        let mut layer = host.layer(gpu, act);
        layer.set_prefill_config(denseffn::layer::PrefillConfig {
            w8a8: true,
            ..Default::default()
        });
        OverlayHost::random(OverlayKind::Fp8, h, i, 105)
            .install(&mut layer)
            .unwrap();
        let mut ctx = ForwardContext::new(&layer, PAIR_TOKENS).unwrap();
        for n in [5, 64] {
            seen.extend(layer.prefill_kernels(n));
            layer.forward_prefill(x, n, &mut ctx, 0).unwrap();
        }
        // Two 128-token blocks: its cluster-pair (`_x2`) entry points.
        seen.extend(layer.prefill_kernels(PAIR_TOKENS));
        layer
            .forward_prefill(x_pair, PAIR_TOKENS, &mut ctx, 0)
            .unwrap();
        gpu.synchronize(0).unwrap();
        // The NVFP4 W4A4 MMQ arm: an NVFP4 layer finalized for it.
        let mut layer = host.layer(gpu, act);
        layer.set_prefill_config(denseffn::layer::PrefillConfig {
            q4k_mmq: false,
            nvfp4_mmq: true,
            w8a8: false,
        });
        layer
            .finalize_nvfp4_mmq_load(&gpu.clone(), h, i, 0)
            .unwrap();
        let mut ctx = ForwardContext::new(&layer, 64).unwrap();
        for n in [5, 64] {
            seen.extend(layer.prefill_kernels(n));
            layer.forward_prefill(x, n, &mut ctx, 0).unwrap();
        }
        gpu.synchronize(0).unwrap();
    }
}

/// The CUDA backend, or `None` after printing why the GPU test is skipped.
pub fn cuda() -> Option<Arc<dyn GpuBackend>> {
    match denseffn::backend::CudaBackend::new() {
        Ok(c) => Some(Arc::new(c)),
        Err(e) => {
            eprintln!("skipping GPU test: {e}");
            None
        }
    }
}

/// `DENSEFFN_GPU_TEST_SMALL=1` shrinks every GPU test to small shapes, for runs under
/// compute-sanitizer (`gpu-bundle/run.sh sanitize`), which are 10–100× slower.
pub fn small() -> bool {
    std::env::var_os("DENSEFFN_GPU_TEST_SMALL").is_some()
}

/// A `CpuBackend` (for its counters and fault injection) and the same backend as a trait object.
pub fn cpu_backend() -> (Arc<denseffn::backend::CpuBackend>, Arc<dyn GpuBackend>) {
    let c = Arc::new(denseffn::backend::CpuBackend::new());
    let g: Arc<dyn GpuBackend> = c.clone();
    (c, g)
}

/// `forward_prefill` of `n` tokens of `x` (bf16 on upload), downloaded as f64.
pub fn prefill_f64(
    layer: &DenseFfnLayer,
    gpu: &Arc<dyn GpuBackend>,
    x: &[f32],
    n: usize,
) -> Vec<f64> {
    let mut ctx = denseffn::layer::ForwardContext::new(layer, n).unwrap();
    path_output(layer, gpu, "prefill", n, x, &mut ctx).unwrap()
}

/// One load-time finalize step of an MMQ prefill arm (`finalize_q4k_load`,
/// `finalize_nvfp4_mmq_load`), for the contract tests the two arms share: out of memory at any
/// allocation leaves the layer as it was, and after finalizing a KV cache can take all the rest.
pub struct FinalizeArm {
    /// The prefill configuration that enables the arm.
    pub config: denseffn::layer::PrefillConfig,
    /// The finalize call (`gpu`, hidden, intermediate; stream 0).
    pub finalize:
        fn(&mut DenseFfnLayer, &Arc<dyn GpuBackend>, usize, usize) -> denseffn::Result<()>,
    /// Whether the layer holds the arm's copies.
    pub has_copies: fn(&DenseFfnLayer) -> bool,
}

impl FinalizeArm {
    /// `host`'s layer on `gpu` with the arm enabled.
    pub fn enabled(
        &self,
        host: &HostLayer,
        gpu: &Arc<dyn GpuBackend>,
        act: FfnActivation,
    ) -> DenseFfnLayer {
        let mut l = host.layer(gpu, act);
        l.set_prefill_config(self.config);
        l
    }

    /// Finalizing makes `steps` allocations; failing each one in turn gives `OutOfMemory`,
    /// leaves footprint and device memory as they were, no copies, the default arm, and the
    /// same prefill results as before.
    pub fn out_of_memory_at_every_allocation(&self, host: &HostLayer, steps: u64) {
        let (h, i) = (host.hidden, host.inter);
        let x = activations(9 * h, 26);
        let (c, gpu) = cpu_backend();
        let mut layer = self.enabled(host, &gpu, FfnActivation::Silu);
        let want = prefill_f64(&layer, &gpu, &x, 9);
        let a0 = c.allocations_attempted();
        (self.finalize)(&mut layer, &gpu, h, i).unwrap();
        assert_eq!(
            c.allocations_attempted() - a0,
            steps,
            "allocations of a finalize"
        );
        for step in 0..steps {
            let (c, gpu) = cpu_backend();
            let mut layer = self.enabled(host, &gpu, FfnActivation::Silu);
            let (fp, used) = (layer.footprint(), c.used_bytes());
            c.fail_allocation_at(c.allocations_attempted() + step);
            let r = (self.finalize)(&mut layer, &gpu, h, i);
            assert!(
                matches!(r, Err(denseffn::Error::OutOfMemory { .. })),
                "step {step}: {r:?}"
            );
            assert_eq!(
                (layer.footprint(), c.used_bytes()),
                (fp, used),
                "step {step}"
            );
            assert!(!(self.has_copies)(&layer), "step {step}: copies left");
            assert_eq!(
                layer.prefill_arm().unwrap(),
                denseffn::layer::PrefillArm::Nvfp4TM128
            );
            assert_eq!(
                prefill_f64(&layer, &gpu, &x, 9),
                want,
                "step {step}: results changed"
            );
        }
    }

    /// On an 8 MiB device: finalizing keeps the footprint, a KV cache then takes all free
    /// memory, and prefill (N = `x.len() / hidden` and 1), forward, k2 and km(8) allocate
    /// nothing. Returns the layer and the prefill output of `x` for the caller's accuracy check.
    pub fn kv_cache_then_no_allocation(
        &self,
        host: &HostLayer,
        act: FfnActivation,
        x: &[f32],
    ) -> (DenseFfnLayer, Vec<f64>) {
        let (h, i) = (host.hidden, host.inter);
        let cap = 8 << 20;
        let c = Arc::new(denseffn::backend::CpuBackend::with_capacity(cap));
        let gpu: Arc<dyn GpuBackend> = c.clone();
        let mut layer = self.enabled(host, &gpu, act);
        let baseline = layer.footprint().total();
        (self.finalize)(&mut layer, &gpu, h, i).unwrap();
        assert_eq!(layer.footprint().total(), baseline);
        let n = x.len() / h;
        let mut ctx = denseffn::layer::ForwardContext::new(&layer, n).unwrap();
        let xd = upload_bf16(&gpu, x);
        let (free, total) = gpu.mem_info().unwrap();
        assert_eq!(total, cap);
        let kv = gpu.alloc(free).unwrap();
        assert_eq!(gpu.mem_info().unwrap().0, 0);
        let allocs = c.allocations_attempted();
        let y = download_bf16(
            &gpu,
            layer.forward_prefill(xd, n, &mut ctx, 0).unwrap(),
            n * h,
        );
        layer.forward(xd, &mut ctx, 0).unwrap();
        layer.forward_k2(xd, &mut ctx, 0).unwrap();
        layer.forward_km(xd, 8, &mut ctx, 0).unwrap();
        layer.forward_prefill(xd, 1, &mut ctx, 0).unwrap();
        assert_eq!(
            c.allocations_attempted(),
            allocs,
            "a call allocated after the KV cache"
        );
        gpu.free(kv).unwrap();
        (layer, y)
    }
}
