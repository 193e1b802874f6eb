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

#[inline]
fn pow2(e: i32) -> f32 {
    f32::from_bits(((e + 127) as u32) << 23)
}

#[cfg(test)]
mod tests {
    use super::*;

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
