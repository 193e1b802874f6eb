//! What each kernel computes, in plain Rust with f64 accumulation: the reference the GPU
//! kernels of the same names are tested against. Grid, block and split-K fields of a launch
//! only shape the GPU's schedule, so they are validated but do not change the result here.
use super::cpu::Memory;
use super::{Launch, TileMap, TileMapSpec};
use crate::error::{Error, Result};
use denseffn_device::formats::e4m3;
use denseffn_device::formats::nvfp4::{self, TILE_CODE_BYTES, TILE_K, TILE_ROWS, TILE_SCALE_BYTES};
use denseffn_device::formats::packed::{pow2_scale, word_of};
use denseffn_device::formats::tiles::TileFormat;
use denseffn_device::params::{
    gemm_grid, gemm_shape, gemv_smem_bytes, source, ActPackParams, ElementwiseParams, GemmParams,
    GemvParams, LoraShrinkParams, ParamBlock, Q8Params, GEMM_PAIR_SUFFIX, GEMM_WG_TOKENS,
    GEMV_ROWS_PER_BLOCK, GEMV_SMEM_HEADER, GEMV_THREADS, LORA_MAX_RANK, LORA_RANK_STEP,
    PACK_SCALE_STRIDE, PACK_SMEM_BYTES, PACK_THREADS,
};
use half::{bf16, f16};

/// Kernels the CPU backend can execute.
pub(crate) const KERNELS: &[&str] = &[
    "gemv_nvfp4_gate_up",
    "gemv_nvfp4_silu_down",
    "gemv_nvfp4_down",
    "gemv_batch2_nvfp4_gate_up",
    "gemv_batch3_nvfp4_gate_up",
    "gemv_batch2_nvfp4_down",
    "gemv_batch3_nvfp4_down",
    "gemv_batchm_nvfp4",
    "gemv_batch8_nvfp4",
    "gelu_mul",
    "gelu_mul_pack",
    "silu_mul_pack",
    "gemm_nvfp4_t_gate_up_act",
    "gemm_nvfp4_t_down",
    "gemm_nvfp4_t_down_splitk",
    "bf16_gemv_gate_up",
    "bf16_gemv",
    "bf16_gemm_gate_up_act",
    "bf16_gemm_gate_up_act_splitk",
    "bf16_gemm",
    "bf16_gemm_splitk",
    "bf16_gemm_gate_up_act_x2",
    "bf16_gemm_gate_up_act_splitk_x2",
    "bf16_gemm_x2",
    "bf16_gemm_splitk_x2",
    "w8a16_gemv_gate_up",
    "w8a16_gemv",
    "w8a16_gemm_gate_up_act",
    "w8a16_gemm",
    "w8a16_gemm_gate_up_act_x2",
    "w8a16_gemm_x2",
    "quantize_f16_act",
    "q2_0_gemv_gate_up",
    "q2_0_gemv",
    "q2_0_gemm_gate_up_act",
    "q2_0_gemm",
    "q2_0_gemm_splitk",
    "q4k_gemv_gate_up",
    "q4k_gemv",
    "q4k_gemm_gate_up_act",
    "q4k_gemm",
    "q4k_gemm_splitk",
    "lora_shrink",
    "gemm_nvfp4_t_lora_gate_up_act",
    "gemm_nvfp4_t_lora_down",
    "quantize_q8_32",
    "q4k_mmq_gate_up_act",
    "q4k_mmq",
    "requant_nvfp4_q4k",
    "quantize_nvfp4_act",
    "nvfp4_mmq_gate_up_act",
    "quantize_e4m3_act",
    "w8a8_gemm_gate_up_act",
    "w8a8_gemm",
    "w8a8_gemm_gate_up_act_x2",
    "w8a8_gemm_x2",
];

/// The weight format a GEMV/GEMM kernel reads, from its name: the overlay prefixes, else NVFP4.
fn format_of(kernel: &str) -> Format {
    match kernel.split('_').next() {
        Some("bf16") => Format::Tiled(TileFormat::Bf16),
        Some("w8a16") | Some("w8a8") => Format::Tiled(TileFormat::Fp8),
        Some("q2") => Format::Tiled(TileFormat::Q2),
        Some("q4k") => Format::Tiled(TileFormat::Q4k),
        _ => Format::Nvfp4,
    }
}

/// A tiled weight layout the reference can decode.
#[derive(Clone, Copy)]
enum Format {
    Nvfp4,
    Tiled(TileFormat),
}

impl Format {
    fn tile_bytes(self) -> (usize, usize) {
        match self {
            Format::Nvfp4 => (TILE_CODE_BYTES, TILE_SCALE_BYTES),
            Format::Tiled(f) => (f.code_bytes(), f.scale_bytes()),
        }
    }

    fn decode_tile(self, codes: &[u8], scales: &[u8], out: &mut [[f32; TILE_K]; TILE_ROWS]) {
        match self {
            Format::Nvfp4 => nvfp4::decode_tile(codes, scales, out),
            Format::Tiled(f) => f.decode_tile(codes, scales, out),
        }
    }

    /// (code, scale) bytes of an `n × k` matrix.
    fn bytes(self, n: usize, k: usize) -> (usize, usize) {
        let tiles = (n / TILE_ROWS) * (k / TILE_K);
        let (c, s) = self.tile_bytes();
        (tiles * c, tiles * s)
    }
}

/// Runs launch `l` on the reference: `sm_count` is the backend's, for the launch checks of
/// persistent kernels (`gemm_grid`).
pub(crate) fn run(mem: &mut Memory, l: &Launch, sm_count: u32) -> Result<()> {
    match l.kernel {
        "quantize_q8_32" => super::cpu_mmq::quantize(mem, &params(l)?),
        "requant_nvfp4_q4k" => super::cpu_mmq::requant(mem, &params(l)?),
        "q4k_mmq_gate_up_act" | "q4k_mmq" => super::cpu_mmq::gemm(mem, &params(l)?),
        "quantize_nvfp4_act" => super::cpu_nvfp4_mmq::quantize(mem, &params(l)?),
        "nvfp4_mmq_gate_up_act" => super::cpu_nvfp4_mmq::gemm(mem, &params(l)?),
        "quantize_e4m3_act" => quantize_token_act(mem, &params(l)?, false),
        "quantize_f16_act" => quantize_token_act(mem, &params(l)?, true),
        k if k.contains("gemv") => {
            let p = params(l)?;
            gemv_schedule(mem, l, &p)?;
            gemv(mem, &p, format_of(k))
        }
        k if k.contains("gemm") => {
            let p = params(l)?;
            let x = gemm_schedule(mem, l, &p, sm_count)?;
            gemm(mem, &p, format_of(k), x)
        }
        "gelu_mul" => elementwise(mem, &params(l)?, gelu_tanh),
        "gelu_mul_pack" => act_pack(mem, l, &params(l)?, gelu_tanh),
        "silu_mul_pack" => act_pack(mem, l, &params(l)?, silu),
        "lora_shrink" => lora_shrink(mem, &params(l)?),
        other => Err(Error::MissingKernel(other.into())),
    }
}

fn params<P: ParamBlock>(l: &Launch) -> Result<P> {
    P::from_bytes(l.params).ok_or_else(|| {
        Error::Invalid(format!(
            "{}: parameter block of {} bytes",
            l.kernel,
            l.params.len()
        ))
    })
}

/// `x·sigmoid(x)`.
pub fn silu(x: f64) -> f64 {
    x / (1.0 + (-x).exp())
}

/// GELU, tanh form.
pub fn gelu_tanh(x: f64) -> f64 {
    let y = (2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x);
    0.5 * x * (1.0 + y.tanh())
}

fn f32s(mem: &Memory, ptr: u64, n: usize) -> Result<Vec<f32>> {
    Ok(bytemuck::allocation::pod_collect_to_vec(
        mem.read(ptr, n * 4)?,
    ))
}

fn elementwise(mem: &mut Memory, p: &ElementwiseParams, f: fn(f64) -> f64) -> Result<()> {
    let n = p.len as usize;
    let g = f32s(mem, p.g, n)?;
    let u = f32s(mem, p.u, n)?;
    let out: Vec<f32> = g
        .iter()
        .zip(&u)
        .map(|(&g, &u)| (f(g as f64) * u as f64) as f32)
        .collect();
    mem.write(p.out, n * 4)?
        .copy_from_slice(bytemuck::cast_slice(&out));
    Ok(())
}

/// `silu_mul_pack` / `gelu_mul_pack`: `a = f(g)·u` (f32, to `out` when set) packed for a GEMV with
/// `chunks_per_split` chunks per K split, as [`pack_into`] places and scales it.
fn act_pack(mem: &mut Memory, l: &Launch, p: &ActPackParams, f: fn(f64) -> f64) -> Result<()> {
    let (k, m, cps) = (p.k as usize, p.m as usize, p.chunks_per_split as usize);
    if k == 0 || k % TILE_K != 0 || !(1..=8).contains(&m) || cps == 0 {
        return Err(Error::Invalid(format!(
            "{}: k={k} m={m} chunks_per_split={cps}",
            l.kernel
        )));
    }
    let splits = (k / TILE_K).div_ceil(cps) as u32;
    if l.grid != (splits, m as u32, 1)
        || l.block != (PACK_THREADS, 1, 1)
        || l.smem < PACK_SMEM_BYTES
    {
        return Err(Error::Invalid(format!(
            "{}: grid {:?} / block {:?} / {} bytes of shared memory, want ({splits}, {m}, 1) / \
             ({PACK_THREADS}, 1, 1) / {PACK_SMEM_BYTES}",
            l.kernel, l.grid, l.block, l.smem
        )));
    }
    let g = f32s(mem, p.g, m * k)?;
    let u = f32s(mem, p.u, m * k)?;
    let a: Vec<f32> = g
        .iter()
        .zip(&u)
        .map(|(&g, &u)| (f(g as f64) * u as f64) as f32)
        .collect();
    if p.out != 0 {
        mem.write(p.out, m * k * 4)?
            .copy_from_slice(bytemuck::cast_slice(&a));
    }
    pack_into(mem, (p.packed, p.scales), m, k, cps, &a)
}

/// Writes `vals` (f32 `[m][k]`) as a `source::PACKED` buffer at `to.0` with its inverse
/// scales at `to.1`: for each K split of `cps` chunks and token, the power of two
/// ([`pow2_scale`]) of the largest magnitude (NaN-propagating, as the kernels' `max.NaN`),
/// each value scaled and rounded to f16 in its [`word_of`] slot. Scale slots of tokens ≥ m are
/// left as they were, as on the GPU.
fn pack_into(
    mem: &mut Memory,
    to: (u64, u64),
    m: usize,
    k: usize,
    cps: usize,
    vals: &[f32],
) -> Result<()> {
    let k_tiles = k / TILE_K;
    let splits = k_tiles.div_ceil(cps);
    let mut words = vec![0u32; m * k / 2];
    let mut inv = Vec::new();
    for s in 0..splits {
        let (c0, c1) = (s * cps, ((s + 1) * cps).min(k_tiles));
        for t in 0..m {
            let row = &vals[t * k + c0 * TILE_K..t * k + c1 * TILE_K];
            let (f, i) = pow2_scale(amax(row));
            inv.push((s * PACK_SCALE_STRIDE as usize + t, i));
            for (j, &v) in row.iter().enumerate() {
                let (c, x) = (c0 + j / TILE_K, j % TILE_K);
                let (w, h) = word_of(c as u32, m as u32, t as u32, x as u32);
                words[w as usize] |= (f16::from_f32(v * f).to_bits() as u32) << (16 * h);
            }
        }
    }
    mem.write(to.0, words.len() * 4)?
        .copy_from_slice(bytemuck::cast_slice(&words));
    for (slot, i) in inv {
        mem.write(to.1 + slot as u64 * 4, 4)?
            .copy_from_slice(&i.to_le_bytes());
    }
    Ok(())
}

/// The activations of a `source::PACKED` GEMV (`act0` packed, `act1` scales) as f64
/// `[m][k]`: each f16 value times its split's inverse scale.
fn packed_activations(mem: &Memory, p: &GemvParams) -> Result<Vec<f64>> {
    let (k, m, cps) = (p.k as usize, p.m as usize, p.chunks_per_split as usize);
    let words: Vec<u32> = bytemuck::allocation::pod_collect_to_vec(mem.read(p.act0, m * k * 2)?);
    let splits = (k / TILE_K).div_ceil(cps);
    let scales = f32s(mem, p.act1, splits * PACK_SCALE_STRIDE as usize)?;
    let mut out = vec![0.0f64; m * k];
    for t in 0..m {
        for col in 0..k {
            let (c, x) = (col / TILE_K, col % TILE_K);
            let (w, h) = word_of(c as u32, m as u32, t as u32, x as u32);
            let v = f16::from_bits((words[w as usize] >> (16 * h)) as u16).to_f64();
            out[t * k + col] = v * scales[(c / cps) * PACK_SCALE_STRIDE as usize + t] as f64;
        }
    }
    Ok(out)
}

/// `len` activations as f64, from `src` (one of `source::*`) over `act0` (and `act1`).
fn activations(mem: &Memory, src: u32, act0: u64, act1: u64, len: usize) -> Result<Vec<f64>> {
    Ok(match src {
        source::BF16 => bf16s(mem, act0, len)?,
        source::F32 => f32s(mem, act0, len)?.into_iter().map(f64::from).collect(),
        source::SILU_F32 => {
            let g = f32s(mem, act0, len)?;
            let u = f32s(mem, act1, len)?;
            g.iter()
                .zip(&u)
                .map(|(&g, &u)| silu(g as f64) * u as f64)
                .collect()
        }
        s => return Err(Error::Invalid(format!("unknown activation source {s}"))),
    })
}

fn bf16s(mem: &Memory, ptr: u64, n: usize) -> Result<Vec<f64>> {
    let raw: Vec<u16> = bytemuck::allocation::pod_collect_to_vec(mem.read(ptr, n * 2)?);
    Ok(raw
        .into_iter()
        .map(|b| bf16::from_bits(b).to_f64())
        .collect())
}

/// Whether `rank` is a padded LoRA rank the kernels take (0: LoRA off).
fn lora_rank_ok(rank: u32) -> bool {
    rank % LORA_RANK_STEP == 0 && rank <= LORA_MAX_RANK
}

/// `lora_shrink`: `out[p][t][r] = scale·Σ_k A_p[r][k]·act[t][k]`, f64 accumulation.
fn lora_shrink(mem: &mut Memory, p: &LoraShrinkParams) -> Result<()> {
    let (k, t, r) = (p.k as usize, p.tokens as usize, p.rank as usize);
    if k == 0 || k % 8 != 0 || t == 0 || r == 0 || !lora_rank_ok(p.rank) || p.splits == 0 {
        return Err(Error::Invalid(format!(
            "lora_shrink: k={k} tokens={t} rank={r} splits={}",
            p.splits
        )));
    }
    let x = activations(mem, p.source, p.act0, p.act1, t * k)?;
    let projs: &[u64] = if p.a1 != 0 { &[p.a0, p.a1] } else { &[p.a0] };
    let mut out = vec![0.0f32; projs.len() * t * r];
    for (pi, &a) in projs.iter().enumerate() {
        let a = bf16s(mem, a, r * k)?;
        for (tok, xr) in x.chunks_exact(k).enumerate() {
            for (ri, ar) in a.chunks_exact(k).enumerate() {
                let dot: f64 = ar.iter().zip(xr).map(|(a, x)| a * x).sum();
                out[(pi * t + tok) * r + ri] = (dot * p.scale as f64) as f32;
            }
        }
    }
    mem.write(p.out, out.len() * 4)?
        .copy_from_slice(bytemuck::cast_slice(&out));
    Ok(())
}

/// Adds the LoRA expansion `Σ_r B[row][r]·ax[t][r]` to `y` (`[t][n]`, f64) for projection
/// `proj`: `B` bf16 `[n][rank]`, `ax` f32 `[proj][t][rank]`. No-op when `rank == 0`.
fn add_lora(
    mem: &Memory,
    (b, ax, rank): (u64, u64, u32),
    proj: usize,
    (n, t): (usize, usize),
    y: &mut [f64],
) -> Result<()> {
    if rank == 0 {
        return Ok(());
    }
    if !lora_rank_ok(rank) {
        return Err(Error::Invalid(format!("LoRA rank {rank}")));
    }
    let r = rank as usize;
    let b = bf16s(mem, b, n * r)?;
    let ax = f32s(mem, ax + (proj * t * r * 4) as u64, t * r)?;
    for (tok, xr) in ax.chunks_exact(r).enumerate() {
        for (row, br) in b.chunks_exact(r).enumerate() {
            let d: f64 = br.iter().zip(xr).map(|(&b, &x)| b * x as f64).sum();
            y[tok * n + row] += d;
        }
    }
    Ok(())
}

/// NaN-propagating maximum of magnitudes, as the kernels' `max.NaN`.
pub(crate) fn amax(v: &[f32]) -> f32 {
    v.iter().fold(0f32, |a, &x| {
        if a.is_nan() || x.is_nan() {
            f32::NAN
        } else {
            a.max(x.abs())
        }
    })
}

/// Checks a GEMV launch's schedule the way the kernel relies on it, though the reference
/// computes the product without splitting K: the grid is (row groups, splits), the splits
/// cover every 64-column chunk, the dynamic shared memory holds one split's staged activations,
/// and with `splits > 1` the split-K workspace (`[splits][2][m][n]` f32) and the row groups'
/// counters lie inside allocations. A packed input (`source::PACKED`) or output (`pack_out`)
/// only on a single-projection launch, never both. A plan or a scratch size that would make
/// the GPU skip columns or write out of bounds fails here, on the CPU, with a clear error.
fn gemv_schedule(mem: &Memory, l: &Launch, p: &GemvParams) -> Result<()> {
    let (n, k, m) = (p.n, p.k, p.m);
    let k_tiles = k / TILE_K as u32;
    let row_groups = n.div_ceil(GEMV_ROWS_PER_BLOCK);
    let bad = |what: String| Err(Error::Invalid(format!("{}: {what}", l.kernel)));
    if l.grid != (row_groups, p.splits, 1) || l.block != (GEMV_THREADS, 1, 1) {
        return bad(format!(
            "grid {:?} / block {:?}, want ({row_groups}, {}, 1) / ({GEMV_THREADS}, 1, 1)",
            l.grid, l.block, p.splits
        ));
    }
    if p.splits == 0 || p.chunks_per_split == 0 || p.splits * p.chunks_per_split < k_tiles {
        return bad(format!(
            "{} splits of {} chunks do not cover {k_tiles} chunks",
            p.splits, p.chunks_per_split
        ));
    }
    let packed = p.source == source::PACKED;
    let smem = if packed {
        GEMV_SMEM_HEADER
    } else {
        gemv_smem_bytes(m, p.chunks_per_split)
    };
    if l.smem < smem {
        return bad(format!(
            "{} bytes of shared memory, the staging needs {smem}",
            l.smem
        ));
    }
    if (packed || p.pack_out != 0) && (p.w1 != 0 || (packed && p.pack_out != 0)) {
        return bad("a packed input or output needs a single-projection staged launch".into());
    }
    if p.splits > 1 {
        let ws = p.splits as usize * 2 * m as usize * n as usize * 4;
        mem.read(p.ws, ws)?;
        mem.read(p.counters, row_groups as usize * 4)?;
    }
    Ok(())
}

fn gemv(mem: &mut Memory, p: &GemvParams, format: Format) -> Result<()> {
    let (n, k, m) = (p.n as usize, p.k as usize, p.m as usize);
    if n == 0
        || n % TILE_ROWS != 0
        || k == 0
        || k % TILE_K != 0
        || !(1..=8).contains(&m)
        || p.splits == 0
    {
        return Err(Error::Invalid(format!(
            "gemv: n={n} k={k} m={m} splits={}",
            p.splits
        )));
    }
    let act = if p.source == source::PACKED {
        packed_activations(mem, p)?
    } else {
        activations(mem, p.source, p.act0, p.act1, m * k)?
    };
    if p.pack_out != 0 {
        let staged: Vec<f32> = act.iter().map(|&v| v as f32).collect();
        let cps = p.chunks_per_split as usize;
        pack_into(mem, (p.pack_out, p.pack_scales), m, k, cps, &staged)?;
    }
    let projs: &[(u64, u64, f32, u64, u64)] = &[
        (p.w0, p.s0, p.gscale0, p.out0, p.lora_b0),
        (p.w1, p.s1, p.gscale1, p.out1, p.lora_b1),
    ];
    let count = if p.w1 != 0 { 2 } else { 1 };
    for (proj, &(w, s, gscale, out, lora_b)) in projs[..count].iter().enumerate() {
        let (cb, sb) = format.bytes(n, k);
        let codes = mem.read(w, cb)?;
        let scales = if sb > 0 { mem.read(s, sb)? } else { &[] };
        let mut y = gemv_tiled(format, codes, scales, gscale, n, k, m, &act);
        let lora = (lora_b, p.lora_ax, p.lora_rank);
        add_lora(mem, lora, proj, (n, m), &mut y)?;
        if p.out_bf16 != 0 {
            let b: Vec<u16> = y.iter().map(|&v| bf16::from_f64(v).to_bits()).collect();
            mem.write(out, n * m * 2)?
                .copy_from_slice(bytemuck::cast_slice(&b));
        } else {
            let f: Vec<f32> = y.iter().map(|&v| v as f32).collect();
            mem.write(out, n * m * 4)?
                .copy_from_slice(bytemuck::cast_slice(&f));
        }
    }
    Ok(())
}

/// `y[t][row] = Σ_k W[row][k]·act[t][k]` over a tiled matrix, row tiles spread over threads.
#[allow(clippy::too_many_arguments)]
fn gemv_tiled(
    format: Format,
    codes: &[u8],
    scales: &[u8],
    gscale: f32,
    n: usize,
    k: usize,
    m: usize,
    act: &[f64],
) -> Vec<f64> {
    let (row_tiles, k_tiles) = (n / TILE_ROWS, k / TILE_K);
    let mut y = vec![0.0f64; m * n];
    let threads = std::thread::available_parallelism()
        .map_or(1, |v| v.get())
        .min(row_tiles);
    let per = row_tiles.div_ceil(threads);
    let results: Vec<(usize, Vec<f64>)> = std::thread::scope(|sc| {
        let handles: Vec<_> = (0..threads)
            .map(|i| {
                sc.spawn(move || {
                    let (rt0, rt1) = (i * per, ((i + 1) * per).min(row_tiles));
                    let mut part = vec![0.0f64; (rt1.saturating_sub(rt0)) * TILE_ROWS * m];
                    let mut tile = [[0.0f32; TILE_K]; TILE_ROWS];
                    let (cb, sb) = format.tile_bytes();
                    for rt in rt0..rt1 {
                        for kt in 0..k_tiles {
                            let t = rt * k_tiles + kt;
                            format.decode_tile(&codes[t * cb..], &scales[t * sb..], &mut tile);
                            for (r, wrow) in tile.iter().enumerate() {
                                for tok in 0..m {
                                    let a = &act[tok * k + kt * TILE_K..][..TILE_K];
                                    let dot: f64 =
                                        wrow.iter().zip(a).map(|(&w, &x)| w as f64 * x).sum();
                                    part[((rt - rt0) * TILE_ROWS + r) * m + tok] += dot;
                                }
                            }
                        }
                    }
                    (rt0, part)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("reference gemv thread"))
            .collect()
    });
    for (rt0, part) in results {
        for (i, v) in part.iter().enumerate() {
            let (row, tok) = (rt0 * TILE_ROWS + i / m, i % m);
            y[tok * n + row] = v * gscale as f64;
        }
    }
    y
}

/// What the GPU GEMM relies on from its launch: the grid over rows, tokens and K splits (a
/// persistent kernel's: 1 ..= min(units, SMs) blocks, [`gemm_grid`], in whole clusters of
/// [`denseffn_device::params::GemmShape::cluster`] blocks, its units then pairs of tiles), and,
/// when K is split, a single-projection launch without LoRA whose splits cover K with none
/// empty, a workspace for every split's partial and counters that are zero.
fn gemm_schedule(mem: &Memory, l: &Launch, p: &GemmParams, sm_count: u32) -> Result<XSource> {
    let dual = p.w1 != 0;
    let bad = |what: String| Err(Error::Invalid(format!("{}: {what}", l.kernel)));
    let Some(shape) = gemm_shape(l.kernel, dual) else {
        return bad("not a prefill GEMM".into());
    };
    let (gx, gy) = (p.n.div_ceil(shape.rows), p.tokens.div_ceil(shape.tokens));
    let splits = p.splits.max(1);
    let block = (shape.threads, 1, 1);
    // A persistent kernel's grid may be capped below the SM count
    // (`DenseFfnLayer::set_gemm_grid_cap`).
    let grid = gemm_grid(&shape, dual, p, sm_count);
    let c = shape.cluster.max(1);
    let grid_ok = if shape.persistent {
        l.grid.0 >= c && l.grid.0 <= grid.0 && l.grid.0 % c == 0 && (l.grid.1, l.grid.2) == (1, 1)
    } else {
        l.grid == grid
    };
    if !grid_ok || l.block != block || l.smem != shape.smem {
        return bad(format!(
            "grid {:?} / block {:?} / {} B shared, want {grid:?} / {block:?} / {} B",
            l.grid, l.block, l.smem, shape.smem
        ));
    }
    // Units of `c` tiles (adjacent token blocks; the last may have one).
    let tiles = gx * gy.div_ceil(c);
    if p.split_from != 0 && (splits < 2 || !dual || p.split_from >= tiles) {
        return bad(format!(
            "split_from {} needs a split gate+up launch of more tiles ({tiles})",
            p.split_from
        ));
    }
    if splits > 1 {
        let k_tiles = p.k / TILE_K as u32;
        let cps = p.chunks_per_split;
        if p.lora_rank != 0
            || !l
                .kernel
                .trim_end_matches(GEMM_PAIR_SUFFIX)
                .ends_with("_splitk")
        {
            return bad("only a `_splitk` launch without LoRA splits K".into());
        }
        if cps == 0 || splits * cps < k_tiles || (splits - 1) * cps >= k_tiles {
            return bad(format!(
                "{splits} splits of {cps} chunks do not cover {k_tiles} chunks without an empty one"
            ));
        }
        // Single projection: `[split][tokens][n]`; gate+up: `[tile][split][2][rows × tokens]`
        // for the split tiles (each of a unit's `c` blocks its own tile and counter).
        let (ws, split_tiles) = if dual {
            let t = c * (tiles - p.split_from);
            let per_tile = 2 * shape.rows as usize * shape.tokens as usize;
            (t as usize * splits as usize * per_tile, t)
        } else {
            (
                splits as usize * p.tokens as usize * p.n as usize,
                c * tiles,
            )
        };
        mem.read(p.ws, ws * 4)?;
        let counters = mem.read(p.counters, split_tiles as usize * 4)?;
        if counters.iter().any(|&b| b != 0) {
            return bad("split-K counters not zero at launch".into());
        }
    }
    Ok(if l.kernel.starts_with("w8a8") {
        quantized_map_check(p, p.k as u64 / 2, "the E4M3 activations")?;
        XSource::E4m3
    } else if l.kernel.starts_with("w8a16") {
        quantized_map_check(p, p.k as u64, "the f16 activations")?;
        XSource::F16
    } else if shape.x_map {
        XSource::Map
    } else {
        XSource::Bf16
    })
}

/// Where a prefill GEMM launch reads its activations.
#[derive(Clone, Copy, PartialEq, Eq)]
enum XSource {
    /// bf16 `[tokens][k]` at `x`.
    Bf16,
    /// E4M3 codes at `x` with per-token scales (`w8a8_gemm*`).
    E4m3,
    /// f16 at `x` with per-token scales (`w8a16_gemm*`).
    F16,
    /// bf16 through the TMA map `xmap` (`GemmShape::x_map`, the BF16 GEMMs).
    Map,
}

/// The CPU reference's tensor map: this tag, then the spec's base, rows, cols, box rows and
/// box columns.
const CPU_MAP_TAG: u64 = u64::from_le_bytes(*b"cpu-tmap");

/// [`TileMapSpec`] as the CPU backend's [`TileMap`].
pub(crate) fn encode_tile_map(spec: &TileMapSpec) -> Result<TileMap> {
    spec.check()?;
    let mut m = TileMap::default();
    m.0[..6].copy_from_slice(&[
        CPU_MAP_TAG,
        spec.base.0,
        spec.rows as u64,
        spec.cols as u64,
        spec.box_rows as u64,
        spec.box_cols as u64,
    ]);
    Ok(m)
}

/// The activations a launch reading them through `p.xmap` sees, `[t][k]`: the map's
/// matrix where it has the element, zeros past it (as TMA fills a box), in boxes of
/// [`GEMM_WG_TOKENS`] × 64 (the kernels' shared-memory layout; another box is an error, as a
/// map the CPU backend did not make is).
fn mapped_activations(mem: &Memory, p: &GemmParams, t: usize, k: usize) -> Result<Vec<f64>> {
    let w = &p.xmap.0;
    if w[0] != CPU_MAP_TAG || w[4] != GEMM_WG_TOKENS as u64 || w[5] != TILE_K as u64 {
        return Err(Error::Invalid(format!(
            "gemm: activation map {:x?} is not a CPU map of {GEMM_WG_TOKENS} × {TILE_K} boxes",
            &w[..6]
        )));
    }
    let (rows, cols) = (w[2] as usize, w[3] as usize);
    let m = bf16s(mem, w[1], rows * cols)?;
    Ok((0..t * k)
        .map(|i| {
            let (tok, c) = (i / k, i % k);
            if tok < rows && c < cols {
                m[tok * cols + c]
            } else {
                0.0
            }
        })
        .collect())
}

/// `quantize_e4m3_act` (codes `e4m3(x·f)` in `ACT_SLOT` order, `e4m3::act_scale`) and
/// `quantize_f16_act` (values `f16(x·f)` in column order, `e4m3::act_scale_f16`; `qs` may be
/// `x`: every value is read before any is written, as on the GPU per thread): per token `f`,
/// the power-of-two scale of its largest magnitude, and the f32 inverse scales out.
fn quantize_token_act(mem: &mut Memory, p: &Q8Params, f16: bool) -> Result<()> {
    let (t, k) = (p.tokens as usize, p.k as usize);
    if t == 0 || k == 0 || k % 16 != 0 {
        let name = if f16 {
            "quantize_f16_act"
        } else {
            "quantize_e4m3_act"
        };
        return Err(Error::Invalid(format!("{name}: tokens={t} k={k}")));
    }
    let width = if f16 { 2 } else { 1 };
    let x = bf16s(mem, p.x, t * k)?;
    let mut qs = vec![0u8; t * k * width];
    let mut inv = vec![0f32; t];
    for (tok, row) in x.chunks_exact(k).enumerate() {
        let v: Vec<f32> = row.iter().map(|&x| x as f32).collect();
        let scale = if f16 {
            e4m3::act_scale_f16
        } else {
            e4m3::act_scale
        };
        let (f, i) = scale(amax(&v));
        inv[tok] = i;
        for (c, &x) in v.iter().enumerate() {
            if f16 {
                let at = 2 * (tok * k + c);
                qs[at..at + 2].copy_from_slice(&half::f16::from_f32(x * f).to_le_bytes());
            } else {
                qs[tok * k + c / 16 * 16 + e4m3::ACT_SLOT[c % 16]] = e4m3::encode(x * f);
            }
        }
    }
    mem.write(p.qs, t * k * width)?.copy_from_slice(&qs);
    mem.write(p.ds, t * 4)?
        .copy_from_slice(bytemuck::cast_slice(&inv));
    Ok(())
}

/// What an FP8-weight persistent GEMM relies on from its tensor map: a CPU map of its quantized
/// activations `[tokens][k]` at `x` as 2-byte elements, `cols` of them a row (E4M3 codes:
/// `k / 2`; f16: `k`), in boxes of [`GEMM_WG_TOKENS`] × 64 (128 bytes). The CPU reference
/// reads the activations at `x` itself.
fn quantized_map_check(p: &GemmParams, cols: u64, what: &str) -> Result<()> {
    let w = &p.xmap.0;
    let want = [
        CPU_MAP_TAG,
        p.x,
        p.tokens as u64,
        cols,
        GEMM_WG_TOKENS as u64,
        TILE_K as u64,
    ];
    if w[..6] != want {
        return Err(Error::Invalid(format!(
            "gemm: activation map {:x?} is not the CPU map of {what} {want:x?}",
            &w[..6]
        )));
    }
    Ok(())
}

/// The activations a `w8a16_gemm*` launch reads: f16 values times each token's inverse scale.
fn f16_activations(mem: &Memory, p: &GemmParams, t: usize, k: usize) -> Result<Vec<f64>> {
    let v = mem.read(p.x, t * k * 2)?;
    let inv = f32s(mem, p.x_scales, t)?;
    Ok(v.chunks_exact(2)
        .enumerate()
        .map(|(i, b)| half::f16::from_le_bytes([b[0], b[1]]).to_f64() * inv[i / k] as f64)
        .collect())
}

/// The activations a `w8a8_gemm*` launch reads: E4M3 codes (`ACT_SLOT` order) times each
/// token's inverse scale.
fn e4m3_activations(mem: &Memory, p: &GemmParams, t: usize, k: usize) -> Result<Vec<f64>> {
    let codes = mem.read(p.x, t * k)?;
    let inv = f32s(mem, p.x_scales, t)?;
    Ok((0..t * k)
        .map(|i| {
            let (tok, c) = (i / k, i % k);
            let b = codes[tok * k + c / 16 * 16 + e4m3::ACT_SLOT[c % 16]];
            e4m3::decode(b) as f64 * inv[tok] as f64
        })
        .collect())
}

/// Prefill GEMM: `Y = W·X` over all tokens (bf16 in and out; activations read as `x` says:
/// E4M3 or f16 with per-token scales for the `w8a8` / `w8a16` kernels, through the TMA map for
/// the BF16 ones);
/// with two projections `act(gate)·up`, rounded to bf16 as the GPU epilogue does.
fn gemm(mem: &mut Memory, p: &GemmParams, format: Format, x: XSource) -> Result<()> {
    let (n, k, t) = (p.n as usize, p.k as usize, p.tokens as usize);
    if n == 0 || n % TILE_ROWS != 0 || k == 0 || k % TILE_K != 0 || t == 0 {
        return Err(Error::Invalid(format!("gemm: n={n} k={k} tokens={t}")));
    }
    let x = match x {
        XSource::E4m3 => e4m3_activations(mem, p, t, k)?,
        XSource::F16 => f16_activations(mem, p, t, k)?,
        XSource::Map => mapped_activations(mem, p, t, k)?,
        XSource::Bf16 => bf16s(mem, p.x, t * k)?,
    };
    let (cb, sb) = format.bytes(n, k);
    let proj = |mem: &Memory, w: u64, s: u64, g: f32| -> Result<Vec<f64>> {
        Ok(gemv_tiled(
            format,
            mem.read(w, cb)?,
            if sb > 0 { mem.read(s, sb)? } else { &[] },
            g,
            n,
            k,
            t,
            &x,
        ))
    };
    let mut y = proj(mem, p.w0, p.s0, p.gscale0)?;
    add_lora(mem, (p.lora_b0, p.lora_ax, p.lora_rank), 0, (n, t), &mut y)?;
    if p.w1 != 0 {
        let mut u = proj(mem, p.w1, p.s1, p.gscale1)?;
        add_lora(mem, (p.lora_b1, p.lora_ax, p.lora_rank), 1, (n, t), &mut u)?;
        let f = if p.act == 2 { gelu_tanh } else { silu };
        for (a, u) in y.iter_mut().zip(u) {
            *a = f(*a) * u;
        }
    }
    let b: Vec<u16> = y.iter().map(|&v| bf16::from_f64(v).to_bits()).collect();
    mem.write(p.out, t * n * 2)?
        .copy_from_slice(bytemuck::cast_slice(&b));
    Ok(())
}
