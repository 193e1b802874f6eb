//! Q2_0: ggml's `block_q2_0`, byte-identical with GGUF (type 42). 64 values per 18-byte block:
//! `d` (f16, bytes 0..2), then 16 bytes of 2-bit codes, four per byte, lowest bits first (value
//! `j` is `(qs[j / 4] >> (2 · (j % 4))) & 3`). Code `q` means `(q − 1) · d`: 00 = −1, 01 = 0,
//! 10 = +1, 11 = +2 (ternary weights use the first three).

use super::q4k::f16_to_f32;

/// Values per block.
pub const BLOCK_VALUES: usize = 64;
/// Bytes per block.
pub const BLOCK_BYTES: usize = 18;

/// The multiplier of `d` for a 2-bit code.
#[inline]
pub fn code_value(q: u8) -> f32 {
    (q & 3) as f32 - 1.0
}

/// The 2-bit code of value `j` (0..64) of a block.
#[inline]
pub fn code(block: &[u8], j: usize) -> u8 {
    (block[2 + j / 4] >> (2 * (j % 4))) & 3
}

/// Dequantizes one block into `out` (64 values), as ggml's `dequantize_row_q2_0`:
/// `(q − 1) · d` in f32.
pub fn dequantize_block(block: &[u8], out: &mut [f32]) {
    let d = f16_to_f32(u16::from_le_bytes([block[0], block[1]]));
    for (j, o) in out.iter_mut().enumerate().take(BLOCK_VALUES) {
        *o = code_value(code(block, j)) * d;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_and_position_decodes() {
        for q in 0..4u8 {
            assert_eq!(code_value(q), [-1.0, 0.0, 1.0, 2.0][q as usize]);
        }
        for j in 0..BLOCK_VALUES {
            for q in 0..4u8 {
                let mut b = [0u8; BLOCK_BYTES];
                b[0..2].copy_from_slice(&0x3C00u16.to_le_bytes()); // d = 1
                b[2 + j / 4] = q << (2 * (j % 4));
                let mut out = [9.0f32; BLOCK_VALUES];
                dequantize_block(&b, &mut out);
                for (i, &v) in out.iter().enumerate() {
                    let want = if i == j { code_value(q) } else { -1.0 };
                    assert_eq!(v, want, "value {i} with code {q} at {j}");
                }
            }
        }
    }

    #[test]
    fn scale_is_applied_exactly_including_subnormal_and_negative() {
        for d in [0x0001u16, 0x3555, 0x7BFF, 0xBC00] {
            let mut b = [0u8; BLOCK_BYTES];
            b[0..2].copy_from_slice(&d.to_le_bytes());
            for (i, x) in b[2..].iter_mut().enumerate() {
                *x = (i as u8).wrapping_mul(0x9D);
            }
            let mut out = [0f32; BLOCK_VALUES];
            dequantize_block(&b, &mut out);
            let df = f16_to_f32(d);
            for (j, &v) in out.iter().enumerate() {
                assert_eq!(
                    v.to_bits(),
                    (((code(&b, j) as i32) - 1) as f32 * df).to_bits()
                );
            }
        }
    }
}
