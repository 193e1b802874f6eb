//! Property tests (proptest, shrinking, default case counts) of the weight formats: E2M1 and
//! E4M3 rounding against brute force, the NVFP4 tiled layout's slots and positions, and the
//! NVFP4 quantizer's error bound and tiled copy.
use denseffn::pack::Nvfp4Host;
use denseffn_device::formats::nvfp4::{self, TILE_CODE_BYTES, TILE_K, TILE_ROWS, TILE_SCALE_BYTES};
use denseffn_device::formats::{e2m1, e4m3};
use proptest::prelude::*;
use std::collections::HashSet;

/// A finite f32 `±(1 + mant/2^23) · 2^exp`, `exp` in `exps` (-127 gives subnormals and zero).
fn scaled(exps: std::ops::RangeInclusive<i32>) -> impl Strategy<Value = f32> {
    (any::<bool>(), exps, 0u32..(1 << 23)).prop_map(|(neg, e, m)| {
        let bits = if e <= -127 {
            m // subnormal (or zero): exponent field 0
        } else {
            (((e + 127) as u32) << 23) | m
        };
        let v = f32::from_bits(bits);
        if neg {
            -v
        } else {
            v
        }
    })
}

/// Any finite f32, from its bit pattern.
fn finite_f32() -> impl Strategy<Value = f32> {
    any::<u32>()
        .prop_map(f32::from_bits)
        .prop_filter("finite", |v| v.is_finite())
}

/// `v` moved by `ulps` units in the last place (through the integer order of f32 bits).
fn nudge(v: f32, ulps: i32) -> f32 {
    // Map to a monotone integer line: negative floats below positive ones, -0 == +0.
    let b = v.to_bits() as i32;
    let key = if b < 0 { i32::MIN - b } else { b };
    let k = key.saturating_add(ulps);
    f32::from_bits(if k < 0 {
        (i32::MIN - k) as u32
    } else {
        k as u32
    })
}

/// Values at, and a few ulps either side of, the points in `points` (with either sign).
fn near(points: Vec<f32>) -> impl Strategy<Value = f32> {
    (prop::sample::select(points), -3i32..=3, any::<bool>()).prop_map(|(p, d, neg)| {
        let v = nudge(p, d);
        if neg {
            -v
        } else {
            v
        }
    })
}

fn e2m1_midpoints_and_values() -> Vec<f32> {
    let m = e2m1::MAGNITUDES;
    let mut v: Vec<f32> = m.to_vec();
    v.extend(m.windows(2).map(|w| 0.5 * (w[0] + w[1])));
    v.extend([7.0, 8.0]);
    v
}

fn e4m3_midpoints_and_values() -> Vec<f32> {
    let vals: Vec<f32> = (0..0x7Fu8).map(e4m3::decode).collect();
    let mut v = vals.clone();
    v.extend(vals.windows(2).map(|w| 0.5 * (w[0] + w[1])));
    v
}

/// The nearest E2M1 value to `v` by brute force over all 16 codes, ties to the even code.
fn e2m1_nearest(v: f32) -> f32 {
    let v = v as f64;
    let mut best: Option<(f64, u8)> = None;
    for c in 0..16u8 {
        let d = (e2m1::decode(c) as f64 - v).abs();
        best = match best {
            Some((bd, bc)) if d > bd => Some((bd, bc)),
            // Equal distance to the same value (±0): keep; to another value: the even code.
            Some((bd, bc)) if d == bd && (e2m1::decode(bc) == e2m1::decode(c) || bc & 1 == 0) => {
                Some((bd, bc))
            }
            _ => Some((d, c)),
        };
    }
    e2m1::decode(best.expect("16 codes").1)
}

/// The nearest E4M3 code (0x00..=0x7E, by brute force) to `a` ≥ 0, ties to the even code.
fn e4m3_nearest_code(a: f32) -> u8 {
    let a = a as f64;
    let mut best = (f64::INFINITY, 0u8);
    for c in 0..0x7Fu8 {
        let d = (e4m3::decode(c) as f64 - a).abs();
        if d < best.0 || (d == best.0 && c & 1 == 0) {
            best = (d, c);
        }
    }
    best.1
}

proptest! {
    #[test]
    fn e2m1_rounds_to_nearest_ties_to_even(
        v in prop_oneof![-8.0f32..=8.0, near(e2m1_midpoints_and_values()), scaled(-30..=3)]
            .prop_filter("in [-8, 8]", |v| v.abs() <= 8.0)
    ) {
        let got = e2m1::decode(e2m1::encode(v));
        prop_assert_eq!(got, e2m1_nearest(v), "v = {:e} (code {:#x})", v, e2m1::encode(v));
    }

    #[test]
    fn e2m1_saturates_and_keeps_the_sign(v in prop_oneof![finite_f32(), -8.0f32..=8.0]) {
        let code = e2m1::encode(v);
        let got = e2m1::decode(code);
        prop_assert!(got.abs() <= e2m1::MAX, "v = {:e} -> {}", v, got);
        if got != 0.0 {
            prop_assert_eq!(got.is_sign_negative(), v.is_sign_negative(), "v = {:e} -> {}", v, got);
        } else {
            prop_assert_eq!(code, 0, "zero is code 0, v = {:e}", v);
        }
    }

    #[test]
    fn e4m3_rounds_to_nearest_ties_to_even(
        v in prop_oneof![
            finite_f32(),
            scaled(-127..=8),
            -448.0f32..448.0,
            near(e4m3_midpoints_and_values()),
        ]
        .prop_filter("|v| < 448", |v| v.abs() < e4m3::MAX)
    ) {
        let best = e4m3_nearest_code(v.abs());
        let want_code = if best == 0 { 0 } else if v.is_sign_negative() { best | 0x80 } else { best };
        let code = e4m3::encode(v);
        prop_assert_eq!(
            e4m3::decode(code),
            e4m3::decode(want_code),
            "v = {:e}: code {:#04x}, nearest {:#04x}", v, code, want_code
        );
        prop_assert_eq!(code, want_code, "v = {:e}", v);
    }

    #[test]
    fn e4m3_encode_is_monotone_on_0_448(
        a in prop_oneof![0.0f32..=448.0, scaled(-127..=8).prop_map(f32::abs)]
            .prop_filter("<= 448", |v| *v <= e4m3::MAX),
        gap in prop_oneof![0i32..=4, 0i32..=1 << 24],
    ) {
        let b = nudge(a, gap).min(e4m3::MAX);
        let (ca, cb) = (e4m3::encode(a), e4m3::encode(b));
        prop_assert!(ca <= cb, "encode({:e}) = {:#04x} > encode({:e}) = {:#04x}", a, ca, b, cb);
        prop_assert!(e4m3::decode(ca) <= e4m3::decode(cb));
    }

    #[test]
    fn tiled_slots_round_trip(word in any::<u32>(), slot in 0usize..8, code in any::<u8>()) {
        let w = nvfp4::put_slot(word, slot, code);
        prop_assert_eq!(nvfp4::get_slot(w, slot), code & 0xF);
        // Only the slot's four bits change.
        let mask: u32 = nvfp4::slot_bits(slot).iter().map(|b| 1u32 << b).sum();
        prop_assert_eq!(w & !mask, word & !mask);
        for other in (0..8).filter(|&s| s != slot) {
            prop_assert_eq!(nvfp4::get_slot(w, other), nvfp4::get_slot(word, other));
        }
    }

    #[test]
    fn tiled_code_pos_is_injective(
        (k_tiles, row_tiles, cells) in (1usize..=16, 1usize..=16).prop_flat_map(|(kt, rt)| {
            let cell = (0..rt * TILE_ROWS, 0..kt * TILE_K);
            (Just(kt), Just(rt), prop::collection::vec(cell, 2..64))
        })
    ) {
        let mut seen = std::collections::HashMap::new();
        for &(row, col) in &cells {
            let (off, slot) = nvfp4::tiled_code_pos(row, col, k_tiles);
            prop_assert!(slot < 8 && off % 4 == 0);
            prop_assert!(off < row_tiles * k_tiles * TILE_CODE_BYTES, "({}, {}) at {}", row, col, off);
            // The word lies in the element's own tile.
            let tile = (row / TILE_ROWS) * k_tiles + col / TILE_K;
            prop_assert_eq!(off / TILE_CODE_BYTES, tile);
            let s = nvfp4::tiled_scale_pos(row, col, k_tiles);
            prop_assert_eq!(s / TILE_SCALE_BYTES, tile);
            if let Some(&prev) = seen.get(&(off, slot)) {
                prop_assert_eq!(prev, (row, col), "two elements at byte {} slot {}", off, slot);
            }
            seen.insert((off, slot), (row, col));
        }
        // Scales: one per (row, 16-column group).
        let mut scale_seen = std::collections::HashMap::new();
        for &(row, col) in &cells {
            let s = nvfp4::tiled_scale_pos(row, col, k_tiles);
            if let Some(&prev) = scale_seen.get(&s) {
                prop_assert_eq!(prev, (row, col / nvfp4::GROUP), "two groups at scale byte {}", s);
            }
            scale_seen.insert(s, (row, col / nvfp4::GROUP));
        }
    }
}

/// A row-major matrix `[16·rt, 64·kt]` whose values span wide magnitudes: a base binary
/// exponent per matrix (-149..=127), each element zero (1 in 9) or `±(1 + m) · 2^(base - off)`
/// (off 0..=40, so subnormals, and flushes to zero, appear for small bases), and sometimes
/// whole 16-value groups of zeros. Elements come from one `u64` each (cheap to generate, and
/// shrinking a `u64` to 0 shrinks the element to 0).
fn nvfp4_matrix() -> impl Strategy<Value = (usize, usize, Vec<f32>)> {
    (1usize..=2, 1usize..=3, -149i32..=127).prop_flat_map(|(rt, kt, base)| {
        let (rows, cols) = (rt * TILE_ROWS, kt * TILE_K);
        let groups = rows * cols / nvfp4::GROUP;
        (
            prop::collection::vec(any::<u64>(), rows * cols),
            prop::collection::vec(prop::bool::weighted(0.1), groups),
        )
            .prop_map(move |(bits, zero_groups)| {
                let mut w: Vec<f32> = bits.iter().map(|&x| element(x, base)).collect();
                for (g, &z) in zero_groups.iter().enumerate() {
                    if z {
                        w[g * nvfp4::GROUP..][..nvfp4::GROUP].fill(0.0);
                    }
                }
                (rows, cols, w)
            })
    })
}

/// One matrix element from random bits (see [`nvfp4_matrix`]).
fn element(x: u64, base: i32) -> f32 {
    if (x >> 32) % 9 == 0 {
        return 0.0;
    }
    let m = (x & ((1 << 23) - 1)) as f64 / (1u64 << 23) as f64;
    let off = ((x >> 23) & 0xFF) as i32 % 41;
    let v = ((1.0 + m) * 2f64.powi(base - off)) as f32; // exact when normal, else rounded
    if x & (1 << 31) != 0 {
        -v
    } else {
        v
    }
}

/// The quantizer's error bound per element of a group: one scale step (half the widest E2M1
/// gap, 4→6, in units of the step) plus what saturation at ±6 steps loses, plus f32 rounding
/// (relative 2^-20 of the group's range, and a few subnormal ulps).
fn group_bound(step: f32, gmax: f32) -> f64 {
    let (step, gmax) = (step as f64, gmax as f64);
    step + (gmax - 6.0 * step).max(0.0)
        + (gmax + 6.0 * step) * 2f64.powi(-20)
        + 16.0 * 2f64.powi(-149)
}

proptest! {
    #[test]
    fn quantizer_error_is_bounded_and_tiled_copy_decodes_the_same((rows, cols, w) in nvfp4_matrix()) {
        let q = Nvfp4Host::quantize(&w, rows, cols).unwrap();
        let d = q.dequantize();
        prop_assert_eq!(d.len(), rows * cols);
        for (g, (wg, dg)) in w.chunks(nvfp4::GROUP).zip(d.chunks(nvfp4::GROUP)).enumerate() {
            let step = e4m3::decode(q.scales[g]) * q.global;
            let gmax = wg.iter().fold(0.0f32, |a, v| a.max(v.abs()));
            let bound = group_bound(step, gmax);
            for (j, (&a, &b)) in wg.iter().zip(dg).enumerate() {
                let err = (a as f64 - b as f64).abs();
                prop_assert!(
                    err <= bound,
                    "group {} elem {}: {:e} -> {:e}, error {:e} > bound {:e} (scale {:#04x}, global {:e})",
                    g, j, a, b, err, bound, q.scales[g], q.global
                );
            }
        }
        let (codes, scales) = q.to_tiled("w").unwrap();
        prop_assert_eq!((codes.len(), scales.len()), (q.codes.len(), q.scales.len()));
        let k_tiles = cols / TILE_K;
        let mut tile = [[0f32; TILE_K]; TILE_ROWS];
        for rt in 0..rows / TILE_ROWS {
            for kt in 0..k_tiles {
                let t = rt * k_tiles + kt;
                nvfp4::decode_tile(&codes[t * TILE_CODE_BYTES..], &scales[t * TILE_SCALE_BYTES..], &mut tile);
                for (lr, row) in tile.iter().enumerate() {
                    for (lc, &v) in row.iter().enumerate() {
                        let (r, c) = (rt * TILE_ROWS + lr, kt * TILE_K + lc);
                        let want = d[r * cols + c];
                        prop_assert_eq!(
                            (v * q.global).to_bits(), want.to_bits(),
                            "[{}, {}]: tiled {:e}, dequantize {:e}", r, c, v * q.global, want
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn e4m3_brute_force_agrees_on_every_code_value() {
    // The oracle itself: each code's own value is its nearest code.
    for c in 0..0x7Fu8 {
        assert_eq!(e4m3_nearest_code(e4m3::decode(c)), c);
    }
    let mut seen = HashSet::new();
    for c in 0..16u8 {
        seen.insert(e2m1_nearest(e2m1::decode(c)).to_bits() & 0x7FFF_FFFF);
    }
    assert_eq!(seen.len(), 8);
}

/// The quantizer on weights whose amax is so small that amax / (6·448) underflows: found by the
/// property above with the full exponent range (zero groups used to get NaN scales, 0/0); the
/// global scale is now clamped to the smallest normal f32.
#[test]
fn quantizer_with_underflowing_global_scale() {
    for tiny in [f32::from_bits(1), f32::from_bits(1000)] {
        let mut w = vec![0.0f32; TILE_ROWS * TILE_K];
        w[0] = tiny;
        let q = Nvfp4Host::quantize(&w, TILE_ROWS, TILE_K).unwrap();
        q.validate("w").unwrap();
        for (i, (&a, &b)) in w.iter().zip(&q.dequantize()).enumerate() {
            assert!((a - b).abs() <= tiny, "[{i}]: {a:e} -> {b:e}");
        }
        q.to_tiled("w").unwrap();
    }
}
