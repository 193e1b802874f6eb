//! E4M3 ("e4m3fn", OCP FP8): 1 sign, 4 exponent (bias 7), 3 mantissa bits; subnormals; no Inf;
//! `S.1111.111` (0x7F, 0xFF) is NaN. Max finite 448. Used for NVFP4 block scales and FP8 weights.

/// Largest finite value.
pub const MAX: f32 = 448.0;

/// Value of an E4M3 byte: subnormals exact, 0x7F / 0xFF decode to NaN.
#[inline]
pub fn decode(b: u8) -> f32 {
    let sign = if b & 0x80 != 0 { -1.0 } else { 1.0 };
    let e = ((b >> 3) & 0xF) as i32;
    let m = (b & 7) as f32;
    if e == 0xF && b & 7 == 7 {
        return f32::NAN;
    }
    let mag = if e == 0 {
        m / 8.0 * pow2(-6)
    } else {
        (1.0 + m / 8.0) * pow2(e - 7)
    };
    sign * mag
}

/// Nearest E4M3 byte to `v`, round-to-nearest-even, saturating to ±448 (never NaN for finite
/// input). NaN input gives 0x7F.
#[inline]
pub fn encode(v: f32) -> u8 {
    if v.is_nan() {
        return 0x7F;
    }
    let sign = if v.is_sign_negative() { 0x80u8 } else { 0 };
    let a = v.abs();
    if a >= MAX {
        return sign | 0x7E;
    }
    // Codes 0x00..=0x7E are ordered by value: binary-search the last code <= a, then round.
    let (mut lo, mut hi) = (0u8, 0x7Eu8);
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        if decode(mid) <= a {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    let below = lo;
    let best = if below == 0x7E {
        below
    } else {
        let (d0, d1) = (a - decode(below), decode(below + 1) - a);
        if d1 < d0 || (d1 == d0 && (below + 1) & 1 == 0) {
            below + 1
        } else {
            below
        }
    };
    if best == 0 {
        0
    } else {
        sign | best
    }
}

/// Where the FP8 × FP8 prefill (`kernels::w8a8`) keeps activation column `16·g + p`
/// of a token: byte `16·g + ACT_SLOT[p]` of its E4M3 row. Within each 16 columns, lane `q`'s
/// four bytes `4q..4q+4` hold columns `2q, 2q+1, 2q+8, 2q+9`: the columns that lane's bytes
/// of the FP8 weight tiles cover (`formats::tiles`), so a lane builds its `wgmma` k32 A
/// registers from its tile words with two byte permutes and no data from other lanes.
pub const ACT_SLOT: [usize; 16] = [0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15];

/// The per-token power-of-two scale of activations quantized to E4M3: `(f, inv)` with `f` the
/// largest power of two (at most 2^126) such that `amax·f ≤ 448`; codes are `e4m3(x·f)` (exact
/// product, one rounding) and `x ≈ decode(code)·inv`. `amax = 0` gives `(1, 1)`; a non-finite
/// `amax` gives `inv = NaN`, so a token with an Inf or NaN input yields NaN outputs.
#[inline]
pub fn act_scale(amax: f32) -> (f32, f32) {
    scale_below(amax, MAX, 8)
}

/// The largest magnitude [`act_scale_f16`] scales a token to: 2^15, half of f16's range.
pub const F16_ACT_MAX: f32 = 32768.0;

/// The per-token power-of-two scale of activations converted to f16 for the FP8 × bf16 prefill
/// (`w8a16_gemm*`): as [`act_scale`] with `amax·f ≤` [`F16_ACT_MAX`], so the token's values
/// keep f16's 11 significant bits (a bf16 value is exact unless it falls 2^28 below the
/// token's largest) and no f16 overflows.
#[inline]
pub fn act_scale_f16(amax: f32) -> (f32, f32) {
    scale_below(amax, F16_ACT_MAX, 15)
}

/// `(f, 1/f)`, `f` the largest power of two (at most 2^126) with `amax·f ≤ max`, `max` in
/// `[2^top, 2^(top+1))`; `(1, 1)` for 0 and `(1, NaN)` for a non-finite `amax`.
#[inline]
fn scale_below(amax: f32, max: f32, top: i32) -> (f32, f32) {
    if !amax.is_finite() {
        return (1.0, f32::NAN);
    }
    if amax == 0.0 {
        return (1.0, 1.0);
    }
    let e = ((amax.to_bits() >> 23) & 0xFF) as i32 - 127;
    let k = (top - e).clamp(-126, 126);
    let mut f = pow2(k);
    if amax * f > max {
        f *= 0.5;
    }
    (f, 1.0 / f)
}

#[inline]
fn pow2(e: i32) -> f32 {
    f32::from_bits(((e + 127) as u32) << 23)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn act_slots_are_a_permutation_matching_the_lane_layout() {
        let mut seen = [false; 16];
        for (p, &s) in ACT_SLOT.iter().enumerate() {
            assert!(!seen[s]);
            seen[s] = true;
            // Byte s = 4q + i of lane q holds column 2q + (i & 1) + 8·(i >> 1).
            let (q, i) = (s / 4, s % 4);
            assert_eq!(p, 2 * q + (i & 1) + 8 * (i >> 1));
        }
    }

    #[test]
    fn act_scale_is_the_largest_power_of_two_that_fits() {
        type Scale = fn(f32) -> (f32, f32);
        let scales: [(Scale, f32); 2] = [(act_scale, MAX), (act_scale_f16, F16_ACT_MAX)];
        for (scale, max) in scales {
            for amax in [
                1e-30f32, 0.003, 0.5, 1.0, 1.75, 1.76, 3.5, 448.0, 449.0, 7e4, 32768.0, 32769.0,
                3e38,
            ] {
                let (f, inv) = scale(amax);
                assert!(
                    amax * f <= max && amax * f * 2.0 > max || f == pow2(126),
                    "{amax} (max {max})"
                );
                assert_eq!(f.to_bits() & 0x7F_FFFF, 0, "{amax}: f not a power of two");
                assert_eq!(f * inv, 1.0);
            }
            assert_eq!(scale(0.0), (1.0, 1.0));
            assert!(scale(f32::INFINITY).1.is_nan() && scale(f32::NAN).1.is_nan());
            assert_eq!(scale(f32::from_bits(1)).0, pow2(126));
        }
    }

    /// The E4M3 definition written out independently of `decode`, in f64.
    fn by_definition(b: u8) -> f64 {
        let s = if b >> 7 == 1 { -1.0 } else { 1.0 };
        let (e, m) = (((b >> 3) & 15) as i32, (b & 7) as f64);
        if e == 0 {
            s * (m / 8.0) * 2f64.powi(-6)
        } else {
            s * (1.0 + m / 8.0) * 2f64.powi(e - 7)
        }
    }

    #[test]
    fn every_byte_decodes_to_its_definition() {
        for b in 0..=255u8 {
            let d = decode(b);
            if b & 0x7F == 0x7F {
                assert!(d.is_nan(), "{b:#04x} is NaN in e4m3fn");
            } else {
                assert_eq!(d as f64, by_definition(b), "{b:#04x}");
            }
        }
        assert_eq!(decode(0x7E), 448.0);
        assert_eq!(decode(0x38), 1.0);
        assert_eq!(decode(0x01), 2f32.powi(-9)); // smallest subnormal
        assert_eq!(decode(0x07), 7.0 * 2f32.powi(-9)); // largest subnormal
        assert_eq!(decode(0x08), 2f32.powi(-6)); // smallest normal
        assert_eq!(decode(0xFE), -448.0);
    }

    #[test]
    fn encode_inverts_decode_and_rounds_to_nearest() {
        for b in 0..0x7Fu8 {
            assert_eq!(encode(decode(b)), b, "{b:#04x}");
            assert_eq!(encode(-decode(b)), if b == 0 { 0 } else { b | 0x80 });
        }
        // Midway between 1.0 (0x38) and 1.125 (0x39): ties to the even code.
        assert_eq!(encode(1.0625), 0x38);
        assert_eq!(encode(1.07), 0x39);
        assert_eq!(encode(1e9), 0x7E);
        assert_eq!(encode(-1e9), 0xFE);
        assert_eq!(encode(f32::NAN), 0x7F);
        assert_eq!(encode(2f32.powi(-11)), 0); // below half the smallest subnormal
    }
}
