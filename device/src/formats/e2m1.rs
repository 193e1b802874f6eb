//! E2M1 (FP4): 1 sign, 2 exponent (bias 1), 1 mantissa bit. Magnitudes {0, 0.5, 1, 1.5, 2, 3, 4, 6};
//! no Inf or NaN. Code bits `s e1 e0 m` (bit 3 = sign), as in NVIDIA ModelOpt / OCP MX.

/// Magnitude of each 3-bit code (without the sign bit).
pub const MAGNITUDES: [f32; 8] = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0];

/// Largest finite magnitude.
pub const MAX: f32 = 6.0;

/// Value of a 4-bit code (bits above 3 are ignored).
#[inline]
pub fn decode(code: u8) -> f32 {
    let m = MAGNITUDES[(code & 7) as usize];
    if code & 8 != 0 {
        -m
    } else {
        m
    }
}

/// Nearest code to `v` (ties to the even code, as round-to-nearest-even does), saturating at ±6.
/// NaN encodes as +0 (the format has no NaN; callers reject NaN weights before quantizing).
#[inline]
pub fn encode(v: f32) -> u8 {
    let sign = if v.is_sign_negative() { 8u8 } else { 0 };
    let a = if v.is_nan() { 0.0 } else { v.abs() };
    // Midpoints between consecutive magnitudes; at a tie pick the code with mantissa bit 0.
    let mut best = 0u8;
    for c in 1..8u8 {
        let lo = MAGNITUDES[(c - 1) as usize];
        let hi = MAGNITUDES[c as usize];
        let mid = 0.5 * (lo + hi);
        if a > mid || (a == mid && c & 1 == 0) {
            best = c;
        }
    }
    if best == 0 {
        0 // no negative zero codes, so decode(encode(-0.1)) == 0 with code 0
    } else {
        best | sign
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_decodes() {
        let want = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0];
        for c in 0..16u8 {
            let v = decode(c);
            let w = if c & 8 != 0 {
                -want[(c & 7) as usize]
            } else {
                want[(c & 7) as usize]
            };
            assert_eq!(v, w, "code {c:#x}");
        }
    }

    #[test]
    fn encode_is_nearest_with_ties_to_even() {
        for c in 0..16u8 {
            let v = decode(c);
            let back = encode(v);
            assert_eq!(decode(back), v, "code {c:#x}");
        }
        assert_eq!(encode(0.25), 0); // tie 0 / 0.5 -> even (0)
        assert_eq!(encode(0.75), 2); // tie 0.5 / 1.0 -> 1.0 (code 2, even)
        assert_eq!(encode(2.5), 4); // tie 2 / 3 -> 2 (code 4)
        assert_eq!(encode(5.0), 6); // tie 4 / 6 -> 4 (code 6)
        assert_eq!(encode(5.1), 7);
        assert_eq!(encode(100.0), 7);
        assert_eq!(encode(-100.0), 15);
        assert_eq!(encode(-0.1), 0);
    }
}
