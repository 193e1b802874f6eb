//! Tensor-parallel sharding of an FFN's weights for `world` ranks: gate and up column-parallel
//! (each rank a contiguous slice of the intermediate dimension), down row-parallel (the matching
//! slice of its input columns). Rank outputs are partial sums: the full output is their sum (an
//! all-reduce), since `down·a = Σ_r down[:, slice_r]·a[slice_r]`.
use crate::error::{Error, Result};
use crate::layer::DenseWeight;
use crate::load::HostFfn;
use crate::pack::Nvfp4Host;
use crate::pack_fp8::{Fp8Host, FP8_BLOCK};
use crate::pack_q2::Q2Host;
use crate::pack_q4k::Q4kHost;
use denseffn_device::formats::nvfp4::{GROUP, TILE_K};
use denseffn_device::formats::{q2_0, q4k};

impl Nvfp4Host {
    /// Rows `r0..r1` (a new matrix in the same layout).
    pub fn slice_rows(&self, r0: usize, r1: usize) -> Result<Nvfp4Host> {
        if r0 >= r1 || r1 > self.rows {
            return Err(Error::Invalid(format!(
                "rows {r0}..{r1} of a {}-row matrix",
                self.rows
            )));
        }
        let (cb, sb) = (self.cols / 2, self.cols / GROUP);
        Ok(Nvfp4Host {
            rows: r1 - r0,
            cols: self.cols,
            codes: self.codes[r0 * cb..r1 * cb].to_vec(),
            scales: self.scales[r0 * sb..r1 * sb].to_vec(),
            global: self.global,
        })
    }

    /// Columns `c0..c1` (multiples of the 16-value group, so scales split with them).
    pub fn slice_cols(&self, c0: usize, c1: usize) -> Result<Nvfp4Host> {
        if c0 >= c1 || c1 > self.cols || c0 % GROUP != 0 || c1 % GROUP != 0 {
            return Err(Error::Invalid(format!(
                "columns {c0}..{c1} of a {}-column matrix (group {GROUP})",
                self.cols
            )));
        }
        let (cb, sb) = (self.cols / 2, self.cols / GROUP);
        let mut codes = Vec::with_capacity(self.rows * (c1 - c0) / 2);
        let mut scales = Vec::with_capacity(self.rows * (c1 - c0) / GROUP);
        for r in 0..self.rows {
            codes.extend_from_slice(&self.codes[r * cb + c0 / 2..r * cb + c1 / 2]);
            scales.extend_from_slice(&self.scales[r * sb + c0 / GROUP..r * sb + c1 / GROUP]);
        }
        Ok(Nvfp4Host {
            rows: self.rows,
            cols: c1 - c0,
            codes,
            scales,
            global: self.global,
        })
    }
}

/// One rank's weights: (gate, up, down) with gate/up `[intermediate/world, hidden]` and down
/// `[hidden, intermediate/world]`.
pub type RankWeights = (Nvfp4Host, Nvfp4Host, Nvfp4Host);

/// Splits an FFN for `world` ranks. `intermediate / world` must be a multiple of 64 (the decode
/// layout's column tile), so each rank's layer is a valid layer of its own.
pub fn shard_ffn(
    gate: &Nvfp4Host,
    up: &Nvfp4Host,
    down: &Nvfp4Host,
    world: usize,
) -> Result<Vec<RankWeights>> {
    let inter = gate.rows;
    if world == 0 || inter % world != 0 || (inter / world) % TILE_K != 0 {
        return Err(Error::Shape(format!(
            "cannot split intermediate {inter} over {world} ranks: each rank's share must be a multiple of {TILE_K}"
        )));
    }
    if (up.rows, up.cols) != (gate.rows, gate.cols) || (down.rows, down.cols) != (gate.cols, inter)
    {
        return Err(Error::Shape(format!(
            "gate [{}, {}], up [{}, {}], down [{}, {}] are not one FFN",
            gate.rows, gate.cols, up.rows, up.cols, down.rows, down.cols
        )));
    }
    let share = inter / world;
    (0..world)
        .map(|r| {
            let (a, b) = (r * share, (r + 1) * share);
            Ok((
                gate.slice_rows(a, b)?,
                up.slice_rows(a, b)?,
                down.slice_cols(a, b)?,
            ))
        })
        .collect()
}

/// Rows `r0..r1` / columns `c0..c1` of a row-major matrix of `per_row` units per row, `unit`
/// bytes each, where a row-slice keeps whole rows and a column-slice whole units.
fn slice_units(
    data: &[u8],
    rows: usize,
    per_row: usize,
    unit: usize,
    (r0, r1): (usize, usize),
    (u0, u1): (usize, usize),
) -> Vec<u8> {
    let mut out = Vec::with_capacity((r1 - r0) * (u1 - u0) * unit);
    for r in r0..r1.min(rows) {
        out.extend_from_slice(&data[(r * per_row + u0) * unit..(r * per_row + u1) * unit]);
    }
    out
}

impl HostFfn {
    /// Splits the FFN for `world` ranks (gate and up by rows, down by columns, the same slice
    /// of the intermediate dimension), in every format. Each rank's share of the intermediate
    /// dimension must be a multiple of the format's unit: 64 (NVFP4, BF16, Q2_0: the GPU tile
    /// and the Q2_0 block), 128 (FP8: its scale blocks), 256 (Q4_K: its super-blocks).
    pub fn shard(&self, world: usize) -> Result<Vec<HostFfn>> {
        let (_, inter) = self.dims();
        let unit = match self {
            HostFfn::Fp8(_) => FP8_BLOCK,
            HostFfn::Q4k(_) => q4k::QK_K,
            _ => TILE_K,
        };
        if world == 0 || inter % world != 0 || (inter / world) % unit != 0 {
            return Err(Error::Shape(format!(
                "cannot split the {} FFN's intermediate {inter} over {world} ranks: each rank's share must be a multiple of {unit}",
                self.format()
            )));
        }
        let share = inter / world;
        (0..world)
            .map(|r| self.rank_slice(r * share, (r + 1) * share))
            .collect()
    }

    /// The intermediate slice `a..b`: gate and up rows, down columns.
    fn rank_slice(&self, a: usize, b: usize) -> Result<HostFfn> {
        Ok(match self {
            HostFfn::Nvfp4([g, u, d]) => HostFfn::Nvfp4([
                g.slice_rows(a, b)?,
                u.slice_rows(a, b)?,
                d.slice_cols(a, b)?,
            ]),
            HostFfn::Bf16([g, u, d]) => {
                let rows = |w: &DenseWeight| DenseWeight {
                    rows: b - a,
                    cols: w.cols,
                    data: w.data[a * w.cols..b * w.cols].to_vec(),
                };
                let cols = DenseWeight {
                    rows: d.rows,
                    cols: b - a,
                    data: (0..d.rows)
                        .flat_map(|r| d.data[r * d.cols + a..r * d.cols + b].iter().copied())
                        .collect(),
                };
                HostFfn::Bf16([rows(g), rows(u), cols])
            }
            HostFfn::Fp8([g, u, d]) => {
                let rows = |w: &Fp8Host| {
                    let bc = w.cols.div_ceil(FP8_BLOCK);
                    Fp8Host {
                        rows: b - a,
                        cols: w.cols,
                        weight: w.weight[a * w.cols..b * w.cols].to_vec(),
                        scale_inv: w.scale_inv[a / FP8_BLOCK * bc..(b.div_ceil(FP8_BLOCK)) * bc]
                            .to_vec(),
                    }
                };
                let bc = d.cols.div_ceil(FP8_BLOCK);
                let (s0, s1) = (a / FP8_BLOCK, b.div_ceil(FP8_BLOCK));
                let cols = Fp8Host {
                    rows: d.rows,
                    cols: b - a,
                    weight: slice_units(&d.weight, d.rows, d.cols, 1, (0, d.rows), (a, b)),
                    scale_inv: (0..d.rows.div_ceil(FP8_BLOCK))
                        .flat_map(|rb| d.scale_inv[rb * bc + s0..rb * bc + s1].iter().copied())
                        .collect(),
                };
                HostFfn::Fp8([rows(g), rows(u), cols])
            }
            HostFfn::Q2([g, u, d]) => {
                let (v, bytes) = (q2_0::BLOCK_VALUES, q2_0::BLOCK_BYTES);
                let rows = |w: &Q2Host| Q2Host {
                    rows: b - a,
                    cols: w.cols,
                    blocks: slice_units(
                        &w.blocks,
                        w.rows,
                        w.cols / v,
                        bytes,
                        (a, b),
                        (0, w.cols / v),
                    ),
                };
                let cols = Q2Host {
                    rows: d.rows,
                    cols: b - a,
                    blocks: slice_units(
                        &d.blocks,
                        d.rows,
                        d.cols / v,
                        bytes,
                        (0, d.rows),
                        (a / v, b / v),
                    ),
                };
                HostFfn::Q2([rows(g), rows(u), cols])
            }
            HostFfn::Q4k([g, u, d]) => {
                let (v, bytes) = (q4k::QK_K, q4k::BLOCK_BYTES);
                let rows = |w: &Q4kHost| Q4kHost {
                    rows: b - a,
                    cols: w.cols,
                    blocks: slice_units(
                        &w.blocks,
                        w.rows,
                        w.cols / v,
                        bytes,
                        (a, b),
                        (0, w.cols / v),
                    ),
                };
                let cols = Q4kHost {
                    rows: d.rows,
                    cols: b - a,
                    blocks: slice_units(
                        &d.blocks,
                        d.rows,
                        d.cols / v,
                        bytes,
                        (0, d.rows),
                        (a / v, b / v),
                    ),
                };
                HostFfn::Q4k([rows(g), rows(u), cols])
            }
        })
    }
}
