//! NVFP4: E2M1 values, one E4M3 scale per 16 consecutive values of a row, one f32 global scale
//! per tensor: `value = e2m1(code) * e4m3(scale) * global`.
//!
//! Two layouts of the same numbers:
//! - **ModelOpt** (checkpoints, and the prefill `_t` copies): `weight` u8 `[rows, cols/2]`, the
//!   even column in the low nibble; `weight_scale` E4M3 `[rows, cols/16]`; `weight_scale_2` f32.
//! - **Tiled** (the decode GEMV layout): the matrix is cut into tiles of 16 rows × 64 columns,
//!   row-tile major (`tile = row_tile * k_tiles + k_tile`). A tile is 512 code bytes — 32 lanes ×
//!   16 bytes, lane `l` holding exactly its `mma.m16n8k16` A-fragments for the tile's four 16-column
//!   steps, one 32-bit word per step — and 64 scale bytes in a separate buffer (8 per lane group,
//!   so a lane reads its rows' 4+4 scales with one 8-byte load). Inside a word the eight codes are
//!   stored pre-positioned so that two masks turn them into E4M3 bytes whose value is
//!   `e2m1 * 2^-6` (see [`slot_bits`]): the kernel converts them with `cvt.rn.f16x2.e4m3x2`.
//!   Rows must be a multiple of 16 and columns a multiple of 64.

use super::{e2m1, e4m3};

/// Values per E4M3 scale.
pub const GROUP: usize = 16;
/// Rows per tile of the tiled layout.
pub const TILE_ROWS: usize = 16;
/// Columns per tile of the tiled layout.
pub const TILE_K: usize = 64;
/// Code bytes per tile.
pub const TILE_CODE_BYTES: usize = TILE_ROWS * TILE_K / 2;
/// Scale bytes per tile.
pub const TILE_SCALE_BYTES: usize = TILE_ROWS * TILE_K / GROUP;
/// E2M1 values of a tiled word, once turned into E4M3 bytes, carry this factor (2^-6).
pub const TILED_E4M3_FACTOR: f32 = 1.0 / 64.0;

/// Bit positions (sign, e1, e0, m) of the 8 slots of a tiled word. Slots 0..4 sit at bits
/// {7,4,3,2} of byte `slot` — already an E4M3 byte after `& 0x9C9C9C9C`; slots 4..8 sit at bits
/// {5,6,1,0} of byte `slot-4` and become E4M3 bytes with
/// `((w & 0x23232323) << 2) | ((w >> 2) & 0x10101010)`.
#[inline]
pub const fn slot_bits(slot: usize) -> [u32; 4] {
    let base = 8 * (slot as u32 % 4);
    if slot < 4 {
        [base + 7, base + 4, base + 3, base + 2]
    } else {
        [base + 5, base + 6, base + 1, base]
    }
}

/// Puts the 4-bit E2M1 `code` into `slot` of a tiled word.
#[inline]
pub fn put_slot(word: u32, slot: usize, code: u8) -> u32 {
    let bits = slot_bits(slot);
    let mut w = word;
    for (i, b) in bits.iter().enumerate() {
        let v = ((code >> (3 - i)) & 1) as u32;
        w = (w & !(1 << b)) | (v << b);
    }
    w
}

/// The 4-bit E2M1 code in `slot` of a tiled word.
#[inline]
pub fn get_slot(word: u32, slot: usize) -> u8 {
    let bits = slot_bits(slot);
    let mut c = 0u8;
    for b in bits {
        c = (c << 1) | ((word >> b) & 1) as u8;
    }
    c
}

/// Where element (`row`, `col`) of a tiled matrix with `k_tiles` column tiles lives:
/// (byte offset of its 32-bit word in the code buffer, slot in that word).
#[inline]
pub fn tiled_code_pos(row: usize, col: usize, k_tiles: usize) -> (usize, usize) {
    let tile = (row / TILE_ROWS) * k_tiles + col / TILE_K;
    let (lr, lk) = (row % TILE_ROWS, col % TILE_K);
    let (step, kk) = (lk / 16, lk % 16);
    let lane = (lr % 8) * 4 + (kk % 8) / 2;
    let slot = if kk >= 8 { 4 } else { 0 } + if lr >= 8 { 2 } else { 0 } + (kk & 1);
    (tile * TILE_CODE_BYTES + lane * 16 + step * 4, slot)
}

/// Byte offset of the scale of (`row`, group `col / 16`) in the tiled scale buffer.
#[inline]
pub fn tiled_scale_pos(row: usize, col: usize, k_tiles: usize) -> usize {
    let tile = (row / TILE_ROWS) * k_tiles + col / TILE_K;
    let (lr, step) = (row % TILE_ROWS, (col % TILE_K) / 16);
    tile * TILE_SCALE_BYTES + (lr % 8) * 8 + if lr >= 8 { 4 } else { 0 } + step
}

/// Dequantizes one tile (without the global scale) into `out[row][col]`, 16 × 64, walking the
/// lanes' words in storage order.
pub fn decode_tile(codes: &[u8], scales: &[u8], out: &mut [[f32; TILE_K]; TILE_ROWS]) {
    for lane in 0..32 {
        let (g, t) = (lane / 4, lane % 4);
        for step in 0..4 {
            let off = lane * 16 + step * 4;
            let w =
                u32::from_le_bytes([codes[off], codes[off + 1], codes[off + 2], codes[off + 3]]);
            let s_lo = e4m3::decode(scales[g * 8 + step]);
            let s_hi = e4m3::decode(scales[g * 8 + 4 + step]);
            for slot in 0..8 {
                let hi = slot & 2 != 0;
                let row = g + if hi { 8 } else { 0 };
                let col = 16 * step + 2 * t + (slot & 1) + if slot & 4 != 0 { 8 } else { 0 };
                out[row][col] = e2m1::decode(get_slot(w, slot)) * if hi { s_hi } else { s_lo };
            }
        }
    }
}

/// Value (`row`, `col`) of an NVFP4 matrix in the tiled layout, global scale included (the
/// same product as `modelopt_value`).
#[inline(always)]
pub fn tiled_value(
    codes: &[u8],
    scales: &[u8],
    global: f32,
    k_tiles: usize,
    row: usize,
    col: usize,
) -> f32 {
    let (off, slot) = tiled_code_pos(row, col, k_tiles);
    let w = u32::from_le_bytes([codes[off], codes[off + 1], codes[off + 2], codes[off + 3]]);
    let s = e4m3::decode(scales[tiled_scale_pos(row, col, k_tiles)]);
    e2m1::decode(get_slot(w, slot)) * s * global
}

/// The code of element (`row`, `col`) in the ModelOpt layout (`cols` columns).
#[inline]
pub fn modelopt_code(codes: &[u8], cols: usize, row: usize, col: usize) -> u8 {
    let b = codes[row * cols / 2 + col / 2];
    if col.is_multiple_of(2) {
        b & 0xF
    } else {
        b >> 4
    }
}

/// The value of element (`row`, `col`) in the ModelOpt layout, global scale included.
#[inline]
pub fn modelopt_value(
    codes: &[u8],
    scales: &[u8],
    global: f32,
    cols: usize,
    row: usize,
    col: usize,
) -> f32 {
    let s = e4m3::decode(scales[row * (cols / GROUP) + col / GROUP]);
    e2m1::decode(modelopt_code(codes, cols, row, col)) * s * global
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_round_trip_and_do_not_overlap() {
        let mut seen = 0u32;
        for slot in 0..8 {
            for b in slot_bits(slot) {
                assert_eq!(seen & (1 << b), 0, "bit {b} used twice");
                seen |= 1 << b;
            }
            for code in 0..16u8 {
                let w = put_slot(0xFFFF_FFFF, slot, code);
                assert_eq!(get_slot(w, slot), code);
                assert_eq!(get_slot(put_slot(0, slot, code), slot), code);
            }
        }
        assert_eq!(seen, u32::MAX);
    }

    /// The kernel's two masks turn every slot into an E4M3 byte worth e2m1 × 2^-6.
    #[test]
    fn kernel_masks_give_e4m3_bytes() {
        for slot in 0..8 {
            for code in 0..16u8 {
                let w = put_slot(0, slot, code);
                let p = w & 0x9C9C_9C9C;
                let q = ((w & 0x2323_2323) << 2) | ((w >> 2) & 0x1010_1010);
                let byte = if slot < 4 {
                    p >> (8 * slot)
                } else {
                    q >> (8 * (slot - 4))
                } as u8;
                assert_eq!(
                    e4m3::decode(byte),
                    e2m1::decode(code) * TILED_E4M3_FACTOR,
                    "slot {slot} code {code:#x}"
                );
            }
        }
    }

    #[test]
    fn tiled_positions_are_a_bijection() {
        let k_tiles = 3;
        let mut used = [0u8; 2 * TILE_CODE_BYTES * 3];
        let mut scale_used = [false; 2 * TILE_SCALE_BYTES * 3];
        for r in 0..32 {
            for c in 0..64 * k_tiles {
                let (off, slot) = tiled_code_pos(r, c, k_tiles);
                assert_eq!(off % 4, 0);
                let bit = 1u8 << slot;
                assert_eq!(used[off] & bit, 0, "({r},{c}) collides");
                used[off] |= bit;
                if c % GROUP == 0 {
                    let s = tiled_scale_pos(r, c, k_tiles);
                    assert!(!scale_used[s]);
                    scale_used[s] = true;
                }
            }
        }
        assert!(used.iter().step_by(4).all(|&b| b == 0xFF));
        assert!(scale_used.iter().all(|&b| b));
    }
}
