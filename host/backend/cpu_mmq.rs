//! The CPU reference of the Q4_K MMQ arm's kernels (`quantize_q8_32`, `requant_nvfp4_q4k`,
//! `q4k_mmq_gate_up_act`, `q4k_mmq`): the same functions the GPU computes, built from the same
//! shared math (`denseffn_device::formats::q4k_mmq`), so quantized bytes agree exactly and GEMM
//! results up to f32 summation order (here: exact integer dots, f64 sums).
use super::cpu::Memory;
use super::cpu_kernels::{amax, gelu_tanh, silu};
use crate::error::{Error, Result};
use denseffn_device::formats::q4k_mmq::{
    self as fmt, code_pos, fit_sub_block, q4_code, q8_code, q8_scale, quant6, super_scales,
    HEAD_BYTES, SUB, TILE_CODE_BYTES, TILE_HEAD_BYTES, TILE_K, TILE_ROWS,
};
use denseffn_device::formats::{nvfp4, q4k};
use denseffn_device::params::{MmqParams, Q8Params, RequantParams};
use half::bf16;

/// `quantize_q8_32`: per 32 values of a token, int8 codes (permuted) and f32 `(d, s)`.
pub(crate) fn quantize(mem: &mut Memory, p: &Q8Params) -> Result<()> {
    let (t, k) = (p.tokens as usize, p.k as usize);
    if t == 0 || k == 0 || k % SUB != 0 {
        return Err(Error::Invalid(format!("quantize_q8_32: tokens={t} k={k}")));
    }
    let x: Vec<u16> = bytemuck::allocation::pod_collect_to_vec(mem.read(p.x, t * k * 2)?);
    let mut qs = vec![0u8; t * k];
    let mut ds = vec![0f32; t * k / SUB * 2];
    for (b, vals) in x.chunks_exact(SUB).enumerate() {
        let v: Vec<f32> = vals.iter().map(|&h| bf16::from_bits(h).to_f32()).collect();
        let (d, inv) = q8_scale(amax(&v));
        let mut sum = 0i32;
        for (c, &x) in v.iter().enumerate() {
            let q = q8_code(x, inv);
            sum += q;
            qs[b * SUB + fmt::q8_pos(c)] = q as i8 as u8;
        }
        ds[2 * b] = d;
        ds[2 * b + 1] = d * sum as f32;
    }
    mem.write(p.qs, t * k)?.copy_from_slice(&qs);
    mem.write(p.ds, t * k / SUB * 8)?
        .copy_from_slice(bytemuck::cast_slice(&ds));
    Ok(())
}

/// `requant_nvfp4_q4k`: NVFP4 (tiled) → Q4_K in the MMQ layout, per super-block of a row.
pub(crate) fn requant(mem: &mut Memory, p: &RequantParams) -> Result<()> {
    let (rows, cols) = (p.rows as usize, p.cols as usize);
    if rows == 0 || rows % TILE_ROWS != 0 || cols == 0 || cols % TILE_K != 0 {
        return Err(Error::Invalid(format!(
            "requant_nvfp4_q4k: [{rows}, {cols}] (rows a multiple of 16, columns of 256)"
        )));
    }
    let k_tiles = cols / nvfp4::TILE_K;
    let tiles = rows / nvfp4::TILE_ROWS * k_tiles;
    let codes = mem.read(p.codes, tiles * nvfp4::TILE_CODE_BYTES)?.to_vec();
    let scales = mem
        .read(p.scales, tiles * nvfp4::TILE_SCALE_BYTES)?
        .to_vec();
    let (cb, hb) = fmt::bytes(rows, cols);
    let mut out_codes = vec![0u8; cb];
    let mut out_heads = vec![0u8; hb];
    // Row tiles spread over threads: each owns its tiles' codes and heads.
    let row_tiles = rows / TILE_ROWS;
    let threads = std::thread::available_parallelism()
        .map_or(1, |v| v.get())
        .min(row_tiles);
    let per = row_tiles.div_ceil(threads);
    let (codes, scales) = (&codes, &scales);
    std::thread::scope(|sc| {
        let chunks = out_codes
            .chunks_mut(per * (cols / TILE_K) * TILE_CODE_BYTES)
            .zip(out_heads.chunks_mut(per * (cols / TILE_K) * TILE_HEAD_BYTES));
        for (i, (oc, oh)) in chunks.enumerate() {
            sc.spawn(move || {
                for row in i * per * TILE_ROWS..((i + 1) * per * TILE_ROWS).min(rows) {
                    let r = row - i * per * TILE_ROWS;
                    for kt in 0..cols / TILE_K {
                        requant_superblock(
                            codes,
                            scales,
                            p,
                            row,
                            kt,
                            |tile, off, q| {
                                oc[(r / TILE_ROWS * (cols / TILE_K) + kt) * TILE_CODE_BYTES
                                    + off] |= q << tile
                            },
                            &mut oh[(r / TILE_ROWS * (cols / TILE_K) + kt) * TILE_HEAD_BYTES
                                + fmt::head_pos(row % TILE_ROWS)..][..HEAD_BYTES],
                        );
                    }
                }
            });
        }
    });
    mem.write(p.dst_codes, cb)?.copy_from_slice(&out_codes);
    mem.write(p.dst_heads, hb)?.copy_from_slice(&out_heads);
    Ok(())
}

/// One super-block (`row`, columns `256·kt..`): codes through `put(shift, offset in the tile, q)`,
/// the 16-byte header into `head`.
fn requant_superblock(
    codes: &[u8],
    scales: &[u8],
    p: &RequantParams,
    row: usize,
    kt: usize,
    mut put: impl FnMut(u32, usize, u8),
    head: &mut [u8],
) {
    let k_tiles = p.cols as usize / nvfp4::TILE_K;
    let v: Vec<f32> = (0..TILE_K)
        .map(|i| nvfp4::tiled_value(codes, scales, p.global, k_tiles, row, kt * TILE_K + i))
        .collect();
    let fits: Vec<(f32, f32)> = v
        .chunks_exact(SUB)
        .map(|x| fit_sub_block(|i| x[i]))
        .collect();
    let amax = fits.iter().fold(0f32, |a, f| a.max(f.0));
    let mmax = fits.iter().fold(0f32, |a, f| a.max(f.1));
    let (dbits, mbits) = super_scales(amax, mmax);
    let (df, mf) = (q4k::f16_to_f32(dbits), q4k::f16_to_f32(mbits));
    let sc: [u8; 8] = std::array::from_fn(|j| quant6(fits[j].0, df) as u8);
    let mn: [u8; 8] = std::array::from_fn(|j| quant6(fits[j].1, mf) as u8);
    for (i, &x) in v.iter().enumerate() {
        let s = i / SUB;
        let q = q4_code(x, df * sc[s] as f32, mf * mn[s] as f32) as u8;
        let (off, sh) = code_pos(row % TILE_ROWS, i);
        put(sh, off, q);
    }
    head[0..2].copy_from_slice(&dbits.to_le_bytes());
    head[2..4].copy_from_slice(&mbits.to_le_bytes());
    head[4..].copy_from_slice(&q4k::pack_scales(&sc, &mn));
}

/// `q4k_mmq_gate_up_act` / `q4k_mmq`: per row and token `Σ_sub (d·sc)·(dx·Σ q_w q_x) − (dmin·m)·s`
/// with exact integer dots, f64 sums; the dual kernel writes `act(gate)·up`; bf16 out.
pub(crate) fn gemm(mem: &mut Memory, p: &MmqParams) -> Result<()> {
    let (n, k, t) = (p.n as usize, p.k as usize, p.tokens as usize);
    if n == 0 || n % TILE_ROWS != 0 || k == 0 || k % TILE_K != 0 || t == 0 {
        return Err(Error::Invalid(format!("q4k_mmq: n={n} k={k} tokens={t}")));
    }
    let xq: Vec<i8> = mem.read(p.xq, t * k)?.iter().map(|&b| b as i8).collect();
    let xd: Vec<f32> = bytemuck::allocation::pod_collect_to_vec(mem.read(p.xd, t * k / SUB * 8)?);
    let (cb, hb) = fmt::bytes(n, k);
    let proj = |mem: &Memory, w: u64, h: u64| -> Result<Vec<f64>> {
        Ok(project(
            mem.read(w, cb)?,
            mem.read(h, hb)?,
            n,
            k,
            t,
            &xq,
            &xd,
        ))
    };
    let mut y = proj(mem, p.w0, p.h0)?;
    if p.w1 != 0 {
        let u = proj(mem, p.w1, p.h1)?;
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

/// One projection, `y[tok][row]`, row tiles spread over threads.
fn project(
    codes: &[u8],
    heads: &[u8],
    n: usize,
    k: usize,
    t: usize,
    xq: &[i8],
    xd: &[f32],
) -> Vec<f64> {
    let k_tiles = k / TILE_K;
    by_row_tiles(n, t, |rt, part| {
        for kt in 0..k_tiles {
            let tile = rt * k_tiles + kt;
            let c = &codes[tile * TILE_CODE_BYTES..][..TILE_CODE_BYTES];
            let h = &heads[tile * TILE_HEAD_BYTES..][..TILE_HEAD_BYTES];
            for lr in 0..TILE_ROWS {
                let head = &h[fmt::head_pos(lr)..][..HEAD_BYTES];
                for s in 0..TILE_K / SUB {
                    let (a, b) = fmt::sub_scales(head, s);
                    let q: [i32; SUB] = std::array::from_fn(|i| {
                        let (off, sh) = code_pos(lr, s * SUB + i);
                        ((c[off] >> sh) & 15) as i32
                    });
                    let blk = kt * (TILE_K / SUB) + s;
                    for tok in 0..t {
                        let xs = &xq[tok * k + blk * SUB..][..SUB];
                        let dot: i32 = (0..SUB).map(|i| q[i] * xs[fmt::q8_pos(i)] as i32).sum();
                        let (dx, sx) = (
                            xd[2 * (tok * k / SUB + blk)],
                            xd[2 * (tok * k / SUB + blk) + 1],
                        );
                        part[lr * t + tok] +=
                            a as f64 * (dx as f64 * dot as f64) - b as f64 * sx as f64;
                    }
                }
            }
        }
    })
}

/// `y[tok][row]` of an `n`-row projection for `t` tokens: `tile(rt, part)` adds row tile `rt`'s
/// sums into `part` (`[16 rows][t]`, zeroed); row tiles are spread over threads.
pub(super) fn by_row_tiles(
    n: usize,
    t: usize,
    tile: impl Fn(usize, &mut [f64]) + Sync,
) -> Vec<f64> {
    let row_tiles = n / TILE_ROWS;
    let threads = std::thread::available_parallelism()
        .map_or(1, |v| v.get())
        .min(row_tiles);
    let per = row_tiles.div_ceil(threads);
    let tile = &tile;
    let parts: Vec<(usize, Vec<f64>)> = std::thread::scope(|sc| {
        let handles: Vec<_> = (0..threads)
            .map(|i| {
                sc.spawn(move || {
                    let (rt0, rt1) = (i * per, ((i + 1) * per).min(row_tiles));
                    let mut part = vec![0.0f64; rt1.saturating_sub(rt0) * TILE_ROWS * t];
                    for (rt, p) in (rt0..rt1).zip(part.chunks_mut(TILE_ROWS * t)) {
                        tile(rt, p);
                    }
                    (rt0, part)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("reference mmq thread"))
            .collect()
    });
    let mut y = vec![0.0f64; t * n];
    for (rt0, part) in parts {
        for (i, v) in part.iter().enumerate() {
            let (row, tok) = (rt0 * TILE_ROWS + i / t, i % t);
            y[tok * n + row] = *v;
        }
    }
    y
}
