//! Tensor-parallel sharding of an FFN's weights for `world` ranks: gate and up column-parallel
//! (each rank a contiguous slice of the intermediate dimension), down row-parallel (the matching
//! slice of its input columns). Rank outputs are partial sums: the full output is their sum (an
//! all-reduce), since `down·a = Σ_r down[:, slice_r]·a[slice_r]`.
use crate::error::{Error, Result};
use crate::pack::Nvfp4Host;
use denseffn_device::formats::nvfp4::{GROUP, TILE_K};

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
