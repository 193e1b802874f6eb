//! Property tests (proptest, shrinking, default case counts) of the overlay and native formats
//! besides NVFP4 (`prop_formats.rs`): FP8 block-scaled, ternary Q2_0, Q4_K and BF16. For each:
//! decoding arbitrary bytes follows the format's definition, quantize → dequantize stays within
//! the format's error bound, and the packings the GPU reads (the tiled overlay layouts, the
//! Q4_K MMQ layout) round-trip, exactly or within their documented rounding.
use denseffn::pack_fp8::{Fp8Host, FP8_BLOCK};
use denseffn::pack_q2::Q2Host;
use denseffn::pack_q4k::Q4kHost;
use denseffn::pack_tiled::TiledHost;
use denseffn_device::formats::{e4m3, q2_0, q4k};
use half::{bf16, f16};
use proptest::prelude::*;

/// `n` values `±(1 + u) · 2^e`, `e` per value in `exps` (mixed magnitudes), a few exact zeros.
fn values(n: usize, exps: std::ops::RangeInclusive<i32>) -> impl Strategy<Value = Vec<f32>> {
    prop::collection::vec((any::<bool>(), exps, 0.0f32..1.0, 0u8..32), n).prop_map(|v| {
        v.into_iter()
            .map(|(neg, e, u, z)| {
                let m = if z == 0 {
                    0.0
                } else {
                    (1.0 + u) * 2f32.powi(e)
                };
                if neg {
                    -m
                } else {
                    m
                }
            })
            .collect()
    })
}

/// A matrix `(rows, cols, values)`: rows from `rows`, cols `col_unit ·` one of `units`.
fn matrix(
    rows: impl Strategy<Value = usize>,
    col_unit: usize,
    units: std::ops::RangeInclusive<usize>,
    exps: std::ops::RangeInclusive<i32>,
) -> impl Strategy<Value = (usize, usize, Vec<f32>)> {
    (rows, units).prop_flat_map(move |(r, u)| {
        let c = u * col_unit;
        values(r * c, exps.clone()).prop_map(move |w| (r, c, w))
    })
}

/// A row count that is a multiple of 16 (the GPU tile), 16..=48.
fn tile_rows() -> impl Strategy<Value = usize> {
    (1usize..=3).prop_map(|t| 16 * t)
}

proptest! {
    /// FP8: every value is within half an E4M3 step of its block's grid: relative 2^-4 for
    /// normals, absolute scale·2^-10 in the subnormal range (scale = block amax / 448).
    #[test]
    fn fp8_quantize_error_is_within_half_a_step(
        (rows, cols, w) in (1usize..=150, 1usize..=150).prop_flat_map(|(r, c)| {
            values(r * c, -8..=8).prop_map(move |w| (r, c, w))
        })
    ) {
        let q = Fp8Host::quantize(&w, rows, cols).unwrap();
        q.validate("w").unwrap();
        let bc = cols.div_ceil(FP8_BLOCK);
        for (i, (&x, &y)) in w.iter().zip(&q.dequantize()).enumerate() {
            let (r, c) = (i / cols, i % cols);
            let s = q.scale_inv[(r / FP8_BLOCK) * bc + c / FP8_BLOCK];
            let bound = (x.abs() / 16.0).max(s * 2f32.powi(-10)) * (1.0 + 1e-6);
            prop_assert!((x - y).abs() <= bound, "[{r},{c}] {x} -> {y} (scale {s})");
        }
    }

    /// FP8 → E4M3 tiles: codes unchanged, each block's scale ratio rounded to f16 (relative
    /// 2^-11) while the ratios stay in f16's normal range.
    #[test]
    fn fp8_tiled_copy_decodes_within_f16_scale_rounding(
        (rows, units, w) in tile_rows().prop_flat_map(|r| (1usize..=3).prop_flat_map(move |u| {
            values(r * u * 64, -6..=6).prop_map(move |w| (r, u, w))
        }))
    ) {
        let cols = units * 64;
        let q = Fp8Host::quantize(&w, rows, cols).unwrap();
        let t = TiledHost::from_fp8("w", &q).unwrap();
        for (i, (&x, &y)) in q.dequantize().iter().zip(&t.dequantize()).enumerate() {
            prop_assert!((x - y).abs() <= x.abs() * 2f32.powi(-11) * 1.01, "[{i}] {x} vs {y}");
        }
    }

    /// Q2_0 blocks of arbitrary bytes (any finite, non-negative `d`) decode to `(q − 1)·d` per
    /// code, as ggml's `dequantize_row_q2_0` defines them.
    #[test]
    fn q2_decodes_arbitrary_blocks_by_definition(
        d in (0u16..0x7C00).prop_map(f16::from_bits),
        codes in prop::array::uniform16(any::<u8>()),
    ) {
        let mut b = [0u8; q2_0::BLOCK_BYTES];
        b[..2].copy_from_slice(&d.to_bits().to_le_bytes());
        b[2..].copy_from_slice(&codes);
        let mut out = [0f32; q2_0::BLOCK_VALUES];
        q2_0::dequantize_block(&b, &mut out);
        for (j, &v) in out.iter().enumerate() {
            let q = (codes[j / 4] >> (2 * (j % 4))) & 3;
            prop_assert_eq!(v.to_bits(), ((q as f32 - 1.0) * d.to_f32()).to_bits(), "value {}", j);
        }
    }

    /// Ternary quantizer: per 64-value block `d = f16(mean|w|)` and every value
    /// `clamp(round(w / d), −1, 1) · d`; the tiled copy decodes to exactly the same values.
    #[test]
    fn q2_quantizer_is_absmean_ternary_and_tiles_exactly(
        (rows, cols, w) in matrix(16usize..=32, 64, 1..=3, -8..=8)
    ) {
        let q = Q2Host::quantize_ternary(&w, rows, cols).unwrap();
        q.validate("w").unwrap();
        let got = q.dequantize();
        for (bi, x) in w.chunks_exact(64).enumerate() {
            let d = f16::from_f32(x.iter().map(|v| v.abs()).sum::<f32>() / 64.0).to_f32();
            for (j, &v) in x.iter().enumerate() {
                let t = if d > 0.0 { (v / d).round().clamp(-1.0, 1.0) } else { 0.0 };
                prop_assert_eq!(got[bi * 64 + j], t * d, "block {} value {}", bi, j);
            }
        }
        if rows % 16 == 0 {
            prop_assert_eq!(TiledHost::from_q2("w", &q).unwrap().dequantize(), got);
        }
    }

    /// Q4_K blocks of arbitrary bytes (finite non-negative `d`, `dmin`; any scales and codes)
    /// decode to `d·sc·q − dmin·m` per value, in f32 as ggml computes it.
    #[test]
    fn q4k_decodes_arbitrary_blocks_by_definition(
        d in (0u16..0x7C00).prop_map(f16::from_bits),
        dmin in (0u16..0x7C00).prop_map(f16::from_bits),
        rest in prop::collection::vec(any::<u8>(), q4k::BLOCK_BYTES - 4),
    ) {
        let mut b = d.to_bits().to_le_bytes().to_vec();
        b.extend_from_slice(&dmin.to_bits().to_le_bytes());
        b.extend_from_slice(&rest);
        let mut out = [0f32; q4k::QK_K];
        q4k::dequantize_block(&b, &mut out);
        for (i, &v) in out.iter().enumerate() {
            let (p, l) = (i / 64, i % 64);
            let byte = b[16 + 32 * p + l % 32];
            let q = if l < 32 { byte & 15 } else { byte >> 4 };
            let (sc, m) = q4k::scale_min(&b[4..16], i / 32);
            let want = d.to_f32() * sc as f32 * q as f32 - dmin.to_f32() * m as f32;
            prop_assert_eq!(v.to_bits(), want.to_bits(), "value {}", i);
        }
    }

    /// Q4_K quantizer: per 256-value block, RMS error ≤ 6% and every value within 20% of the
    /// block's largest magnitude (16 levels per 32-value sub-block, 6-bit sub-block scales);
    /// the MMQ layout round-trips losslessly, the tiled copy within f16 rounding of ggml's values.
    #[test]
    fn q4k_quantizer_error_is_bounded_and_layouts_round_trip(
        (rows, cols, w) in matrix(tile_rows(), 256, 1..=2, -6..=6)
    ) {
        let q = Q4kHost::quantize(&w, rows, cols).unwrap();
        q.validate("w").unwrap();
        let got = q.dequantize();
        for (bi, (x, y)) in w.chunks_exact(256).zip(got.chunks_exact(256)).enumerate() {
            let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
            let se: f64 = x.iter().zip(y).map(|(a, b)| ((a - b) as f64).powi(2)).sum();
            let rms = (se / 256.0).sqrt();
            prop_assert!(rms <= 0.06 * amax as f64, "block {}: RMS {} of amax {}", bi, rms, amax);
            for (j, (a, b)) in x.iter().zip(y).enumerate() {
                prop_assert!((a - b).abs() <= 0.2 * amax, "block {} value {}: {} -> {}", bi, j, a, b);
            }
        }
        let (codes, heads) = q.to_mmq("w").unwrap();
        prop_assert_eq!(&Q4kHost::from_mmq(rows, cols, &codes, &heads).unwrap(), &q);
        let t = TiledHost::from_q4k("w", &q).unwrap();
        let scale = got.iter().fold(0f32, |m, v| m.max(v.abs()));
        for (i, (a, b)) in got.iter().zip(&t.dequantize()).enumerate() {
            prop_assert!((a - b).abs() <= 2e-3 * scale, "[{}] {} vs {}", i, a, b);
        }
    }

    /// BF16 → bf16 tiles: every value kept exactly, over the whole exponent range (the tiles
    /// hold the bf16 bits themselves, only moved).
    #[test]
    fn bf16_tiles_keep_every_value(
        (rows, units, w) in tile_rows().prop_flat_map(|r| (1usize..=3)
            .prop_flat_map(move |u| values(r * u * 64, -120..=120).prop_map(move |w| (r, u, w))))
    ) {
        let cols = units * 64;
        let b: Vec<bf16> = w.iter().map(|&v| bf16::from_f32(v)).collect();
        let t = TiledHost::from_bf16("w", rows, cols, &b).unwrap();
        prop_assert_eq!(t.global, 1.0);
        for (i, (x, &y)) in b.iter().zip(&t.dequantize()).enumerate() {
            prop_assert_eq!(x.to_f32(), y, "[{}]", i);
        }
    }
}

/// Every non-NaN E4M3 byte survives decode → encode (FP8 weights are stored as E4M3 codes, so
/// re-encoding a decoded weight must give the same code), except −0, which the encoder writes as
/// +0 (every value that rounds to zero gives 0x00).
#[test]
fn every_e4m3_code_round_trips_through_encode() {
    for b in 0u8..=255 {
        let v = e4m3::decode(b);
        if v.is_nan() {
            assert_eq!(b & 0x7F, 0x7F, "byte {b:#04x} decodes to NaN");
            continue;
        }
        let want = if b == 0x80 { 0x00 } else { b };
        assert_eq!(e4m3::encode(v), want, "byte {b:#04x} = {v}");
    }
}
