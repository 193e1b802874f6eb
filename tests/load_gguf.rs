//! Loading dense FFN weights from GGUF (tests/fixtures/gguf_tiny, written by the `gguf` package
//! from PyPI through tests/fixtures/make_gguf_fixtures.py): Q4_K bit for bit against the
//! package's own numpy dequantizer, F16/BF16 values exactly, `inspect_gguf`, the CLI, and a
//! clear error (never a panic) for each kind of bad input. Files with specific defects are
//! written by a small GGUF writer below, independent of the reader under test.
use denseffn::load::gguf::{inspect_gguf, load_ffn_gguf, GgufWeight};
use denseffn::pack_q4k::Q4kHost;
use denseffn::Error;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

const HIDDEN: usize = 256;
const INTER0: usize = 512;
const INTER1: usize = 128;

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/gguf_tiny")
        .join(rel)
}

fn model() -> PathBuf {
    fixture("model.gguf")
}

fn expected() -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(fixture("expected.json")).unwrap()).unwrap()
}

/// FNV-1a 64, as make_gguf_fixtures.py computes it.
fn fnv1a64(data: &[u8]) -> String {
    let mut h: u64 = 0xCBF2_9CE4_8422_2325;
    for &b in data {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01B3);
    }
    format!("{h:016x}")
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// make_gguf_fixtures.py's `bits16`: pattern `i` of tensor `k`, Inf/NaN patterns made finite.
fn bits16(k: u64, i: u64, bf16: bool) -> u16 {
    const M32: u64 = 0xFFFF_FFFF;
    let mut x = ((k << 20) + i) & M32;
    x ^= x >> 16;
    x = (x * 0x85EB_CA6B) & M32;
    x ^= x >> 13;
    x = (x * 0xC2B2_AE35) & M32;
    x ^= x >> 16;
    let b = (x & 0xFFFF) as u16;
    let exp = if bf16 { 0x7F80 } else { 0x7C00 };
    if b & exp == exp {
        b & !0x4000
    } else {
        b
    }
}

/// The value of an IEEE half pattern, by the definition (finite patterns only).
fn f16_value(h: u16) -> f32 {
    let sign = if h >> 15 == 1 { -1.0 } else { 1.0 };
    let (e, m) = (((h >> 10) & 31) as i32, (h & 1023) as f64);
    let mag = if e == 0 {
        m * 2f64.powi(-24)
    } else {
        (1.0 + m / 1024.0) * 2f64.powi(e - 15)
    };
    (sign * mag) as f32
}

/// The value of a bf16 pattern: the top half of an f32.
fn bf16_value(h: u16) -> f32 {
    f32::from_bits((h as u32) << 16)
}

/// A fresh directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let p = std::env::temp_dir().join(format!(
            "denseffn-gguf-{}-{tag}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    /// Writes `bytes` as `name` and returns its path.
    fn write(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let p = self.path(name);
        std::fs::write(&p, bytes).unwrap();
        p
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn find(hay: &[u8], needle: &[u8]) -> usize {
    hay.windows(needle.len())
        .position(|w| w == needle)
        .unwrap_or_else(|| panic!("{:?} not in the file", String::from_utf8_lossy(needle)))
}

fn load_err(path: &Path, layer: usize) -> Error {
    match load_ffn_gguf(path, layer) {
        Ok(_) => panic!(
            "{} layer {layer}: loaded, expected an error",
            path.display()
        ),
        Err(e) => e,
    }
}

fn assert_says(e: &Error, needles: &[&str]) {
    let msg = e.to_string();
    for n in needles {
        assert!(msg.contains(n), "error {msg:?} does not mention {n:?}");
    }
}

// ---- a small GGUF writer, independent of the reader ----------------------------------------

const T_F32: u32 = 0;
const T_F16: u32 = 1;
const T_Q4K: u32 = 12;
const T_BF16: u32 = 30;

fn gstr(s: &[u8]) -> Vec<u8> {
    let mut v = (s.len() as u64).to_le_bytes().to_vec();
    v.extend_from_slice(s);
    v
}

struct Tensor {
    name: String,
    /// ggml order (dims[0] contiguous).
    dims: Vec<u64>,
    ty: u32,
    data: Vec<u8>,
    /// Replaces the computed data offset.
    offset: Option<u64>,
}

struct Gguf {
    version: u32,
    /// Metadata pairs: key, value type, encoded value.
    kvs: Vec<(Vec<u8>, u32, Vec<u8>)>,
    tensors: Vec<Tensor>,
    alignment: u64,
}

impl Gguf {
    fn new() -> Gguf {
        let mut g = Gguf {
            version: 3,
            kvs: Vec::new(),
            tensors: Vec::new(),
            alignment: 32,
        };
        g.kv("general.architecture", 8, gstr(b"llama"));
        g
    }

    fn kv(&mut self, key: &str, ty: u32, value: Vec<u8>) -> &mut Self {
        self.kvs.push((key.as_bytes().to_vec(), ty, value));
        self
    }

    /// Sets `general.alignment` (a u32) and lays the data out with it.
    fn align(&mut self, a: u32) -> &mut Self {
        self.kv("general.alignment", 4, a.to_le_bytes().to_vec());
        self.alignment = a as u64;
        self
    }

    /// A 2-D tensor `[rows, cols]` (written as dims [cols, rows]).
    fn matrix(&mut self, name: &str, ty: u32, rows: usize, cols: usize, data: Vec<u8>) {
        self.tensors.push(Tensor {
            name: name.into(),
            dims: vec![cols as u64, rows as u64],
            ty,
            data,
            offset: None,
        });
    }

    fn tensor(&mut self, name: &str) -> &mut Tensor {
        self.tensors.iter_mut().find(|t| t.name == name).unwrap()
    }

    fn bytes(&self) -> Vec<u8> {
        let pad = |n: u64| n.div_ceil(self.alignment) * self.alignment;
        let mut b = b"GGUF".to_vec();
        b.extend_from_slice(&self.version.to_le_bytes());
        b.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        b.extend_from_slice(&(self.kvs.len() as u64).to_le_bytes());
        for (k, ty, v) in &self.kvs {
            b.extend_from_slice(&gstr(k));
            b.extend_from_slice(&ty.to_le_bytes());
            b.extend_from_slice(v);
        }
        let mut off = 0u64;
        for t in &self.tensors {
            b.extend_from_slice(&gstr(t.name.as_bytes()));
            b.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
            for d in &t.dims {
                b.extend_from_slice(&d.to_le_bytes());
            }
            b.extend_from_slice(&t.ty.to_le_bytes());
            b.extend_from_slice(&t.offset.unwrap_or(off).to_le_bytes());
            off = pad(off + t.data.len() as u64);
        }
        b.resize(pad(b.len() as u64) as usize, 0);
        for t in &self.tensors {
            b.extend_from_slice(&t.data);
            b.resize(pad(b.len() as u64) as usize, 0);
        }
        b
    }
}

/// Value `i` of test matrix `k`: small distinct f32s.
fn val(k: usize, i: usize) -> f32 {
    ((i * 7 + k * 13) % 101) as f32 / 64.0 - 0.75
}

fn f32_matrix(k: usize, n: usize) -> Vec<f32> {
    (0..n).map(|i| val(k, i)).collect()
}

/// One layer `blk.{layer}` with F32 gate/up [inter, hidden] and down [hidden, inter].
fn add_f32_layer(g: &mut Gguf, layer: usize, hidden: usize, inter: usize) {
    for (k, p, r, c) in [
        (0, "ffn_gate", inter, hidden),
        (1, "ffn_up", inter, hidden),
        (2, "ffn_down", hidden, inter),
    ] {
        let name = format!("blk.{layer}.{p}.weight");
        g.matrix(&name, T_F32, r, c, f32_bytes(&f32_matrix(k, r * c)));
    }
}

fn f32_model(hidden: usize, inter: usize) -> Gguf {
    let mut g = Gguf::new();
    add_f32_layer(&mut g, 0, hidden, inter);
    g
}

// ---- the fixture: numerics -------------------------------------------------------------------

#[test]
fn q4k_layer_matches_the_gguf_package_bit_for_bit() {
    let exp = expected();
    let samples = exp["sample_blocks"].as_u64().unwrap() as usize;
    let reference: Vec<f32> = std::fs::read(fixture("q4k_ref.f32"))
        .unwrap()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    assert_eq!(reference.len(), 3 * samples * 256);
    let ffn = load_ffn_gguf(&model(), 0).unwrap();
    assert_eq!(ffn.file_types, ["Q4_K"; 3]);
    assert_eq!((ffn.hidden(), ffn.intermediate()), (HIDDEN, INTER0));
    for (i, (proj, w, rows, cols)) in [
        ("gate", &ffn.gate, INTER0, HIDDEN),
        ("up", &ffn.up, INTER0, HIDDEN),
        ("down", &ffn.down, HIDDEN, INTER0),
    ]
    .into_iter()
    .enumerate()
    {
        let e = &exp["layer0"][proj];
        let GgufWeight::Q4K(q) = w else {
            panic!("{proj}: not Q4_K: {w:?}")
        };
        assert_eq!((q.rows, q.cols), (rows, cols), "{proj}");
        assert_eq!(
            fnv1a64(&q.blocks),
            e["blocks_fnv1a64"].as_str().unwrap(),
            "{proj}: block bytes differ from what the gguf package wrote"
        );
        let got = q.dequantize();
        assert_eq!(got.len(), rows * cols);
        // Value by value on the stored sample (the extreme blocks are gate's first ones).
        for (j, (g, r)) in got
            .iter()
            .zip(&reference[i * samples * 256..(i + 1) * samples * 256])
            .enumerate()
        {
            assert_eq!(
                g.to_bits(),
                r.to_bits(),
                "{proj} value {j} (block {}): ours {g:e}, gguf package {r:e}",
                j / 256
            );
        }
        // Every value, through the digest of the package's whole output.
        assert_eq!(
            fnv1a64(&f32_bytes(&got)),
            e["dequant_fnv1a64"].as_str().unwrap(),
            "{proj}: dequantized values differ from gguf.quants.dequantize"
        );
        assert_eq!(w.dequantize(), got);
        assert_eq!((w.rows(), w.cols()), (rows, cols));
    }
    // Sanity: the sample covers zeros, huge values and both signs.
    assert!(reference.iter().any(|v| v.abs() > 1e6));
    assert!(reference.iter().any(|v| *v < 0.0) && reference.iter().any(|v| *v > 0.0));
}

#[test]
fn f16_and_bf16_layer_values_are_exact() {
    let ffn = load_ffn_gguf(&model(), 1).unwrap();
    assert_eq!(ffn.file_types, ["F16", "F16", "BF16"]);
    assert_eq!((ffn.hidden(), ffn.intermediate()), (HIDDEN, INTER1));
    for (k, w, rows, cols, bf) in [
        (1u64, &ffn.gate, INTER1, HIDDEN, false),
        (2, &ffn.up, INTER1, HIDDEN, false),
        (3, &ffn.down, HIDDEN, INTER1, true),
    ] {
        let GgufWeight::F32 {
            rows: r,
            cols: c,
            data,
        } = w
        else {
            panic!("tensor {k}: not f32")
        };
        assert_eq!((*r, *c), (rows, cols));
        assert_eq!(data.len(), rows * cols);
        let mut signs = [false; 2];
        for (i, v) in data.iter().enumerate() {
            let b = bits16(k, i as u64, bf);
            let want = if bf { bf16_value(b) } else { f16_value(b) };
            assert_eq!(
                v.to_bits(),
                want.to_bits(),
                "tensor {k} value [{}, {}] (pattern {b:#06x})",
                i / cols,
                i % cols
            );
            signs[v.is_sign_negative() as usize] = true;
        }
        assert_eq!(signs, [true, true]);
    }
}

#[test]
fn inspect_lists_the_ffn_weights() {
    let list = inspect_gguf(&model()).unwrap();
    let exp = expected();
    let file = std::fs::read(model()).unwrap();
    let want = [
        (0, "ffn_gate", "Q4_K", [INTER0, HIDDEN], 73728),
        (0, "ffn_up", "Q4_K", [INTER0, HIDDEN], 73728),
        (0, "ffn_down", "Q4_K", [HIDDEN, INTER0], 73728),
        (1, "ffn_gate", "F16", [INTER1, HIDDEN], 65536),
        (1, "ffn_up", "F16", [INTER1, HIDDEN], 65536),
        (1, "ffn_down", "BF16", [HIDDEN, INTER1], 65536),
    ];
    assert_eq!(list.len(), want.len(), "{list:#?}");
    for (t, (layer, p, ty, shape, bytes)) in list.iter().zip(want) {
        assert_eq!(t.layer, layer);
        assert_eq!(t.name, format!("blk.{layer}.{p}.weight"));
        assert_eq!(t.short_name(), format!("{p}.weight"));
        assert_eq!(t.type_name, ty);
        let id = match ty {
            "Q4_K" => T_Q4K,
            "F16" => T_F16,
            _ => T_BF16,
        };
        assert_eq!(t.ggml_type, id);
        assert_eq!(t.shape, shape.to_vec());
        assert_eq!(t.bytes, Some(bytes));
        assert_eq!(t.offset % 32, 0);
        if layer == 0 {
            let proj = p.strip_prefix("ffn_").unwrap();
            assert_eq!(
                fnv1a64(&file[t.offset..t.offset + bytes]),
                exp["layer0"][proj]["blocks_fnv1a64"].as_str().unwrap(),
                "{}: offset does not point at its data",
                t.name
            );
        }
    }
    // No FFN weights: an empty list, not an error.
    let mut g = Gguf::new();
    g.matrix("blk.0.attn_q.weight", T_F32, 2, 2, vec![0; 16]);
    g.matrix("blk.0.ffn_norm.weight", T_F32, 1, 2, vec![0; 8]);
    let d = TempDir::new("no-ffn");
    assert!(inspect_gguf(&d.write("x.gguf", &g.bytes()))
        .unwrap()
        .is_empty());
    // A type this crate does not know is listed, of unknown size.
    let mut g = f32_model(4, 8);
    g.tensor("blk.0.ffn_up.weight").ty = 99;
    let list = inspect_gguf(&d.write("y.gguf", &g.bytes())).unwrap();
    assert_eq!(list[1].type_name, "unknown(99)");
    assert_eq!(list[1].bytes, None);
    assert_eq!(list[0].bytes, Some(4 * 8 * 4));
}

#[test]
fn version_2_and_other_alignments_load_the_same() {
    let d = TempDir::new("v2");
    let mut b = std::fs::read(model()).unwrap();
    b[4..8].copy_from_slice(&2u32.to_le_bytes());
    let v2 = d.write("v2.gguf", &b);
    for layer in 0..2 {
        assert_eq!(
            load_ffn_gguf(&v2, layer).unwrap(),
            load_ffn_gguf(&model(), layer).unwrap()
        );
    }
    assert_eq!(inspect_gguf(&v2).unwrap(), inspect_gguf(&model()).unwrap());

    // F32 weights, Q4_K blocks and F16/BF16 weights written by the test writer, at alignments
    // 1 (odd data offsets: the value-by-value f16 path), 8, 64 and 4096; metadata before and
    // after general.alignment.
    let q = Q4kHost::quantize(&f32_matrix(5, 4 * 256), 4, 256).unwrap();
    for align in [1u32, 8, 64, 4096] {
        let mut g = Gguf::new();
        g.kv("a.u8", 0, vec![7])
            .kv("a.f64", 12, 1.5f64.to_le_bytes().to_vec())
            .kv("a.bool", 7, vec![1]);
        g.align(align);
        // An array of 3 strings, one not UTF-8 (the reader does not care).
        let mut arr = 8u32.to_le_bytes().to_vec();
        arr.extend_from_slice(&3u64.to_le_bytes());
        for s in [&b"x"[..], b"", b"\xff\xfe not utf-8"] {
            arr.extend_from_slice(&gstr(s));
        }
        g.kv("a.strings", 9, arr);
        g.matrix("blk.0.attn_norm.weight", T_F32, 1, 3, vec![0; 12]);
        add_f32_layer(&mut g, 0, 256, 4);
        g.matrix("blk.1.ffn_gate.weight", T_Q4K, 4, 256, q.blocks.clone());
        g.matrix("blk.1.ffn_up.weight", T_Q4K, 4, 256, q.blocks.clone());
        g.matrix("blk.1.ffn_down.weight", T_F32, 256, 4, vec![0; 4096]);
        g.matrix("blk.2.odd", 24, 1, 1, vec![0]); // one I8 byte
        let halves = |k: u64, n: usize, bf: bool| -> Vec<u8> {
            (0..n as u64)
                .flat_map(|i| bits16(k, i, bf).to_le_bytes())
                .collect()
        };
        g.matrix("blk.2.ffn_gate.weight", T_F16, 3, 5, halves(1, 15, false));
        g.matrix("blk.2.ffn_up.weight", T_BF16, 3, 5, halves(2, 15, true));
        g.matrix("blk.2.ffn_down.weight", T_F16, 5, 3, halves(3, 15, false));
        let p = d.write("f32.gguf", &g.bytes());
        let ffn = load_ffn_gguf(&p, 2).unwrap();
        assert_eq!(ffn.file_types, ["F16", "BF16", "F16"]);
        for (k, w, bf) in [
            (1, &ffn.gate, false),
            (2, &ffn.up, true),
            (3, &ffn.down, false),
        ] {
            let want: Vec<u32> = (0..15)
                .map(|i| {
                    let b = bits16(k, i, bf);
                    if bf { bf16_value(b) } else { f16_value(b) }.to_bits()
                })
                .collect();
            let got: Vec<u32> = w.dequantize().iter().map(|v| v.to_bits()).collect();
            assert_eq!(got, want, "alignment {align}, tensor {k}");
        }
        let ffn = load_ffn_gguf(&p, 0).unwrap_or_else(|e| panic!("alignment {align}: {e}"));
        assert_eq!(ffn.file_types, ["F32"; 3]);
        for (k, w, r, c) in [
            (0, &ffn.gate, 4, 256),
            (1, &ffn.up, 4, 256),
            (2, &ffn.down, 256, 4),
        ] {
            assert_eq!(
                w,
                &GgufWeight::F32 {
                    rows: r,
                    cols: c,
                    data: f32_matrix(k, r * c)
                },
                "alignment {align}"
            );
        }
        let ffn = load_ffn_gguf(&p, 1).unwrap();
        assert_eq!(ffn.file_types, ["Q4_K", "Q4_K", "F32"]);
        assert_eq!(ffn.gate, GgufWeight::Q4K(q.clone()));
        let list = inspect_gguf(&p).unwrap();
        assert!(list.iter().all(|t| t.offset % align as usize == 0));
    }
}

// ---- bad input -------------------------------------------------------------------------------

#[test]
fn missing_empty_and_foreign_files_are_load_errors() {
    let d = TempDir::new("foreign");
    let e = load_err(&d.path("nope.gguf"), 0);
    assert!(matches!(e, Error::Load(_)), "{e}");
    assert_says(&e, &["nope.gguf", "cannot open"]);
    assert!(matches!(inspect_gguf(&d.0), Err(Error::Load(_))));
    for (tag, bytes, needle) in [
        ("empty", &b""[..], "too short"),
        ("three", b"GGU", "too short"),
        ("magic", b"GGUG\x03\0\0\0", "not a GGUF file"),
        (
            "safetensors",
            b"\x08\0\0\0\0\0\0\0{}      ",
            "not a GGUF file",
        ),
        ("ggjt", b"tjgg\x03\0\0\0", "old ggml"),
    ] {
        let p = d.write(&format!("{tag}.gguf"), bytes);
        let e = load_err(&p, 0);
        assert!(matches!(e, Error::Load(_)), "{tag}: {e}");
        assert_says(&e, &[needle, &format!("{tag}.gguf")]);
        assert!(matches!(inspect_gguf(&p), Err(Error::Load(_))), "{tag}");
    }
    // A safetensors file given to the GGUF reader.
    let st =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/nvfp4_tiny/model.safetensors");
    assert_says(&load_err(&st, 0), &["not a GGUF file"]);
}

#[test]
fn unsupported_versions_are_unsupported() {
    let d = TempDir::new("version");
    let b = std::fs::read(model()).unwrap();
    for (v, needle) in [
        (1u32, "version 1"),
        (4, "version 4"),
        (0, "version 0"),
        (0x0300_0000, "big-endian"),
        (0x0200_0000, "big-endian"),
    ] {
        let mut c = b.clone();
        c[4..8].copy_from_slice(&v.to_le_bytes());
        let p = d.write("v.gguf", &c);
        let e = load_err(&p, 0);
        assert!(matches!(e, Error::Unsupported(_)), "{v}: {e}");
        assert_says(&e, &[needle, "v.gguf"]);
        assert!(matches!(inspect_gguf(&p), Err(Error::Unsupported(_))));
    }
}

#[test]
fn truncated_files_are_load_errors() {
    let b = std::fs::read(model()).unwrap();
    let d = TempDir::new("trunc");
    let at = |s: &[u8]| find(&b, s);
    // (length, what the message must name)
    let cases = [
        (6, "the version"),
        (12, "the tensor count"),
        (20, "the metadata count"),
        (30, "metadata count 27"),
        (at(b"denseffn.test.f64") + 5, "metadata key 20 of 27"),
        (at(b"tokenizer.ggml.tokens") + 30, "tokenizer.ggml.tokens"),
        (at(b"blk.0.ffn_up.weight") + 19 + 6, "`blk.0.ffn_up.weight`"),
        (at(b"output_norm.weight") + 4, "tensor info 10 of 11"),
        (b.len() - 100, "`output_norm.weight`"),
        (b.len() - 1, "runs past the end"),
        (b.len() / 2, "runs past the end"),
    ];
    for (len, needle) in cases {
        let p = d.write("t.gguf", &b[..len]);
        for layer in 0..2 {
            let e = load_err(&p, layer);
            assert!(matches!(e, Error::Load(_)), "{len}: {e}");
            assert_says(&e, &[needle, "truncated", "t.gguf"]);
        }
        assert!(matches!(inspect_gguf(&p), Err(Error::Load(_))), "{len}");
    }
    // Every length of the header and a spread of the data: an error, never a panic or a load.
    let header_end = inspect_gguf(&model()).unwrap()[0].offset;
    for len in (0..header_end).chain((header_end..b.len()).step_by(997)) {
        let p = d.write("t.gguf", &b[..len]);
        let e = load_err(&p, len % 2);
        assert!(matches!(e, Error::Load(_)), "length {len}: {e}");
    }
}

/// The fixture with `edit` applied to its bytes, as an error of each reader.
fn edited_errors(d: &TempDir, edit: impl FnOnce(&mut Vec<u8>)) -> (Error, Error) {
    let mut b = std::fs::read(model()).unwrap();
    edit(&mut b);
    let p = d.write("e.gguf", &b);
    (load_err(&p, 0), inspect_gguf(&p).unwrap_err())
}

#[test]
fn absurd_counts_and_lengths_are_load_errors() {
    let d = TempDir::new("absurd");
    let b = std::fs::read(model()).unwrap();
    let key0 = 24; // the first metadata key's length
    let tokens = find(&b, b"tokenizer.ggml.tokens") + 21 + 4 + 4; // its element count
    let up = find(&b, b"blk.0.ffn_up.weight") + 19; // its n_dims
    let up_offset = up + 4 + 16 + 4; // its data offset (after 2 dims and the type)
    let old = u64::from_le_bytes(b[up_offset..up_offset + 8].try_into().unwrap());
    let cases: Vec<(&str, usize, Vec<u8>, &str)> = vec![
        (
            "tensors",
            8,
            u64::MAX.to_le_bytes().to_vec(),
            "tensor count",
        ),
        (
            "tensors",
            8,
            (1u64 << 40).to_le_bytes().to_vec(),
            "tensor count",
        ),
        ("kvs", 16, u64::MAX.to_le_bytes().to_vec(), "metadata count"),
        (
            "kvs",
            16,
            (1u64 << 33).to_le_bytes().to_vec(),
            "metadata count",
        ),
        ("key", key0, (1u64 << 62).to_le_bytes().to_vec(), "length"),
        (
            "array",
            tokens,
            (1u64 << 61).to_le_bytes().to_vec(),
            "elements",
        ),
        ("array", tokens, u64::MAX.to_le_bytes().to_vec(), "elements"),
        ("dims", up, 5u32.to_le_bytes().to_vec(), "5 dimensions"),
        ("dims", up, u32::MAX.to_le_bytes().to_vec(), "dimensions"),
        (
            "dim",
            up + 4,
            u64::MAX.to_le_bytes().to_vec(),
            "blk.0.ffn_up.weight",
        ),
        (
            "offset",
            up_offset,
            (1u64 << 62).to_le_bytes().to_vec(),
            "runs past the end",
        ),
        (
            "offset",
            up_offset,
            (u64::MAX - 31).to_le_bytes().to_vec(),
            "overflows",
        ),
        (
            "misaligned",
            up_offset,
            (old + 16).to_le_bytes().to_vec(),
            "not a multiple of the alignment",
        ),
        (
            "block",
            up + 4,
            100u64.to_le_bytes().to_vec(),
            "not a multiple of its block",
        ),
    ];
    for (tag, at, bytes, needle) in cases {
        let (e, i) = edited_errors(&d, |b| b[at..at + bytes.len()].copy_from_slice(&bytes));
        assert!(matches!(e, Error::Load(_)), "{tag}: {e}");
        assert_says(&e, &[needle, "e.gguf"]);
        assert!(matches!(i, Error::Load(_)), "{tag}: {i}");
    }

    // Structures only a writer makes: deep arrays, bad value types, bad alignments, twins.
    let deep = {
        let mut v = Vec::new();
        for _ in 0..100 {
            v.extend_from_slice(&9u32.to_le_bytes());
            v.extend_from_slice(&1u64.to_le_bytes());
        }
        v.extend_from_slice(&0u32.to_le_bytes());
        v.extend_from_slice(&1u64.to_le_bytes());
        v.push(0);
        v
    };
    type Edit = Box<dyn Fn(&mut Gguf)>;
    let cases: Vec<(&str, Edit, &str)> = vec![
        (
            "deep",
            Box::new(move |g| {
                g.kv("x", 9, deep.clone());
            }),
            "nested",
        ),
        (
            "value-type",
            Box::new(|g| {
                g.kv("x.y", 13, vec![0; 8]);
            }),
            "`x.y` has unknown value type 13",
        ),
        (
            "elem-type",
            Box::new(|g| {
                let mut v = 77u32.to_le_bytes().to_vec();
                v.extend_from_slice(&1u64.to_le_bytes());
                v.extend_from_slice(&[0; 8]);
                g.kv("x.z", 9, v);
            }),
            "unknown value type 77",
        ),
        (
            "align-0",
            Box::new(|g| {
                g.kv("general.alignment", 4, 0u32.to_le_bytes().to_vec());
            }),
            "alignment is 0",
        ),
        (
            "align-48",
            Box::new(|g| {
                g.kv("general.alignment", 4, 48u32.to_le_bytes().to_vec());
            }),
            "not a power of two",
        ),
        (
            "align-type",
            Box::new(|g| {
                g.kv("general.alignment", 10, 32u64.to_le_bytes().to_vec());
            }),
            "`general.alignment` has value type 10 (u64), expected u32",
        ),
        (
            "twin-key",
            Box::new(|g| {
                g.kv("general.architecture", 8, gstr(b"x"));
            }),
            "appears twice",
        ),
        (
            "twin-tensor",
            Box::new(|g| {
                g.matrix("blk.0.ffn_up.weight", T_F32, 1, 1, vec![0; 4]);
            }),
            "`blk.0.ffn_up.weight` appears twice",
        ),
        (
            "long-key",
            Box::new(|g| {
                let k = "k".repeat(70_000);
                g.kv(&k, 0, vec![0]);
            }),
            "over 65536",
        ),
        (
            "outside",
            Box::new(|g| {
                g.tensor("blk.0.ffn_down.weight").offset = Some(1 << 20);
            }),
            "`blk.0.ffn_down.weight`'s data",
        ),
    ];
    for (tag, edit, needle) in cases {
        let mut g = f32_model(8, 16);
        edit(&mut g);
        let p = d.write("w.gguf", &g.bytes());
        let e = load_err(&p, 0);
        assert!(matches!(e, Error::Load(_)), "{tag}: {e}");
        assert_says(&e, &[needle, "w.gguf"]);
        assert!(matches!(inspect_gguf(&p), Err(Error::Load(_))), "{tag}");
    }
}

#[test]
fn missing_tensors_are_named() {
    let d = TempDir::new("missing");
    for p in ["ffn_gate", "ffn_up", "ffn_down"] {
        let mut g = f32_model(8, 16);
        add_f32_layer(&mut g, 1, 8, 16);
        let name = format!("blk.0.{p}.weight");
        g.tensors.retain(|t| t.name != name);
        let path = d.write("m.gguf", &g.bytes());
        let e = load_err(&path, 0);
        assert!(matches!(e, Error::Load(_)), "{e}");
        assert_says(&e, &[&name, "not found", "m.gguf"]);
        load_ffn_gguf(&path, 1).unwrap();
    }
    // A split file says so.
    let mut g = f32_model(8, 16);
    g.kv("split.count", 2, 3u16.to_le_bytes().to_vec());
    g.tensors.pop();
    let e = load_err(&d.write("s.gguf", &g.bytes()), 0);
    assert_says(
        &e,
        &["blk.0.ffn_down.weight", "not found", "one of 3 split"],
    );
}

#[test]
fn shapes_must_fit_together() {
    let d = TempDir::new("shape");
    let replace = |g: &mut Gguf, p: &str, dims: Vec<u64>| {
        let n: u64 = dims.iter().product();
        let t = g.tensor(&format!("blk.0.{p}.weight"));
        t.dims = dims;
        t.data = vec![0; n as usize * 4];
    };
    let cases: Vec<(&str, Vec<u64>, &[&str])> = vec![
        (
            "ffn_up",
            vec![8, 8],
            &["blk.0.ffn_up.weight", "[8, 8]", "expected [16, 8]"],
        ),
        (
            "ffn_down",
            vec![8, 16],
            &[
                "blk.0.ffn_down.weight",
                "[16, 8]",
                "expected [8, 16]",
                "ffn_gate",
            ],
        ),
        ("ffn_down", vec![16, 16], &["expected [8, 16]"]),
        ("ffn_gate", vec![128], &["blk.0.ffn_gate.weight", "2-D"]),
        ("ffn_gate", vec![8, 4, 4], &["blk.0.ffn_gate.weight", "2-D"]),
        ("ffn_up", vec![8, 0], &["blk.0.ffn_up.weight", "zero-sized"]),
    ];
    for (p, dims, needles) in cases {
        let mut g = f32_model(8, 16);
        replace(&mut g, p, dims.clone());
        let e = load_err(&d.write("s.gguf", &g.bytes()), 0);
        assert!(matches!(e, Error::Shape(_)), "{p} {dims:?}: {e}");
        assert_says(&e, needles);
    }
    // Trailing 1-dims are a 2-D matrix.
    let mut g = f32_model(8, 16);
    g.tensor("blk.0.ffn_up.weight").dims.push(1);
    load_ffn_gguf(&d.write("s.gguf", &g.bytes()), 0).unwrap();
}

#[test]
fn other_types_are_unsupported() {
    let d = TempDir::new("types");
    // (type id, bytes for 16 rows of 256 values, name the message gives)
    for (ty, bytes, name) in [
        (8u32, 16 * 8 * 34, "Q8_0"),
        (14, 16 * 210, "Q6_K"),
        (41, 16 * 2 * 18, "Q1_0"),
        (99, 100, "unknown(99)"),
        (26, 16 * 256 * 4, "I32"),
    ] {
        let mut g = f32_model(256, 16);
        let t = g.tensor("blk.0.ffn_gate.weight");
        t.ty = ty;
        t.data = vec![0; bytes];
        let e = load_err(&d.write("u.gguf", &g.bytes()), 0);
        assert!(matches!(e, Error::Unsupported(_)), "{name}: {e}");
        assert_says(
            &e,
            &["blk.0.ffn_gate.weight", &format!("ggml type {ty} ({name})")],
        );
    }
}

/// GGUF NVFP4 (type 40) tensors load as NVFP4, re-laid exactly (`Nvfp4Host::from_ggml_nvfp4`).
#[test]
fn nvfp4_tensors_load_as_nvfp4() {
    let d = TempDir::new("nvfp4");
    let mut g = f32_model(256, 16);
    let mut blocks = vec![0u8; 16 * 4 * 36];
    for (i, b) in blocks.iter_mut().enumerate() {
        *b = (i * 37 % 251) as u8;
    }
    for blk in blocks.chunks_exact_mut(36) {
        blk[..4].copy_from_slice(&[0x30, 0x31, 0x2A, 0x38]);
    }
    let t = g.tensor("blk.0.ffn_gate.weight");
    t.ty = 40;
    t.data = blocks.clone();
    let ffn = load_ffn_gguf(&d.write("n.gguf", &g.bytes()), 0).unwrap();
    let want = denseffn::pack::Nvfp4Host::from_ggml_nvfp4("g", 16, 256, &blocks).unwrap();
    assert_eq!(ffn.gate, GgufWeight::Nvfp4(want));
    // A scale byte with no E4M3 form is a clear error naming the tensor.
    let mut bad = blocks;
    bad[0] = 0xFF;
    g.tensor("blk.0.ffn_gate.weight").data = bad;
    let e = load_err(&d.write("n.gguf", &g.bytes()), 0);
    assert!(matches!(e, Error::BadWeights(_)), "{e}");
    assert_says(&e, &["blk.0.ffn_gate.weight"]);
}

#[test]
fn bad_values_are_bad_weights() {
    let d = TempDir::new("values");
    for (ty, bytes, what) in [
        (T_F16, 0x7E00u16.to_le_bytes().to_vec(), "NaN"),
        (T_F16, 0xFC00u16.to_le_bytes().to_vec(), "-inf"),
        (T_BF16, 0x7F80u16.to_le_bytes().to_vec(), "inf"),
        (T_F32, f32::NAN.to_le_bytes().to_vec(), "NaN"),
    ] {
        let w = bytes.len();
        let mut g = f32_model(8, 16);
        let t = g.tensor("blk.0.ffn_up.weight");
        t.ty = ty;
        t.data = vec![0; 16 * 8 * w];
        t.data[(3 * 8 + 5) * w..(3 * 8 + 6) * w].copy_from_slice(&bytes);
        let e = load_err(&d.write("b.gguf", &g.bytes()), 0);
        assert!(matches!(e, Error::BadWeights(_)), "{e}");
        assert_says(&e, &["blk.0.ffn_up.weight", "[3, 5]", what]);
    }
    // Q4_K blocks with a negative or NaN d / dmin.
    let q = Q4kHost::quantize(&f32_matrix(1, 4 * 256), 4, 256).unwrap();
    for (at, h) in [(0usize, 0xBC00u16), (2, 0x7E00), (144 * 3, 0xFC00)] {
        let mut blocks = q.blocks.clone();
        blocks[at..at + 2].copy_from_slice(&h.to_le_bytes());
        let mut g = Gguf::new();
        g.matrix("blk.0.ffn_gate.weight", T_Q4K, 4, 256, blocks);
        g.matrix("blk.0.ffn_up.weight", T_Q4K, 4, 256, q.blocks.clone());
        g.matrix("blk.0.ffn_down.weight", T_F32, 256, 4, vec![0; 4096]);
        let e = load_err(&d.write("q.gguf", &g.bytes()), 0);
        assert!(matches!(e, Error::BadWeights(_)), "{e}");
        assert_says(&e, &["blk.0.ffn_gate.weight", "block"]);
    }
}

#[test]
fn layer_out_of_range_says_how_many() {
    for layer in [2, 3, usize::MAX] {
        let e = load_err(&model(), layer);
        assert!(matches!(e, Error::Invalid(_)), "{e}");
        assert_says(&e, &[&format!("layer {layer}"), "2 layers", "model.gguf"]);
    }
    let mut g = Gguf::new();
    g.matrix("output_norm.weight", T_F32, 1, 4, vec![0; 16]);
    let d = TempDir::new("layers");
    let e = load_err(&d.write("n.gguf", &g.bytes()), 0);
    assert!(matches!(e, Error::Invalid(_)), "{e}");
    assert_says(&e, &["0 layers"]);
}

#[test]
fn random_header_corruptions_never_panic() {
    use std::os::unix::fs::FileExt;
    let bytes = std::fs::read(model()).unwrap();
    let header_end = inspect_gguf(&model()).unwrap()[0].offset; // first FFN tensor's data
    let d = TempDir::new("fuzz");
    let path = d.write("f.gguf", &bytes);
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    let mut rng = SmallRng::seed_from_u64(20261203);
    let (mut errors, mut loads) = (0, 0);
    for i in 0..4000 {
        let at = rng.random_range(0..header_end);
        // Random bytes, and the values that most often make counts and lengths absurd.
        let v = match i % 4 {
            0 => 0xFF,
            1 => 0x00,
            _ => rng.random::<u8>(),
        };
        file.write_at(&[v], at as u64).unwrap();
        let result = std::panic::catch_unwind(|| {
            let a = load_ffn_gguf(&path, i % 2);
            let b = inspect_gguf(&path);
            (a.is_err(), b.is_ok())
        });
        match result {
            Ok((err, _)) => {
                errors += err as usize;
                loads += !err as usize;
            }
            Err(_) => panic!("byte {at} set to {v:#04x}: the reader panicked"),
        }
        file.write_at(&bytes[at..at + 1], at as u64).unwrap();
    }
    eprintln!("4000 corruptions: {errors} errors, {loads} loads");
    assert!(errors > 500, "{errors}");
    assert!(loads > 0);
}

fn cli(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_denseffn"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn cli_inspect_reads_gguf() {
    let out = cli(&["inspect", model().to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for line in [
        "| 0 | ffn_gate.weight | Q4_K | [512, 256] | 73728 |",
        "| 1 | ffn_down.weight | BF16 | [256, 128] | 65536 |",
        "| 0 | Q4_K | [512, 256] | [512, 256] | [256, 512] | 221184 |",
        "| 1 | F16 + BF16 | [128, 256] | [128, 256] | [256, 128] | 196608 |",
        "2 layers with FFN tensors, 6 tensors, 417792 bytes",
    ] {
        assert!(text.contains(line), "no {line:?} in\n{text}");
    }
    // Found by its magic without the extension, too.
    let d = TempDir::new("cli");
    let p = d.write("model.bin", &std::fs::read(model()).unwrap());
    let out = cli(&["inspect", p.to_str().unwrap()]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("| 0 | ffn_up.weight | Q4_K |"));
    let p = d.write("bad.gguf", b"GGUF\x01\0\0\0");
    let out = cli(&["inspect", p.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("version 1"));
}

#[test]
fn q2_0_layers_load_byte_for_byte() {
    use denseffn::pack_q2::Q2Host;
    let (h, i) = (128usize, 256usize);
    let mut g = Gguf::new();
    let mut rng = SmallRng::seed_from_u64(42);
    let mut want = Vec::new();
    for (k, p, r, c) in [
        (0u64, "ffn_gate", i, h),
        (1, "ffn_up", i, h),
        (2, "ffn_down", h, i),
    ] {
        let w: Vec<f32> = (0..r * c)
            .map(|_| rng.random_range(-1.0f32..1.0) * (k + 1) as f32)
            .collect();
        let q = Q2Host::quantize_ternary(&w, r, c).unwrap();
        g.matrix(&format!("blk.0.{p}.weight"), 42, r, c, q.blocks.clone());
        want.push(q);
    }
    let d = TempDir::new("q2");
    let path = d.write("q2.gguf", &g.bytes());
    let ffn = load_ffn_gguf(&path, 0).unwrap();
    for (got, want) in [&ffn.gate, &ffn.up, &ffn.down].into_iter().zip(&want) {
        match got {
            GgufWeight::Q2(q) => assert_eq!(q, want),
            other => panic!("expected Q2_0, got {other:?}"),
        }
    }
    let info = inspect_gguf(&path).unwrap();
    assert!(info
        .iter()
        .all(|t| t.type_name == "Q2_0" && t.bytes.is_some()));
}

/// The NVFP4 layer written by the `gguf` Python package (tests/fixtures/make_gguf_nvfp4_fixture.py):
/// every value equals `gguf.quants.dequantize` bit for bit, and `load_ffn` gives the NVFP4
/// weight set.
#[test]
fn nvfp4_fixture_matches_gguf_py_dequantization() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/gguf_nvfp4");
    let path = dir.join("model.gguf");
    let reference: Vec<f32> = std::fs::read(dir.join("ref.f32"))
        .unwrap()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    let ffn = load_ffn_gguf(&path, 0).unwrap();
    let mut got = Vec::new();
    for w in [&ffn.gate, &ffn.up, &ffn.down] {
        assert!(matches!(w, GgufWeight::Nvfp4(_)), "{:?}", ffn.file_types);
        got.extend(w.dequantize());
    }
    assert_eq!(got.len(), reference.len());
    // Bit for bit, except the sign of zero (E2M1 code 8 is −0; ggml's table says 0).
    for (i, (a, b)) in got.iter().zip(&reference).enumerate() {
        assert!(
            a == b && (*a == 0.0 || a.to_bits() == b.to_bits()),
            "value {i}: {a} vs gguf-py {b}"
        );
    }
    assert!(reference.iter().filter(|v| **v != 0.0).count() > reference.len() / 2);
    let host = denseffn::load::load_ffn(&path, 0).unwrap();
    assert_eq!((host.format(), host.dims()), ("nvfp4", (64, 128)));
}
