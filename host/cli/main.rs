//! `denseffn`: run the FFN paths of a layer (synthetic, or one loaded from a ModelOpt NVFP4
//! safetensors checkpoint) on the best backend present and check them against the CPU reference
//! and an f64 computation; list a checkpoint's FFN tensors; benchmark every path and format;
//! compare two benchmark reports.
mod bench;
mod compare;
mod plot;

use clap::{Parser, Subcommand, ValueEnum};
use denseffn::backend::{CpuBackend, CudaBackend, DevicePtr, GpuBackend};
use denseffn::layer::{DenseFfnLayer, FfnActivation, ForwardContext};
use denseffn::pack::random_activations;
use denseffn::reference::{ffn_f64, rel_l2};
use half::bf16;
use rand::rngs::SmallRng;
use rand::SeedableRng;
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[derive(Parser)]
#[command(
    name = "denseffn",
    version,
    about = "Dense transformer FFN blocks on NVIDIA GPUs"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Clone, Copy, ValueEnum, PartialEq)]
enum BackendArg {
    /// CUDA when a GPU and driver are present, else the CPU reference.
    Auto,
    Cuda,
    Cpu,
}

#[derive(Clone, Copy, ValueEnum)]
enum ActArg {
    Silu,
    Gelu,
}

#[derive(Subcommand)]
enum Cmd {
    /// Build a layer (a deterministic synthetic NVFP4 layer, or with --model one layer of a
    /// checkpoint), run every path it supports, check each against the references and print a
    /// table.
    Run {
        #[arg(long, value_enum, default_value = "auto")]
        backend: BackendArg,
        /// Model width of the synthetic layer.
        #[arg(long, default_value_t = 2048)]
        hidden: usize,
        /// FFN width of the synthetic layer.
        #[arg(long, default_value_t = 5632)]
        intermediate: usize,
        /// Load the layer from this ModelOpt NVFP4 safetensors checkpoint (a .safetensors file,
        /// a model.safetensors.index.json, or a model directory) instead of making one; its
        /// shapes replace --hidden/--intermediate.
        #[arg(long, value_name = "PATH", conflicts_with_all = ["hidden", "intermediate"])]
        model: Option<PathBuf>,
        /// Which layer of --model to load.
        #[arg(long, value_name = "N", requires = "model")]
        layer: Option<usize>,
        #[arg(long, value_enum, default_value = "silu")]
        activation: ActArg,
        /// Tokens T: forward_batched(T), forward_km(m) for m ≤ min(T, 8), forward_k2/k3 when
        /// T ≥ 2/3, forward_prefill(T).
        #[arg(long, default_value_t = 8)]
        tokens: usize,
        /// Input activations: raw little-endian f32 [T, hidden] (default: seeded N(0, 1)).
        #[arg(long, value_name = "X.f32")]
        input: Option<PathBuf>,
        /// Write the prefill result (the decode result for T = 1) as raw little-endian f32
        /// [T, hidden].
        #[arg(long, value_name = "Y.f32")]
        output: Option<PathBuf>,
        /// Seed of the synthetic weights and of the inputs.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Print the table as JSON.
        #[arg(long)]
        json: bool,
    },
    /// List the FFN tensors (model.layers.N.mlp.* of a safetensors checkpoint, or
    /// blk.N.ffn_{gate,up,down}.weight of a GGUF file): one row per tensor (dtype, shape,
    /// bytes), then one per layer (format, logical shapes, bytes).
    Inspect {
        /// A .safetensors file, a model.safetensors.index.json, a model directory, or a .gguf
        /// file.
        path: PathBuf,
    },
    /// Measure every decode, verify and prefill path of every weight format per model shape,
    /// beside copy bandwidth, a cuBLAS bf16 FFN and ggml's H200 figures; write bench.md,
    /// bench.json and SVG plots to --out.
    Bench(bench::BenchArgs),
    /// Compare two bench.json files of `denseffn bench` (a baseline and a change) row by row:
    /// µs, graph-replayed µs and the relative change of every path both measured.
    Compare(compare::CompareArgs),
}

/// Where the layer's weights come from.
enum Source {
    Synthetic { hidden: usize, intermediate: usize },
    Model { path: PathBuf, layer: usize },
}

/// The run's input and output files.
struct Io {
    input: Option<PathBuf>,
    output: Option<PathBuf>,
}

struct Row {
    path: String,
    arm: String,
    launches: u64,
    us: f64,
    gbs: f64,
    tflops: f64,
    err_ref: f64,
    err_f64: f64,
}

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let result = match cli.cmd {
        Cmd::Run {
            backend,
            hidden,
            intermediate,
            model,
            layer,
            activation,
            tokens,
            input,
            output,
            seed,
            json,
        } => {
            let source = match model {
                Some(path) => Source::Model {
                    path,
                    layer: layer.unwrap_or(0),
                },
                None => Source::Synthetic {
                    hidden,
                    intermediate,
                },
            };
            let io = Io { input, output };
            run(backend, source, activation, tokens, &io, seed, json)
        }
        Cmd::Inspect { path } => inspect(&path),
        Cmd::Bench(args) => bench::run(args),
        Cmd::Compare(args) => compare::run(args),
    };
    if let Err(e) = result {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run(
    backend: BackendArg,
    source: Source,
    act: ActArg,
    tokens: usize,
    io: &Io,
    seed: u64,
    json: bool,
) -> denseffn::Result<()> {
    if tokens == 0 {
        return Err(denseffn::Error::Invalid(
            "--tokens must be at least 1".into(),
        ));
    }
    let act = match act {
        ActArg::Silu => FfnActivation::Silu,
        ActArg::Gelu => FfnActivation::Gelu,
    };
    let gpu = open_backend(backend)?;
    let reference: Arc<dyn GpuBackend> = Arc::new(CpuBackend::new());
    let mut rng = SmallRng::seed_from_u64(seed);
    let bar = progress(json, 4, "loading weights");
    let (host, what) = match &source {
        Source::Synthetic {
            hidden: h,
            intermediate: i,
        } => {
            let (h, i) = (*h, *i);
            let (gate, up, down) = denseffn::bench::synth::nvfp4_ffn(h, i, &mut rng)?;
            (
                denseffn::load::HostFfn::Nvfp4([gate, up, down]),
                format!("synthetic NVFP4 {h}×{i}"),
            )
        }
        Source::Model { path, layer } => {
            let host = denseffn::load::load_ffn(path, *layer)?;
            let (h, i) = host.dims();
            let what = format!(
                "{} layer {layer} of {} ({h}×{i})",
                host.format().to_uppercase(),
                path.display()
            );
            (host, what)
        }
    };
    bar.inc(1);
    let (h, i) = host.dims();
    eprintln!(
        "layer: {what}, {act:?}, seed {seed}; backend {} ({})",
        gpu.name(),
        gpu.device_name()
    );
    let x = match &io.input {
        None => random_activations(tokens * h, &mut rng),
        // The layer takes bf16: the reference gets the same rounded values.
        Some(p) => read_f32(p, tokens * h)?
            .into_iter()
            .map(|v| bf16::from_f32(v).to_f32())
            .collect(),
    };
    bar.set_message("f64 reference");
    let [gv, uv, dv] = host.values();
    let want = ffn_f64(&gv, &uv, &dv, h, i, &x, act);

    let make =
        |g: &Arc<dyn GpuBackend>| -> denseffn::Result<(DenseFfnLayer, ForwardContext, DevicePtr)> {
            let layer = host.layer(g, act)?;
            let ctx = ForwardContext::new(&layer, tokens)?;
            let xin = g.alloc(x.len() * 2)?;
            let bytes: Vec<u8> = x
                .iter()
                .flat_map(|v| bf16::from_f32(*v).to_bits().to_le_bytes())
                .collect();
            g.upload(xin, &bytes)?;
            Ok((layer, ctx, xin))
        };
    bar.inc(1);
    bar.set_message(format!("uploading to {}", gpu.name()));
    let (layer, mut ctx, xin) = make(&gpu)?;
    bar.inc(1);
    bar.set_message("uploading to the CPU reference");
    let (rlayer, mut rctx, rxin) = make(&reference)?;
    bar.finish_and_clear();
    // The bytes one decode step streams: the active overlay's, else the NVFP4 decode copies.
    let fp = layer.footprint();
    let wbytes = if layer.active_overlay().is_some() {
        fp.overlays
    } else {
        fp.decode_weights
    } as f64;
    let flop_per_token = 2.0 * 3.0 * h as f64 * i as f64;

    let mut rows = Vec::new();
    // (name, arm, tokens, weight passes, call)
    type PathFn =
        Box<dyn Fn(&DenseFfnLayer, DevicePtr, &mut ForwardContext) -> denseffn::Result<DevicePtr>>;
    let mut paths: Vec<(String, String, usize, usize, PathFn)> = vec![
        (
            "forward".into(),
            "decode".into(),
            1,
            1,
            Box::new(|l, x, c| l.forward(x, c, 0)),
        ),
        (
            format!("forward_batched({tokens})"),
            "decode".into(),
            tokens,
            tokens,
            Box::new(move |l, x, c| l.forward_batched(x, tokens, c, 0)),
        ),
    ];
    if tokens >= 2 {
        paths.push((
            "forward_k2".into(),
            "verify".into(),
            2,
            1,
            Box::new(|l, x, c| l.forward_k2(x, c, 0)),
        ));
    }
    if tokens >= 3 {
        paths.push((
            "forward_k3".into(),
            "verify".into(),
            3,
            1,
            Box::new(|l, x, c| l.forward_k3(x, c, 0)),
        ));
    }
    for m in 1..=tokens.min(8) {
        if layer.can_forward_km(m) {
            paths.push((
                format!("forward_km({m})"),
                "verify".into(),
                m,
                1,
                Box::new(move |l, x, c| l.forward_km(x, m, c, 0)),
            ));
        }
    }
    let arm = layer
        .prefill_arm_for(tokens)
        .map(|a| a.name().to_string())
        .unwrap_or_else(|e| format!("none: {e}"));
    paths.push((
        format!("forward_prefill({tokens})"),
        arm,
        tokens,
        1,
        Box::new(move |l, x, c| l.forward_prefill(x, tokens, c, 0)),
    ));
    let mut output = None;
    for (name, arm, n, passes, f) in paths {
        let before = gpu.launch_count();
        let out = f(&layer, xin, &mut ctx)?;
        let launches = gpu.launch_count() - before;
        let got = download(&gpu, out, n * h)?;
        let rgot = download(&reference, f(&rlayer, rxin, &mut rctx)?, n * h)?;
        if name.starts_with("forward_prefill") || (tokens == 1 && name == "forward") {
            output = Some(got.clone());
        }
        // Time: GPU events around repeated calls (wall time on the CPU backend).
        let reps = if gpu.name() == "cpu" { 1 } else { 20 };
        let a = gpu.record_event(0)?;
        for _ in 0..reps {
            f(&layer, xin, &mut ctx)?;
        }
        let b = gpu.record_event(0)?;
        let us = gpu.elapsed_ms(a, b)? as f64 * 1e3 / reps as f64;
        rows.push(Row {
            path: name,
            arm,
            launches,
            us,
            gbs: wbytes * passes as f64 / us / 1e3,
            tflops: flop_per_token * n as f64 / us / 1e6,
            err_ref: rel_l2(&got, &rgot),
            err_f64: rel_l2(&got, &want[..n * h]),
        });
    }
    if let (Some(p), Some(y)) = (&io.output, output) {
        let bytes: Vec<u8> = y.iter().flat_map(|v| (*v as f32).to_le_bytes()).collect();
        std::fs::write(p, bytes)
            .map_err(|e| denseffn::Error::Invalid(format!("writing {}: {e}", p.display())))?;
    }
    print_rows(&rows, gpu.name(), json);
    let worst = rows.iter().map(|r| r.err_f64).fold(0.0, f64::max);
    if worst > 1e-2 {
        return Err(denseffn::Error::Invalid(format!(
            "relative error {worst:.2e} exceeds 1e-2"
        )));
    }
    Ok(())
}

/// The backend `--backend` asks for (auto: CUDA when present, else the CPU reference, saying why).
fn open_backend(backend: BackendArg) -> denseffn::Result<Arc<dyn GpuBackend>> {
    Ok(match backend {
        BackendArg::Cpu => Arc::new(CpuBackend::new()),
        BackendArg::Cuda => Arc::new(CudaBackend::new()?),
        BackendArg::Auto => {
            let (g, why) = denseffn::best_backend();
            if let Some(e) = why {
                eprintln!("no usable GPU ({e}); running on the CPU reference backend");
            }
            g
        }
    })
}

/// A progress bar on stderr (hidden with --json, so stdout stays machine-readable).
fn progress(json: bool, steps: u64, msg: &'static str) -> indicatif::ProgressBar {
    let bar = if json {
        indicatif::ProgressBar::hidden()
    } else {
        indicatif::ProgressBar::new(steps)
    };
    if let Ok(style) = indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} {msg}") {
        bar.set_style(style);
    }
    bar.set_message(msg);
    bar
}

/// `n` raw little-endian f32 values from `path` (exactly `4n` bytes).
fn read_f32(path: &Path, n: usize) -> denseffn::Result<Vec<f32>> {
    let b = std::fs::read(path)
        .map_err(|e| denseffn::Error::Invalid(format!("reading {}: {e}", path.display())))?;
    if b.len() != n * 4 {
        return Err(denseffn::Error::Invalid(format!(
            "{}: {} bytes, expected {} (f32 [tokens, hidden] = {n} values)",
            path.display(),
            b.len(),
            n * 4
        )));
    }
    Ok(b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

fn download(g: &Arc<dyn GpuBackend>, p: DevicePtr, n: usize) -> denseffn::Result<Vec<f64>> {
    let mut b = vec![0u8; n * 2];
    g.download(&mut b, p)?;
    Ok(b.chunks_exact(2)
        .map(|c| bf16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f64())
        .collect())
}

fn print_rows(rows: &[Row], backend: &str, json: bool) {
    if json {
        let items: Vec<serde_json::Value> = rows
            .iter()
            .map(|r| {
                serde_json::json!({
                    "path": r.path, "arm": r.arm, "backend": backend, "launches": r.launches,
                    "us": r.us, "weight_GBps": r.gbs, "TFLOPs": r.tflops,
                    "rel_err_vs_cpu_reference": r.err_ref, "rel_err_vs_f64": r.err_f64,
                })
            })
            .collect();
        println!("{}", serde_json::Value::Array(items));
        return;
    }
    println!("| path | arm | backend | launches | time µs | weight GB/s | TFLOP/s | rel err vs CPU reference | rel err vs f64 |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for r in rows {
        println!(
            "| {} | {} | {backend} | {} | {:.1} | {:.0} | {:.2} | {:.2e} | {:.2e} |",
            r.path, r.arm, r.launches, r.us, r.gbs, r.tflops, r.err_ref, r.err_f64
        );
    }
}

/// `denseffn inspect FILE.gguf`: the FFN weights of a GGUF file, then a summary per layer.
fn inspect_gguf(path: &Path) -> denseffn::Result<()> {
    let list = denseffn::load::gguf::inspect_gguf(path)?;
    if list.is_empty() {
        println!(
            "{}: no FFN tensors (blk.N.ffn_{{gate,up,down}}.weight)",
            path.display()
        );
        return Ok(());
    }
    let shape = |s: &[usize]| {
        let dims: Vec<String> = s.iter().map(|d| d.to_string()).collect();
        format!("[{}]", dims.join(", "))
    };
    let bytes = |b: Option<usize>| b.map_or("?".to_string(), |b| b.to_string());
    println!("| layer | tensor | ggml type | shape | bytes |");
    println!("|---|---|---|---|---|");
    for t in &list {
        println!(
            "| {} | {} | {} | {} | {} |",
            t.layer,
            t.short_name(),
            t.type_name,
            shape(&t.shape),
            bytes(t.bytes)
        );
    }
    println!();
    println!("| layer | format | gate | up | down | bytes |");
    println!("|---|---|---|---|---|---|");
    let (mut total, mut layers, mut start) = (0, 0, 0);
    while start < list.len() {
        let layer = list[start].layer;
        let n = list[start..]
            .iter()
            .take_while(|t| t.layer == layer)
            .count();
        let tensors = &list[start..start + n];
        let get = |p: &str| {
            tensors
                .iter()
                .find(|t| t.short_name() == format!("{p}.weight"))
        };
        let mut types: Vec<&str> = tensors.iter().map(|t| t.type_name.as_str()).collect();
        types.dedup();
        let format = types.join(" + ");
        let logical = |p: &str| get(p).map_or("-".into(), |t| shape(&t.shape));
        let sum: usize = tensors.iter().filter_map(|t| t.bytes).sum();
        println!(
            "| {layer} | {format} | {} | {} | {} | {sum} |",
            logical("ffn_gate"),
            logical("ffn_up"),
            logical("ffn_down")
        );
        total += sum;
        layers += 1;
        start += n;
    }
    println!();
    println!(
        "{layers} layers with FFN tensors, {} tensors, {total} bytes",
        list.len()
    );
    Ok(())
}

/// `denseffn inspect PATH`: the FFN tensors of a checkpoint, then a summary per layer.
fn inspect(path: &Path) -> denseffn::Result<()> {
    if denseffn::load::is_gguf(path) {
        return inspect_gguf(path);
    }
    let list = denseffn::load::inspect(path)?;
    if list.is_empty() {
        println!("{}: no FFN tensors (model.layers.N.mlp.*)", path.display());
        return Ok(());
    }
    let shape = |s: &[usize]| {
        let dims: Vec<String> = s.iter().map(|d| d.to_string()).collect();
        format!("[{}]", dims.join(", "))
    };
    println!("| layer | tensor | dtype | shape | bytes |");
    println!("|---|---|---|---|---|");
    for t in &list {
        println!(
            "| {} | {} | {} | {} | {} |",
            t.layer,
            t.short_name(),
            t.dtype,
            shape(&t.shape),
            t.bytes
        );
    }
    println!();
    println!("| layer | format | gate | up | down | bytes |");
    println!("|---|---|---|---|---|---|");
    let mut total = 0;
    let mut layers = 0;
    let mut start = 0;
    while start < list.len() {
        let layer = list[start].layer;
        let end = start
            + list[start..]
                .iter()
                .take_while(|t| t.layer == layer)
                .count();
        let tensors = &list[start..end];
        let get = |n: &str| tensors.iter().find(|t| t.short_name() == n);
        let nvfp4 = denseffn::load::safetensors::PROJECTIONS.iter().all(|p| {
            get(&format!("{p}.weight")).is_some_and(|t| t.dtype == "U8" && t.shape.len() == 2)
                && get(&format!("{p}.weight_scale")).is_some_and(|t| t.dtype == "F8_E4M3")
                && get(&format!("{p}.weight_scale_2")).is_some_and(|t| t.dtype == "F32")
        });
        // Logical [out, in] of each projection (NVFP4 packs two values per byte).
        let logical = |p: &str| match get(&format!("{p}.weight")) {
            Some(t) if nvfp4 => format!("[{}, {}]", t.shape[0], t.shape[1] * 2),
            Some(t) => shape(&t.shape),
            None => "-".into(),
        };
        let format = if nvfp4 {
            "NVFP4".to_string()
        } else {
            let mut d: Vec<&str> = tensors.iter().map(|t| t.dtype.as_str()).collect();
            d.sort();
            d.dedup();
            format!("other ({})", d.join(", "))
        };
        let bytes: usize = tensors.iter().map(|t| t.bytes).sum();
        println!(
            "| {layer} | {format} | {} | {} | {} | {bytes} |",
            logical("gate_proj"),
            logical("up_proj"),
            logical("down_proj")
        );
        total += bytes;
        layers += 1;
        start = end;
    }
    println!();
    println!(
        "{layers} layers with FFN tensors, {} tensors, {total} bytes",
        list.len()
    );
    Ok(())
}
