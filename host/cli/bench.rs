//! `denseffn bench`: every decode, verify and prefill path of every weight format, per model
//! shape, beside the anchors measured in the same run (device-to-device copy bandwidth, a
//! cuBLAS bf16 FFN) and ggml's H200 figures; a markdown table, a JSON file and SVG plots.
//!
//! Timing: events on one created stream around back-to-back calls, the median of several
//! repetitions (GPU events on CUDA, host clocks on the CPU reference backend). Decode paths are
//! timed twice: called directly, and replayed from a CUDA graph captured from one call, so the
//! host's launch overhead shows as the difference.
use super::{open_backend, ActArg, BackendArg};
use crate::plot;
use clap::Args;
use denseffn::backend::{DevicePtr, GpuBackend, Graph, Stream};
use denseffn::bench::anchors::{self, GgmlPoint, Unit};
use denseffn::bench::formats::{self, BenchFormat};
use denseffn::bench::{synth, timing};
use denseffn::layer::{DenseFfnLayer, FfnActivation, ForwardContext, MAX_GEMV_TOKENS};
use denseffn::{Error, Result};
use rand::rngs::SmallRng;
use rand::SeedableRng;
use std::path::PathBuf;
use std::sync::Arc;

/// The options of `denseffn bench`.
#[derive(Args)]
pub struct BenchArgs {
    #[arg(long, value_enum, default_value = "auto")]
    backend: BackendArg,
    /// Model shapes, comma-separated: llama3-8b (8b), qwen3-32b (32b), llama3-70b (70b),
    /// gemma3-27b (27b, GELU), or all. Default: all on CUDA; on the CPU reference backend one
    /// small 256×512 shape (unless --hidden/--intermediate give one).
    #[arg(long, value_delimiter = ',')]
    shapes: Vec<String>,
    /// Model width of a custom shape (with --intermediate), measured after --shapes.
    #[arg(long, requires = "intermediate")]
    hidden: Option<usize>,
    /// FFN width of the custom shape.
    #[arg(long, requires = "hidden")]
    intermediate: Option<usize>,
    /// Activation of the custom shape.
    #[arg(long, value_enum, default_value = "silu")]
    activation: ActArg,
    /// Tokens of forward_km: an inclusive range `A..B` or a list `1,2,4,8` (each 1..=8).
    #[arg(long, default_value = "1..8")]
    m: String,
    /// Prefill tokens N, comma-separated. Default: 128,512,2048,4096 on CUDA, 16,64 on the CPU.
    #[arg(long, value_delimiter = ',')]
    n: Vec<usize>,
    /// Weight formats, comma-separated (default: all of nvfp4, fp8, bf16, q2_0, q4k,
    /// nvfp4_lora16, nvfp4_lora64: the NVFP4 layer with LoRA deltas of rank 16 / 64).
    #[arg(long, value_delimiter = ',')]
    formats: Vec<String>,
    /// Fewer repetitions: a smoke run, not figures to quote.
    #[arg(long)]
    quick: bool,
    /// Directory for bench.md, bench.json and the SVG plots.
    #[arg(long, default_value = "target/bench")]
    out: PathBuf,
    /// Seed of the synthetic weights and inputs.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

/// A model shape.
pub struct Shape {
    /// Name in tables and file names.
    pub name: String,
    /// Model width.
    pub h: usize,
    /// FFN width.
    pub i: usize,
    /// Activation.
    pub act: FfnActivation,
}

/// (name, short name, hidden, intermediate, activation) of the built-in shapes.
const MODELS: &[(&str, &str, usize, usize, FfnActivation)] = &[
    ("llama3-8b", "8b", 4096, 14336, FfnActivation::Silu),
    ("qwen3-32b", "32b", 5120, 25600, FfnActivation::Silu),
    ("llama3-70b", "70b", 8192, 28672, FfnActivation::Silu),
    ("gemma3-27b", "27b", 5376, 21504, FfnActivation::Gelu),
];

/// Repetitions × back-to-back calls, for decode and for prefill.
struct Reps {
    decode: (usize, u64),
    prefill: (usize, u64),
}

/// One decode/verify measurement.
pub struct DecodeRow {
    pub shape: String,
    pub format: &'static str,
    pub path: String,
    pub m: usize,
    pub launches: u64,
    pub us: f64,
    pub graph_us: Option<f64>,
    pub gbs: f64,
    pub cublas_us: Option<f64>,
    pub ggml_gbs: Option<f64>,
}

/// One prefill measurement.
pub struct PrefillRow {
    pub shape: String,
    pub format: &'static str,
    pub n: usize,
    pub arm: String,
    pub us: f64,
    pub tflops: f64,
    pub cublas_tflops: Option<f64>,
    pub ggml_tflops: Option<f64>,
}

/// A row: its figures, or why the path did not run.
pub type Measured<T> = std::result::Result<T, (String, String)>;

/// Everything one run measured.
pub struct Report {
    pub device: String,
    pub backend: &'static str,
    pub copy_gbs: f64,
    pub cublas_note: String,
    pub shapes: Vec<Shape>,
    pub formats: Vec<&'static BenchFormat>,
    pub ggml: Vec<GgmlPoint>,
    pub decode: Vec<Measured<DecodeRow>>,
    pub prefill: Vec<Measured<PrefillRow>>,
}

/// `denseffn bench`.
pub fn run(args: BenchArgs) -> Result<()> {
    let gpu = open_backend(args.backend)?;
    let cuda = gpu.name() == "cuda";
    let shapes = shapes(&args, cuda)?;
    let ms = parse_m(&args.m)?;
    let ns = match (args.n.is_empty(), cuda) {
        (false, _) => args.n.clone(),
        (true, true) => vec![128, 512, 2048, 4096],
        (true, false) => vec![16, 64],
    };
    if let Some(bad) = ns.iter().find(|&&n| n == 0) {
        return Err(Error::Invalid(format!("--n: {bad}: N must be at least 1")));
    }
    let fmts: Vec<&'static BenchFormat> = if args.formats.is_empty() {
        formats::FORMATS.iter().collect()
    } else {
        args.formats
            .iter()
            .map(|f| {
                formats::find(f).ok_or_else(|| {
                    let known: Vec<&str> = formats::FORMATS.iter().map(|f| f.name).collect();
                    Error::Invalid(format!(
                        "--formats: unknown `{f}` (known: {})",
                        known.join(", ")
                    ))
                })
            })
            .collect::<Result<_>>()?
    };
    // (repetitions, calls each) for decode and for prefill.
    let (decode, prefill) = match (cuda, args.quick) {
        (true, false) => ((11, 20), (5, 3)),
        (true, true) => ((3, 5), (3, 1)),
        (false, false) => ((3, 2), (3, 1)),
        (false, true) => ((1, 1), (1, 1)),
    };
    let reps = Reps { decode, prefill };
    std::fs::create_dir_all(&args.out)
        .map_err(|e| Error::Invalid(format!("creating {}: {e}", args.out.display())))?;
    let ggml = anchors::ggml_h200()?;

    let copy_bytes = if cuda { 1 << 30 } else { 1 << 20 };
    let copy_gbs = timing::copy_gbs(&gpu, copy_bytes, 5, if cuda { 10 } else { 1 })?;
    let anchor = CublasAnchor::new(cuda);
    eprintln!(
        "bench on {} ({}): copy {copy_gbs:.0} GB/s; cuBLAS: {}",
        gpu.device_name(),
        gpu.name(),
        anchor.note
    );
    let stream = Stream::new(&gpu)?;
    let mut rng = SmallRng::seed_from_u64(args.seed);
    let mut report = Report {
        device: gpu.device_name(),
        backend: gpu.name(),
        copy_gbs,
        cublas_note: anchor.note.clone(),
        shapes: Vec::new(),
        formats: fmts.clone(),
        ggml,
        decode: Vec::new(),
        prefill: Vec::new(),
    };
    let mut tokens: Vec<usize> = [1, 2, 3].iter().chain(&ms).chain(&ns).copied().collect();
    tokens.sort_unstable();
    tokens.dedup();
    for shape in &shapes {
        eprintln!("{}: {}×{} {:?}", shape.name, shape.h, shape.i, shape.act);
        let cublas = anchor.times(&gpu, shape, &tokens, &reps, &mut rng);
        let cublas_at = |t: usize| cublas.iter().find(|c| c.0 == t).map(|c| c.1);
        let mut layer = synth::nvfp4_layer(&gpu, shape.h, shape.i, shape.act, &mut rng)?;
        let max_tokens = ns.iter().copied().max().unwrap_or(1).max(MAX_GEMV_TOKENS);
        let x = synth::activations(&gpu, max_tokens * shape.h, &mut rng)?;
        for f in &fmts {
            eprintln!("  {}", f.name);
            if let Err(e) = (f.install)(&mut layer, &mut rng) {
                let why = format!("installing {} weights: {e}", f.name);
                eprintln!("  {why}");
                report
                    .decode
                    .push(Err((format!("{} {}", shape.name, f.name), why.clone())));
                report
                    .prefill
                    .push(Err((format!("{} {}", shape.name, f.name), why)));
                continue;
            }
            // Made per format: a format may change what the context holds (q4k_mmq's scratch, a
            // LoRA layer's prefill scratch, sized by its rank).
            let mut ctx = ForwardContext::new(&layer, max_tokens)?;
            let bytes = formats::weight_bytes(&layer) as f64;
            let ggml_gbs = |m| ggml_at(&report.ggml, f.ggml, Unit::GBps, m);
            let mut paths = vec![(String::from("forward"), 1, Path::Forward)];
            paths.push(("forward_k2".into(), 2, Path::K(2)));
            paths.push(("forward_k3".into(), 3, Path::K(3)));
            paths.extend(
                ms.iter()
                    .map(|&m| (format!("forward_km({m})"), m, Path::Km(m))),
            );
            for (name, m, path) in paths {
                let row = time_decode(&gpu, &layer, &mut ctx, x.ptr(), path, &stream, &reps)
                    .map(|(us, graph_us, launches)| DecodeRow {
                        shape: shape.name.clone(),
                        format: f.name,
                        path: name.clone(),
                        m,
                        launches,
                        us,
                        graph_us,
                        gbs: bytes / us / 1e3,
                        cublas_us: cublas_at(m),
                        ggml_gbs: ggml_gbs(m),
                    })
                    .map_err(|e| (format!("{} {} {name}", shape.name, f.name), e.to_string()));
                report.decode.push(row);
            }
            for &n in &ns {
                let flop = 6.0 * (shape.h * shape.i * n) as f64;
                let row = time_prefill(&gpu, &layer, &mut ctx, x.ptr(), n, &stream, &reps)
                    .map(|(arm, us)| PrefillRow {
                        shape: shape.name.clone(),
                        format: f.name,
                        n,
                        arm,
                        us,
                        tflops: flop / us / 1e6,
                        cublas_tflops: cublas_at(n).map(|t| flop / t / 1e6),
                        ggml_tflops: ggml_at(&report.ggml, f.ggml, Unit::Tflops, n),
                    })
                    .map_err(|e| {
                        (
                            format!("{} {} forward_prefill({n})", shape.name, f.name),
                            e.to_string(),
                        )
                    });
                report.prefill.push(row);
            }
            (f.remove)(&mut layer);
        }
    }
    report.shapes = shapes;

    let md = markdown(&report);
    println!("{md}");
    let write = |name: &str, data: &[u8]| {
        let p = args.out.join(name);
        std::fs::write(&p, data)
            .map_err(|e| Error::Invalid(format!("writing {}: {e}", p.display())))?;
        eprintln!("wrote {}", p.display());
        Ok::<_, Error>(())
    };
    write("bench.md", md.as_bytes())?;
    write("bench.json", json(&report).to_string().as_bytes())?;
    for p in plot::plots(&report, &args.out)? {
        eprintln!("wrote {}", p.display());
    }
    Ok(())
}

/// The shapes `--shapes` and `--hidden/--intermediate` name, or the backend's default.
fn shapes(args: &BenchArgs, cuda: bool) -> Result<Vec<Shape>> {
    let model = |m: &(&str, &str, usize, usize, FfnActivation)| Shape {
        name: m.0.into(),
        h: m.2,
        i: m.3,
        act: m.4,
    };
    let mut v = Vec::new();
    for s in &args.shapes {
        if s.eq_ignore_ascii_case("all") {
            v.extend(MODELS.iter().map(model));
            continue;
        }
        let m = MODELS
            .iter()
            .find(|m| s.eq_ignore_ascii_case(m.0) || s.eq_ignore_ascii_case(m.1))
            .ok_or_else(|| {
                let known: Vec<String> = MODELS
                    .iter()
                    .map(|m| format!("{} ({})", m.0, m.1))
                    .collect();
                Error::Invalid(format!(
                    "--shapes: unknown `{s}` (known: {}, all)",
                    known.join(", ")
                ))
            })?;
        v.push(model(m));
    }
    let act = match args.activation {
        ActArg::Silu => FfnActivation::Silu,
        ActArg::Gelu => FfnActivation::Gelu,
    };
    if let (Some(h), Some(i)) = (args.hidden, args.intermediate) {
        v.push(Shape {
            name: format!("custom-{h}x{i}"),
            h,
            i,
            act,
        });
    }
    if v.is_empty() {
        if cuda {
            v.extend(MODELS.iter().map(model));
        } else {
            v.push(Shape {
                name: "small-256x512".into(),
                h: 256,
                i: 512,
                act,
            });
        }
    }
    Ok(v)
}

/// `--m`: `A..B` (inclusive; `A..=B` too) or a comma-separated list, each in 1..=8.
fn parse_m(s: &str) -> Result<Vec<usize>> {
    let bad = || {
        Error::Invalid(format!(
            "--m `{s}`: expected A..B or a list like 1,2,4,8 (each 1..={MAX_GEMV_TOKENS})"
        ))
    };
    let num = |t: &str| t.trim().parse::<usize>().map_err(|_| bad());
    let v: Vec<usize> = match s.split_once("..") {
        Some((a, b)) => {
            let (a, b) = (num(a)?, num(b.trim_start_matches('='))?);
            (a..=b).collect()
        }
        None => s.split(',').map(num).collect::<Result<_>>()?,
    };
    if v.is_empty() || v.iter().any(|m| !(1..=MAX_GEMV_TOKENS).contains(m)) {
        return Err(bad());
    }
    Ok(v)
}

/// The ggml figure of type `ty` in `unit` at `n` tokens, if the table has one.
fn ggml_at(points: &[GgmlPoint], ty: &str, unit: Unit, n: usize) -> Option<f64> {
    anchors::series(points, ty, unit)
        .into_iter()
        .find(|p| p.0 == n)
        .map(|p| p.1)
}

/// A decode or verify path.
#[derive(Clone, Copy)]
enum Path {
    Forward,
    K(usize),
    Km(usize),
}

fn call(
    layer: &DenseFfnLayer,
    ctx: &mut ForwardContext,
    x: DevicePtr,
    path: Path,
    stream: u64,
) -> Result<()> {
    match path {
        Path::Forward => layer.forward(x, ctx, stream),
        Path::K(2) => layer.forward_k2(x, ctx, stream),
        Path::K(_) => layer.forward_k3(x, ctx, stream),
        Path::Km(m) => layer.forward_km(x, m, ctx, stream),
    }
    .map(|_| ())
}

/// (µs direct, µs graph-replayed, launches per call) of one decode path. A capture that fails
/// is reported on stderr and leaves the graph column empty.
fn time_decode(
    gpu: &Arc<dyn GpuBackend>,
    layer: &DenseFfnLayer,
    ctx: &mut ForwardContext,
    x: DevicePtr,
    path: Path,
    stream: &Stream,
    reps: &Reps,
) -> Result<(f64, Option<f64>, u64)> {
    let s = stream.raw();
    let before = gpu.launch_count();
    call(layer, ctx, x, path, s)?;
    let launches = gpu.launch_count() - before;
    let (r, it) = reps.decode;
    let us = timing::median_us(&**gpu, s, r, it, || call(layer, ctx, x, path, s))?;
    let graph_us = Graph::capture(gpu, s, || call(layer, ctx, x, path, s)).and_then(|(g, ())| {
        g.launch(s)?;
        timing::median_us(&**gpu, s, r, it, || g.launch(s))
    });
    let graph_us = graph_us
        .map_err(|e| eprintln!("  graph replay unavailable: {e}"))
        .ok();
    Ok((us, graph_us, launches))
}

/// (arm, µs) of `forward_prefill(n)`.
fn time_prefill(
    gpu: &Arc<dyn GpuBackend>,
    layer: &DenseFfnLayer,
    ctx: &mut ForwardContext,
    x: DevicePtr,
    n: usize,
    stream: &Stream,
    reps: &Reps,
) -> Result<(String, f64)> {
    let s = stream.raw();
    let arm = layer.prefill_arm()?.name().to_string();
    layer.forward_prefill(x, n, ctx, s)?;
    let (r, it) = reps.prefill;
    let us = timing::median_us(&**gpu, s, r, it, || {
        layer.forward_prefill(x, n, ctx, s).map(|_| ())
    })?;
    Ok((arm, us))
}

/// The cuBLAS bf16 FFN of each shape, or why there is none.
struct CublasAnchor {
    #[cfg(feature = "cublas")]
    blas: Option<denseffn::bench::cublas::Cublas>,
    note: String,
}

impl CublasAnchor {
    #[cfg(feature = "cublas")]
    fn new(cuda: bool) -> Self {
        if !cuda {
            return CublasAnchor {
                blas: None,
                note: "none on the CPU reference backend".into(),
            };
        }
        match denseffn::bench::cublas::Cublas::new() {
            Ok(b) => CublasAnchor {
                blas: Some(b),
                note: "bf16 FFN, same run".into(),
            },
            Err(e) => {
                eprintln!("warning: no cuBLAS column: {e}");
                CublasAnchor {
                    blas: None,
                    note: format!("unavailable ({e})"),
                }
            }
        }
    }

    #[cfg(not(feature = "cublas"))]
    fn new(_cuda: bool) -> Self {
        CublasAnchor {
            note: "unavailable (built without the `cublas` feature)".into(),
        }
    }

    /// (tokens, µs) of the cuBLAS FFN of `shape` for each of `tokens`; empty when there is no
    /// cuBLAS (a failure here is reported and leaves the column empty, the bench goes on).
    #[cfg(feature = "cublas")]
    fn times(
        &self,
        gpu: &Arc<dyn GpuBackend>,
        shape: &Shape,
        tokens: &[usize],
        reps: &Reps,
        rng: &mut SmallRng,
    ) -> Vec<(usize, f64)> {
        let Some(blas) = &self.blas else {
            return Vec::new();
        };
        let max = tokens.iter().copied().max().unwrap_or(1);
        let r = denseffn::bench::cublas::CublasFfn::new(gpu, shape.h, shape.i, max, rng).and_then(
            |ffn| {
                tokens
                    .iter()
                    .map(|&t| {
                        let (r, it) = if t <= MAX_GEMV_TOKENS {
                            reps.decode
                        } else {
                            reps.prefill
                        };
                        ffn.run(blas, t)?;
                        Ok((t, timing::median_us(&**gpu, 0, r, it, || ffn.run(blas, t))?))
                    })
                    .collect::<Result<Vec<_>>>()
            },
        );
        r.unwrap_or_else(|e| {
            eprintln!("warning: cuBLAS anchor of {} failed: {e}", shape.name);
            Vec::new()
        })
    }

    #[cfg(not(feature = "cublas"))]
    fn times(
        &self,
        _gpu: &Arc<dyn GpuBackend>,
        _shape: &Shape,
        _tokens: &[usize],
        _reps: &Reps,
        _rng: &mut SmallRng,
    ) -> Vec<(usize, f64)> {
        Vec::new()
    }
}

/// `v` with three significant digits (at least none after the point for ≥ 100).
fn sig(v: f64) -> String {
    let a = v.abs();
    let prec = if a >= 100.0 || a == 0.0 {
        0
    } else {
        (2 - a.log10().floor() as i32).clamp(0, 6) as usize
    };
    format!("{v:.prec$}")
}

/// `sig(v)`, or a dash when there is no (finite) figure.
fn opt(v: Option<f64>) -> String {
    v.filter(|v| v.is_finite()).map_or("–".into(), sig)
}

/// The report as markdown: a header naming the device and anchors, then the decode and the
/// prefill table.
pub fn markdown(r: &Report) -> String {
    let mut md = format!(
        "# denseffn bench\n\nDevice: {} (backend {}). Copy (device to device, read + write): {:.0} GB/s. cuBLAS: {}.\n\n\
         Weight GB/s = the weight bytes a call reads once ÷ its time; ÷ copy = that ÷ the copy bandwidth. \
         graph µs = the same call replayed from a captured graph; launch overhead = µs − graph µs. \
         cuBLAS ÷ ours = the cuBLAS bf16 FFN's time at the same tokens ÷ ours. \
         TFLOP/s counts 6·hidden·intermediate·N; ÷ cuBLAS = ours ÷ the cuBLAS bf16 FFN's. \
         ggml = ggml MUL_MAT of one 4096×14336 matrix on our H200 (docs/perf/anchors/ggml-h200.md), \
         the format's nearest ggml type ({}).\n\n",
        r.device,
        r.backend,
        r.copy_gbs,
        r.cublas_note,
        r.formats
            .iter()
            .map(|f| format!("{} → {}", f.name, f.ggml))
            .collect::<Vec<_>>()
            .join(", ")
    );
    md.push_str("## Decode and verify\n\n| model | format | path | m | launches | µs | graph µs | launch overhead µs | weight GB/s | ÷ copy | cuBLAS bf16 µs | cuBLAS ÷ ours | ggml GB/s (n = m) |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for row in &r.decode {
        match row {
            Ok(d) => md.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
                d.shape,
                d.format,
                d.path,
                d.m,
                d.launches,
                sig(d.us),
                opt(d.graph_us),
                opt(d.graph_us.map(|g| d.us - g)),
                sig(d.gbs),
                sig(d.gbs / r.copy_gbs),
                opt(d.cublas_us),
                opt(d.cublas_us.map(|c| c / d.us)),
                opt(d.ggml_gbs),
            )),
            Err((what, why)) => md.push_str(&format!("| {what} | not run: {why} ||||||||||||\n")),
        }
    }
    let scaling = km_scaling(r);
    if !scaling.is_empty() {
        md.push_str(
            "\n## forward_km scaling\n\ntime(m) ÷ time(1), with time(1) = `forward_km(1)` (the same \
             path at one token), and ÷ `forward()` (the single-token decode path).\n\n\
             | model | format | m | forward_km µs | ÷ forward_km(1) | ÷ forward() |\n|---|---|---|---|---|---|\n",
        );
        for k in &scaling {
            md.push_str(&format!(
                "| {} | {} | {} | {} | {:.2} | {} |\n",
                k.shape,
                k.format,
                k.m,
                sig(k.us),
                k.vs_km1,
                k.vs_forward.map_or("–".into(), |v| format!("{v:.2}")),
            ));
        }
    }
    md.push_str("\n## Prefill\n\n| model | format | path | N | arm | µs | TFLOP/s | cuBLAS bf16 TFLOP/s | ÷ cuBLAS | ggml TFLOP/s (n = N) |\n|---|---|---|---|---|---|---|---|---|---|\n");
    for row in &r.prefill {
        match row {
            Ok(p) => md.push_str(&format!(
                "| {} | {} | forward_prefill({}) | {} | {} | {} | {} | {} | {} | {} |\n",
                p.shape,
                p.format,
                p.n,
                p.n,
                p.arm,
                sig(p.us),
                sig(p.tflops),
                opt(p.cublas_tflops),
                opt(p.cublas_tflops.map(|c| p.tflops / c)),
                opt(p.ggml_tflops),
            )),
            Err((what, why)) => md.push_str(&format!("| {what} | not run: {why} |||||||||\n")),
        }
    }
    md
}

/// One `forward_km(m)` time against the same shape and format's `forward_km(1)` and `forward()`.
struct KmScaling<'a> {
    shape: &'a str,
    format: &'static str,
    m: usize,
    us: f64,
    vs_km1: f64,
    vs_forward: Option<f64>,
}

/// Issue 3's time(m) ÷ time(1) from the decode rows: every measured `forward_km(m)` of a shape
/// and format whose `forward_km(1)` was measured too, also against its `forward()` when that was.
fn km_scaling(r: &Report) -> Vec<KmScaling<'_>> {
    let rows: Vec<&DecodeRow> = r.decode.iter().filter_map(|d| d.as_ref().ok()).collect();
    let find = |shape: &str, format: &str, path: &str| {
        rows.iter()
            .find(|d| d.shape == shape && d.format == format && d.path == path)
            .map(|d| d.us)
    };
    rows.iter()
        .filter(|d| d.path.starts_with("forward_km("))
        .filter_map(|d| {
            let km1 = find(&d.shape, d.format, "forward_km(1)")?;
            Some(KmScaling {
                shape: &d.shape,
                format: d.format,
                m: d.m,
                us: d.us,
                vs_km1: d.us / km1,
                vs_forward: find(&d.shape, d.format, "forward").map(|f| d.us / f),
            })
        })
        .collect()
}

/// The report as JSON: the header fields, then one object per row (failed rows with `error`).
fn json(r: &Report) -> serde_json::Value {
    let err = |what: &str, why: &str| serde_json::json!({ "row": what, "error": why });
    let decode: Vec<serde_json::Value> = r
        .decode
        .iter()
        .map(|row| match row {
            Ok(d) => serde_json::json!({
                "model": d.shape, "format": d.format, "path": d.path, "m": d.m,
                "launches": d.launches, "us": d.us, "graph_us": d.graph_us,
                "weight_GBps": d.gbs, "copy_ratio": d.gbs / r.copy_gbs,
                "cublas_us": d.cublas_us, "ggml_GBps": d.ggml_gbs,
            }),
            Err((what, why)) => err(what, why),
        })
        .collect();
    let prefill: Vec<serde_json::Value> = r
        .prefill
        .iter()
        .map(|row| match row {
            Ok(p) => serde_json::json!({
                "model": p.shape, "format": p.format, "path": format!("forward_prefill({})", p.n),
                "n": p.n, "arm": p.arm, "us": p.us, "TFLOPs": p.tflops,
                "cublas_TFLOPs": p.cublas_tflops, "ggml_TFLOPs": p.ggml_tflops,
            }),
            Err((what, why)) => err(what, why),
        })
        .collect();
    let km: Vec<serde_json::Value> = km_scaling(r)
        .iter()
        .map(|k| {
            serde_json::json!({
                "model": k.shape, "format": k.format, "m": k.m, "us": k.us,
                "over_km1": k.vs_km1, "over_forward": k.vs_forward,
            })
        })
        .collect();
    serde_json::json!({
        "device": r.device, "backend": r.backend, "copy_GBps": r.copy_gbs,
        "cublas": r.cublas_note, "decode": decode, "km_scaling": km, "prefill": prefill,
    })
}
