//! ggml's MUL_MAT figures on our H200, embedded from `docs/perf/anchors/ggml-h200.md` (copied
//! from the project's shared anchors; nothing outside the repository is read at run time).

/// The embedded anchor file.
pub const GGML_H200_MD: &str = include_str!("../../docs/perf/anchors/ggml-h200.md");

/// What a figure measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// Effective weight bandwidth, GB/s (decode, n ≤ 8).
    GBps,
    /// TFLOP/s (prefill).
    Tflops,
}

/// One row of the ggml table.
#[derive(Clone, Debug, PartialEq)]
pub struct GgmlPoint {
    /// ggml type name (`nvfp4`, `q4_K`, `bf16`, …).
    pub ty: String,
    /// Tokens (activation columns).
    pub n: usize,
    /// Time, µs.
    pub us: f64,
    /// The figure, in `unit`.
    pub value: f64,
    /// GB/s or TFLOP/s.
    pub unit: Unit,
}

/// Parses the table rows `| type | n | us | value unit |` of a ggml anchor file; other lines
/// (prose, the header and its separator) are skipped. A row that starts like a data row (a
/// numeric `n`) but does not parse is an error naming the line.
pub fn parse(md: &str) -> crate::Result<Vec<GgmlPoint>> {
    let mut points = Vec::new();
    for (no, line) in md.lines().enumerate() {
        let cells: Vec<&str> = line.trim().split('|').map(str::trim).collect();
        // "| a | b | c | d |" splits into ["", a, b, c, d, ""].
        if cells.len() != 6 || !cells[0].is_empty() || cells[2].parse::<usize>().is_err() {
            continue;
        }
        let bad = |what: &str| {
            crate::Error::Invalid(format!(
                "ggml anchor table, line {}: {what}: {line}",
                no + 1
            ))
        };
        let (value, unit) = cells[4]
            .split_once(' ')
            .ok_or_else(|| bad("expected `<value> GB/s` or `<value> TFLOP/s`"))?;
        let unit = match unit.trim() {
            "GB/s" => Unit::GBps,
            "TFLOP/s" => Unit::Tflops,
            _ => return Err(bad("unknown unit")),
        };
        points.push(GgmlPoint {
            ty: cells[1].to_string(),
            n: cells[2].parse().map_err(|_| bad("bad n"))?,
            us: cells[3].parse().map_err(|_| bad("bad µs"))?,
            value: value.parse().map_err(|_| bad("bad value"))?,
            unit,
        });
    }
    if points.is_empty() {
        return Err(crate::Error::Invalid("ggml anchor table: no rows".into()));
    }
    Ok(points)
}

/// The embedded H200 figures.
pub fn ggml_h200() -> crate::Result<Vec<GgmlPoint>> {
    parse(GGML_H200_MD)
}

/// The figures of one ggml type in one unit, sorted by `n`: `(n, value)`.
pub fn series(points: &[GgmlPoint], ty: &str, unit: Unit) -> Vec<(usize, f64)> {
    let mut v: Vec<(usize, f64)> = points
        .iter()
        .filter(|p| p.ty == ty && p.unit == unit)
        .map(|p| (p.n, p.value))
        .collect();
    v.sort_by_key(|p| p.0);
    v
}
