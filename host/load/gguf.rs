//! FFN weights from GGUF files (llama.cpp / ggml).
//!
//! A GGUF file (versions 2 and 3, little-endian) is:
//!
//! | part | contents |
//! |---|---|
//! | header | magic `GGUF`, version `u32`, tensor count `u64`, metadata count `u64` |
//! | metadata | key (string), value type `u32`, value: integers, floats, bools, strings, arrays (of any of these, arrays included) |
//! | tensor infos | name (string), `n_dims` `u32`, `n_dims` × `u64` dims, ggml type `u32`, data offset `u64` |
//! | padding | to `general.alignment` (a `u32` key; 32 when absent) |
//! | data | each tensor at its offset from here, offsets multiples of the alignment |
//!
//! Strings are a `u64` byte length and UTF-8 bytes. Dims are in ggml order: `dims[0]` is the
//! contiguous (column) dimension, so a 2-D weight `[out, in]` has `dims = [in, out]`; its data
//! is row-major `[out, in]`, each row `in / block` blocks of the ggml type.
//!
//! Llama-style models name the dense FFN of layer `N` `blk.N.ffn_gate.weight`,
//! `blk.N.ffn_up.weight` and `blk.N.ffn_down.weight`. [`load_ffn_gguf`] returns them as Q4_K
//! blocks, byte for byte ([`Q4kHost`]), or converted to f32 (from F32, F16, BF16);
//! [`inspect_gguf`] lists them with their types, shapes and sizes.
//!
//! The file is memory-mapped; the header is parsed without copying, and every count and length
//! in it is checked against the bytes that remain before anything is read or allocated for it,
//! so a corrupt file costs no more memory than its real contents. Every problem is an
//! [`Error`] naming the file or tensor: [`Error::Load`] for a missing, truncated or corrupt file
//! (bad magic, a count or length that does not fit, a bad metadata type, tensor data outside the
//! file, a missing tensor); [`Error::Unsupported`] for a GGUF version other than 2 and 3, a
//! big-endian file, and FFN tensors of a ggml type this crate does not take; [`Error::Shape`]
//! for FFN shapes that do not fit together; [`Error::BadWeights`] for NaN or infinite values and
//! Q4_K blocks with a negative or non-finite `d`/`dmin`; [`Error::Invalid`] for a layer index
//! past the last layer.
use crate::error::{Error, Result};
use crate::pack::Nvfp4Host;
use crate::pack_q2::Q2Host;
use crate::pack_q4k::Q4kHost;
use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};
use memmap2::Mmap;
use std::borrow::Cow;
use std::collections::HashSet;
use std::fs::File;
use std::path::Path;

/// ggml type id of f32.
pub const GGML_TYPE_F32: u32 = 0;
/// ggml type id of IEEE f16.
pub const GGML_TYPE_F16: u32 = 1;
/// ggml type id of `block_q4_K` (256 values in 144 bytes).
pub const GGML_TYPE_Q4_K: u32 = 12;
/// ggml type id of bf16.
pub const GGML_TYPE_BF16: u32 = 30;
/// ggml type id of `block_q2_0` (64 ternary/2-bit values, f16 `d`).
pub const GGML_TYPE_Q2_0: u32 = 42;
/// ggml's NVFP4 (`block_nvfp4`, 64 values in 36 bytes).
pub const GGML_TYPE_NVFP4: u32 = 40;

/// The dense FFN projections as GGUF names them (`blk.N.ffn_{P}.weight`), in the order
/// [`load_ffn_gguf`] returns them.
pub const GGUF_PROJECTIONS: [&str; 3] = ["ffn_gate", "ffn_up", "ffn_down"];

const MAGIC: &[u8; 4] = b"GGUF";
const DEFAULT_ALIGNMENT: u64 = 32;
/// ggml's GGML_MAX_DIMS.
const MAX_DIMS: u32 = 4;
/// Deepest nesting of metadata arrays accepted (real files nest at most once).
const MAX_ARRAY_DEPTH: usize = 16;
/// Longest metadata key or tensor name accepted (ggml's own limit for names is 63 bytes).
const MAX_NAME_BYTES: u64 = 65_536;
/// Fewest bytes one tensor info takes (empty name, no dims): name length, n_dims, type, offset.
const MIN_TENSOR_INFO: u64 = 8 + 4 + 4 + 8;
/// Fewest bytes one metadata pair takes: key length, value type, a one-byte value.
const MIN_KV: u64 = 8 + 4 + 1;

/// (id, name, values per block, bytes per block) of the ggml types known here.
const GGML_TYPES: &[(u32, &str, u64, u64)] = &[
    (0, "F32", 1, 4),
    (1, "F16", 1, 2),
    (2, "Q4_0", 32, 18),
    (3, "Q4_1", 32, 20),
    (6, "Q5_0", 32, 22),
    (7, "Q5_1", 32, 24),
    (8, "Q8_0", 32, 34),
    (9, "Q8_1", 32, 36),
    (10, "Q2_K", 256, 84),
    (11, "Q3_K", 256, 110),
    (12, "Q4_K", 256, 144),
    (13, "Q5_K", 256, 176),
    (14, "Q6_K", 256, 210),
    (15, "Q8_K", 256, 292),
    (16, "IQ2_XXS", 256, 66),
    (17, "IQ2_XS", 256, 74),
    (18, "IQ3_XXS", 256, 98),
    (19, "IQ1_S", 256, 50),
    (20, "IQ4_NL", 32, 18),
    (21, "IQ3_S", 256, 110),
    (22, "IQ2_S", 256, 82),
    (23, "IQ4_XS", 256, 136),
    (24, "I8", 1, 1),
    (25, "I16", 1, 2),
    (26, "I32", 1, 4),
    (27, "I64", 1, 8),
    (28, "F64", 1, 8),
    (29, "IQ1_M", 256, 56),
    (30, "BF16", 1, 2),
    (34, "TQ1_0", 256, 54),
    (35, "TQ2_0", 256, 66),
    (39, "MXFP4", 32, 17),
    (40, "NVFP4", 64, 36),
    (41, "Q1_0", 128, 18),
    (42, "Q2_0", 64, 18),
];

fn ggml_type(id: u32) -> Option<(&'static str, u64, u64)> {
    GGML_TYPES
        .iter()
        .find(|t| t.0 == id)
        .map(|&(_, n, b, s)| (n, b, s))
}

/// The ggml type's name (`Q4_K`, `F16`, …), or `unknown(N)`.
fn type_name(id: u32) -> Cow<'static, str> {
    match ggml_type(id) {
        Some((n, _, _)) => Cow::Borrowed(n),
        None => Cow::Owned(format!("unknown({id})")),
    }
}

/// One FFN weight tensor of a GGUF file, as [`inspect_gguf`] lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GgufTensorInfo {
    /// Layer index `N` of `blk.N.*`.
    pub layer: usize,
    /// Full tensor name, e.g. `blk.0.ffn_gate.weight`.
    pub name: String,
    /// ggml type id (12 = Q4_K, 1 = F16, …).
    pub ggml_type: u32,
    /// ggml type name (`Q4_K`, `F16`, `BF16`, …; `unknown(N)` for an id this crate does not
    /// know).
    pub type_name: String,
    /// Shape, outermost dimension first: the ggml dims reversed, so `[rows, cols]` = `[out, in]`
    /// for a 2-D weight (`rows = dims[1]`, `cols = dims[0]`).
    pub shape: Vec<usize>,
    /// Bytes of data in the file (`None` for a type of unknown size).
    pub bytes: Option<usize>,
    /// Where the data starts, in bytes from the start of the file.
    pub offset: usize,
}

impl GgufTensorInfo {
    /// The name without `blk.N.`, e.g. `ffn_gate.weight`.
    pub fn short_name(&self) -> &str {
        self.name
            .strip_prefix("blk.")
            .and_then(|r| r.split_once('.'))
            .map_or(&self.name, |(_, r)| r)
    }
}

/// One FFN weight matrix `[rows, cols]` (`[out, in]`), as [`load_ffn_gguf`] returns it.
#[derive(Clone, Debug, PartialEq)]
pub enum GgufWeight {
    /// Q4_K blocks exactly as the file stores them (checked with [`Q4kHost::validate`]).
    Q4K(Q4kHost),
    /// Q2_0 blocks exactly as the file stores them (checked with [`Q2Host::validate`]).
    Q2(Q2Host),
    /// ggml NVFP4 blocks, re-laid exactly into the ModelOpt layout with global scale 1
    /// ([`Nvfp4Host::from_ggml_nvfp4`]).
    Nvfp4(Nvfp4Host),
    /// Row-major f32 values, from an F32, F16 or BF16 tensor (converted exactly).
    F32 {
        /// Output features.
        rows: usize,
        /// Input features.
        cols: usize,
        /// `rows · cols` values, row-major.
        data: Vec<f32>,
    },
}

impl GgufWeight {
    /// Output features.
    pub fn rows(&self) -> usize {
        match self {
            GgufWeight::Q4K(q) => q.rows,
            GgufWeight::Q2(q) => q.rows,
            GgufWeight::Nvfp4(q) => q.rows,
            GgufWeight::F32 { rows, .. } => *rows,
        }
    }

    /// Input features.
    pub fn cols(&self) -> usize {
        match self {
            GgufWeight::Q4K(q) => q.cols,
            GgufWeight::Q2(q) => q.cols,
            GgufWeight::Nvfp4(q) => q.cols,
            GgufWeight::F32 { cols, .. } => *cols,
        }
    }

    /// Row-major f32 values (Q4_K dequantized as ggml's `dequantize_row_q4_K` does).
    pub fn dequantize(&self) -> Vec<f32> {
        match self {
            GgufWeight::Q4K(q) => q.dequantize(),
            GgufWeight::Q2(q) => q.dequantize(),
            GgufWeight::Nvfp4(q) => q.dequantize(),
            GgufWeight::F32 { data, .. } => data.clone(),
        }
    }
}

/// One layer's dense FFN from a GGUF file: gate and up `[intermediate, hidden]`, down
/// `[hidden, intermediate]`.
#[derive(Clone, Debug, PartialEq)]
pub struct GgufFfn {
    /// `blk.N.ffn_gate.weight`.
    pub gate: GgufWeight,
    /// `blk.N.ffn_up.weight`.
    pub up: GgufWeight,
    /// `blk.N.ffn_down.weight`.
    pub down: GgufWeight,
    /// The ggml type each of gate, up, down had in the file (`Q4_K`, `F16`, `BF16`, `F32`).
    pub file_types: [&'static str; 3],
}

impl GgufFfn {
    /// Model width (gate's columns).
    pub fn hidden(&self) -> usize {
        self.gate.cols()
    }

    /// FFN width (gate's rows).
    pub fn intermediate(&self) -> usize {
        self.gate.rows()
    }
}

/// Lists the dense FFN weights (`blk.N.ffn_{gate,up,down}.weight`) of a GGUF file, sorted by
/// layer, then gate/up/down. Tensors of any ggml type are listed; an empty list means the file
/// has none. Reads the header only (and checks every tensor's data lies inside the file).
pub fn inspect_gguf(path: &Path) -> Result<Vec<GgufTensorInfo>> {
    let file = GgufFile::open(path)?;
    let header = file.header()?;
    let mut out: Vec<(usize, usize, GgufTensorInfo)> = header
        .tensors
        .iter()
        .filter_map(|t| {
            let (layer, proj) = ffn_weight(&t.name)?;
            Some((
                layer,
                proj,
                GgufTensorInfo {
                    layer,
                    name: t.name.to_string(),
                    ggml_type: t.ty,
                    type_name: type_name(t.ty).into_owned(),
                    shape: t.dims.iter().rev().map(|&d| d as usize).collect(),
                    bytes: t.bytes.map(|b| b as usize),
                    offset: t.start as usize,
                },
            ))
        })
        .collect();
    out.sort_by_key(|e| (e.0, e.1));
    Ok(out.into_iter().map(|e| e.2).collect())
}

/// Loads layer `layer`'s dense FFN (`blk.{layer}.ffn_{gate,up,down}.weight`) from a GGUF file.
///
/// Q4_K tensors come back byte for byte as [`Q4kHost`] (`rows · cols / 256` blocks of 144
/// bytes, row-major, checked with [`Q4kHost::validate`]); F32, F16 and BF16 tensors are
/// converted to f32 exactly (NaN or infinite values are [`Error::BadWeights`]). Any other ggml
/// type (Q8_0, Q6_K, NVFP4, …, or an id this crate does not know) is [`Error::Unsupported`]
/// naming the tensor and its type. Gate and up must be `[intermediate, hidden]` and down
/// `[hidden, intermediate]`.
///
/// The file is memory-mapped while it is read; it must not be changed by another process
/// meanwhile. Never panics on bad input: every problem is an [`Error`] naming the file or tensor
/// (the module documentation lists which variant for what).
pub fn load_ffn_gguf(path: &Path, layer: usize) -> Result<GgufFfn> {
    let file = GgufFile::open(path)?;
    let header = file.header()?;
    let shown = path.display();
    let layers = header
        .tensors
        .iter()
        .filter_map(|t| split_layer(&t.name))
        .map(|(l, _)| l.saturating_add(1))
        .max()
        .unwrap_or(0);
    if layers == 0 {
        return Err(Error::Invalid(format!(
            "layer {layer}: {shown} has no `blk.N.*` tensors (0 layers)"
        )));
    }
    if layer >= layers {
        return Err(Error::Invalid(format!(
            "layer {layer} is out of range: {shown} has {layers} layers (0..={})",
            layers - 1
        )));
    }
    let name = |p: &str| format!("blk.{layer}.{p}.weight");
    // Find the three and check their shapes from the header, before reading any data.
    let mut found = Vec::with_capacity(3);
    for p in GGUF_PROJECTIONS {
        let n = name(p);
        let Some(t) = header.tensors.iter().find(|t| t.name == n) else {
            let split = match header.split_count {
                Some(c) if c > 1 => format!(
                    " (this file is one of {c} split GGUF files; split models are not supported: \
                     merge them with llama-gguf-split --merge)"
                ),
                _ => String::new(),
            };
            return Err(Error::Load(format!(
                "tensor `{n}` not found in {shown}{split}"
            )));
        };
        let (rows, cols) = matrix_shape(t, &n, path)?;
        found.push((t, n, rows, cols));
    }
    let (inter, hidden) = (found[0].2, found[0].3);
    for (i, rows, cols) in [(1, inter, hidden), (2, hidden, inter)] {
        let (_, n, r, c) = &found[i];
        if (*r, *c) != (rows, cols) {
            return Err(Error::Shape(format!(
                "{n}: [{r}, {c}] (out, in), expected [{rows}, {cols}] to match {} [{inter}, {hidden}] \
                 (gate and up [intermediate, hidden], down [hidden, intermediate])",
                found[0].1,
            )));
        }
    }
    let mut weights = Vec::with_capacity(3);
    for (t, n, rows, cols) in &found {
        weights.push(file.weight(t, n, *rows, *cols)?);
    }
    let known = |i: usize| ggml_type(found[i].0.ty).map_or("?", |t| t.0);
    let file_types = [known(0), known(1), known(2)];
    let mut w = weights.into_iter();
    match (w.next(), w.next(), w.next()) {
        (Some(gate), Some(up), Some(down)) => Ok(GgufFfn {
            gate,
            up,
            down,
            file_types,
        }),
        _ => Err(Error::Load(format!("{shown}: FFN tensors not read"))),
    }
}

/// A tensor's `[rows, cols]` (`[dims[1], dims[0]]`) if it is a non-empty 2-D matrix (trailing
/// dims of 1 allowed).
fn matrix_shape(t: &TensorInfo<'_>, name: &str, path: &Path) -> Result<(usize, usize)> {
    let shown = path.display();
    let (cols, rows) = match t.dims.as_slice() {
        [c, r, rest @ ..] if rest.iter().all(|&d| d == 1) => (*c, *r),
        _ => {
            let shape: Vec<u64> = t.dims.iter().rev().copied().collect();
            return Err(Error::Shape(format!(
                "{name} ({shown}): shape {shape:?} ({}), expected a 2-D matrix [out, in]",
                type_name(t.ty)
            )));
        }
    };
    if rows == 0 || cols == 0 {
        return Err(Error::Shape(format!(
            "{name} ({shown}): zero-sized shape [{rows}, {cols}]"
        )));
    }
    match (usize::try_from(rows), usize::try_from(cols)) {
        (Ok(r), Ok(c)) => Ok((r, c)),
        _ => Err(Error::Shape(format!(
            "{name} ({shown}): shape [{rows}, {cols}] does not fit this machine's usize"
        ))),
    }
}

/// `blk.N.rest` → (N, rest).
fn split_layer(name: &str) -> Option<(usize, &str)> {
    let (n, rest) = name.strip_prefix("blk.")?.split_once('.')?;
    Some((n.parse().ok()?, rest))
}

/// `blk.N.ffn_{gate,up,down}.weight` → (N, projection index).
fn ffn_weight(name: &str) -> Option<(usize, usize)> {
    let (layer, rest) = split_layer(name)?;
    let proj = rest.strip_suffix(".weight")?;
    let i = GGUF_PROJECTIONS.iter().position(|p| *p == proj)?;
    Some((layer, i))
}

/// A memory-mapped GGUF file.
struct GgufFile<'p> {
    path: &'p Path,
    /// `None` for an empty file (which cannot be mapped everywhere).
    map: Option<Mmap>,
}

/// What the header says about one tensor, checked against the file.
struct TensorInfo<'a> {
    name: Cow<'a, str>,
    /// ggml order: `dims[0]` is contiguous.
    dims: Vec<u64>,
    ty: u32,
    /// File offset of the data.
    start: u64,
    /// Bytes of data (`None` for a type of unknown size).
    bytes: Option<u64>,
}

/// The parsed header.
struct Header<'a> {
    tensors: Vec<TensorInfo<'a>>,
    /// `split.count`, when present.
    split_count: Option<u64>,
}

impl<'p> GgufFile<'p> {
    fn open(path: &'p Path) -> Result<Self> {
        let file = File::open(path)
            .map_err(|e| Error::Load(format!("{}: cannot open: {e}", path.display())))?;
        let len = file
            .metadata()
            .map_err(|e| Error::Load(format!("{}: cannot stat: {e}", path.display())))?
            .len();
        if len == 0 {
            return Ok(GgufFile { path, map: None });
        }
        // SAFETY: a read-only private map; every byte range taken from it is checked against
        // its length. The file changing under the map (another process truncating it) is the
        // caller's to avoid, as documented on the public functions.
        let map = unsafe { Mmap::map(&file) }
            .map_err(|e| Error::Load(format!("{}: cannot map: {e}", path.display())))?;
        Ok(GgufFile {
            path,
            map: Some(map),
        })
    }

    fn bytes(&self) -> &[u8] {
        self.map.as_deref().unwrap_or(&[])
    }

    fn header(&self) -> Result<Header<'_>> {
        parse_header(self.bytes(), self.path)
    }

    /// Tensor `t`'s data as an FFN weight `[rows, cols]` (from [`matrix_shape`]).
    fn weight(
        &self,
        t: &TensorInfo<'_>,
        name: &str,
        rows: usize,
        cols: usize,
    ) -> Result<GgufWeight> {
        let shown = self.path.display();
        let tname = type_name(t.ty);
        let supported = matches!(
            t.ty,
            GGML_TYPE_Q4_K
                | GGML_TYPE_Q2_0
                | GGML_TYPE_NVFP4
                | GGML_TYPE_F32
                | GGML_TYPE_F16
                | GGML_TYPE_BF16
        );
        if !supported {
            return Err(Error::Unsupported(format!(
                "{name} ({shown}) has ggml type {} ({tname}); FFN weights are read as Q4_K, Q2_0, \
                 NVFP4, F32, F16 or BF16",
                t.ty
            )));
        }
        let data = t
            .bytes
            .and_then(|n| {
                let s = usize::try_from(t.start).ok()?;
                self.bytes()
                    .get(s..s.checked_add(usize::try_from(n).ok()?)?)
            })
            .ok_or_else(|| {
                Error::Load(format!(
                    "{shown}: tensor `{name}`'s data lies outside the file"
                ))
            })?;
        if t.ty == GGML_TYPE_Q4_K {
            let q = Q4kHost {
                rows,
                cols,
                blocks: data.to_vec(),
            };
            q.validate(name)?;
            return Ok(GgufWeight::Q4K(q));
        }
        if t.ty == GGML_TYPE_NVFP4 {
            return Ok(GgufWeight::Nvfp4(Nvfp4Host::from_ggml_nvfp4(
                name, rows, cols, data,
            )?));
        }
        if t.ty == GGML_TYPE_Q2_0 {
            let q = Q2Host {
                rows,
                cols,
                blocks: data.to_vec(),
            };
            q.validate(name)?;
            return Ok(GgufWeight::Q2(q));
        }
        let values = match t.ty {
            GGML_TYPE_F32 => data
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
            GGML_TYPE_F16 => halves::<f16>(data),
            _ => halves::<bf16>(data),
        };
        if values.len() != rows * cols {
            return Err(Error::Load(format!(
                "{shown}: tensor `{name}` has {} values for [{rows}, {cols}]",
                values.len()
            )));
        }
        if let Some(i) = values.iter().position(|x| !x.is_finite()) {
            return Err(Error::BadWeights(format!(
                "{name} ({shown}): value [{}, {}] is {} ({tname})",
                i / cols,
                i % cols,
                values[i]
            )));
        }
        Ok(GgufWeight::F32 {
            rows,
            cols,
            data: values,
        })
    }
}

/// A 16-bit float type of `half`: f16 or bf16.
trait Half: bytemuck::Pod {
    /// One little-endian pattern to f32.
    fn from_le(b: [u8; 2]) -> f32;
    /// A slice to f32 (`dst.len() == src.len()`).
    fn convert(src: &[Self], dst: &mut [f32]);
}

impl Half for f16 {
    fn from_le(b: [u8; 2]) -> f32 {
        f16::from_le_bytes(b).to_f32()
    }
    fn convert(src: &[f16], dst: &mut [f32]) {
        src.convert_to_f32_slice(dst)
    }
}

impl Half for bf16 {
    fn from_le(b: [u8; 2]) -> f32 {
        bf16::from_le_bytes(b).to_f32()
    }
    fn convert(src: &[bf16], dst: &mut [f32]) {
        src.convert_to_f32_slice(dst)
    }
}

/// Little-endian f16/bf16 data to f32, exactly: the slice conversion (SIMD where the CPU has
/// it) when the bytes are aligned on a little-endian host, else value by value.
fn halves<T: Half>(data: &[u8]) -> Vec<f32> {
    if cfg!(target_endian = "little") {
        if let Ok(src) = bytemuck::try_cast_slice::<u8, T>(data) {
            let mut out = vec![0f32; src.len()];
            T::convert(src, &mut out);
            return out;
        }
    }
    data.chunks_exact(2)
        .map(|c| T::from_le([c[0], c[1]]))
        .collect()
}

/// A read position in the file, with what is being read for messages.
struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
    path: &'a Path,
}

impl<'a> Cursor<'a> {
    fn remaining(&self) -> u64 {
        (self.buf.len() - self.pos) as u64
    }

    fn corrupt(&self, what: impl std::fmt::Display) -> Error {
        Error::Load(format!("{}: corrupt GGUF: {what}", self.path.display()))
    }

    fn take(&mut self, n: u64, what: &dyn Fn() -> String) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(Error::Load(format!(
                "{}: truncated: {} needs {n} bytes at offset {}, but the file ends at {} bytes",
                self.path.display(),
                what(),
                self.pos,
                self.buf.len()
            )));
        }
        let s = &self.buf[self.pos..self.pos + n as usize];
        self.pos += n as usize;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, what: &dyn Fn() -> String) -> Result<[u8; N]> {
        let b = self.take(N as u64, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(b);
        Ok(a)
    }

    fn u32(&mut self, what: &dyn Fn() -> String) -> Result<u32> {
        self.array(what).map(u32::from_le_bytes)
    }

    fn u64(&mut self, what: &dyn Fn() -> String) -> Result<u64> {
        self.array(what).map(u64::from_le_bytes)
    }

    /// A string's bytes (length checked against the file, nothing allocated).
    fn string(&mut self, what: &dyn Fn() -> String) -> Result<&'a [u8]> {
        let n = self.u64(&|| format!("{}'s length", what()))?;
        if n > self.remaining() {
            return Err(Error::Load(format!(
                "{}: {} has length {n}, past the end of the {}-byte file (truncated or corrupt)",
                self.path.display(),
                what(),
                self.buf.len()
            )));
        }
        self.take(n, what)
    }

    /// A metadata key or tensor name: a string of sane length.
    fn name(&mut self, what: &dyn Fn() -> String) -> Result<&'a [u8]> {
        let at = self.pos;
        let s = self.string(what)?;
        if s.len() as u64 > MAX_NAME_BYTES {
            return Err(self.corrupt(format!(
                "{} at offset {at} is {} bytes long (over {MAX_NAME_BYTES})",
                what(),
                s.len()
            )));
        }
        Ok(s)
    }

    /// Reads past one metadata value of type `ty`, checking its structure.
    fn skip_value(&mut self, ty: u32, depth: usize, what: &dyn Fn() -> String) -> Result<()> {
        if let Some(size) = scalar_size(ty) {
            self.take(size, what)?;
            return Ok(());
        }
        match ty {
            8 => {
                self.string(what)?;
            }
            9 => {
                if depth >= MAX_ARRAY_DEPTH {
                    return Err(self.corrupt(format!(
                        "{}: arrays nested more than {MAX_ARRAY_DEPTH} deep",
                        what()
                    )));
                }
                let elem = self.u32(&|| format!("{}'s element type", what()))?;
                let count = self.u64(&|| format!("{}'s element count", what()))?;
                // Fewest bytes one element takes: its size, a string's length, an array's
                // type and count.
                let min = match (scalar_size(elem), elem) {
                    (Some(s), _) => s,
                    (None, 8) => 8,
                    (None, 9) => 12,
                    _ => {
                        return Err(self.corrupt(format!(
                            "{} is an array of unknown value type {elem}",
                            what()
                        )))
                    }
                };
                if count.checked_mul(min).is_none_or(|n| n > self.remaining()) {
                    return Err(Error::Load(format!(
                        "{}: {} claims {count} elements of type {elem}, more than the {} bytes \
                         left in the file hold (truncated or corrupt)",
                        self.path.display(),
                        what(),
                        self.remaining()
                    )));
                }
                if let Some(s) = scalar_size(elem) {
                    self.take(count * s, what)?;
                } else {
                    for i in 0..count {
                        self.skip_value(elem, depth + 1, &|| format!("{}[{i}]", what()))?;
                    }
                }
            }
            _ => {
                return Err(self.corrupt(format!("{} has unknown value type {ty}", what())));
            }
        }
        Ok(())
    }
}

/// Bytes of a fixed-size metadata value type.
fn scalar_size(ty: u32) -> Option<u64> {
    match ty {
        0 | 1 | 7 => Some(1), // u8, i8, bool
        2 | 3 => Some(2),     // u16, i16
        4..=6 => Some(4),     // u32, i32, f32
        10..=12 => Some(8),   // u64, i64, f64
        _ => None,
    }
}

fn value_type_name(ty: u32) -> &'static str {
    const NAMES: [&str; 13] = [
        "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64",
        "f64",
    ];
    NAMES.get(ty as usize).copied().unwrap_or("unknown")
}

fn parse_header<'a>(buf: &'a [u8], path: &'a Path) -> Result<Header<'a>> {
    let shown = path.display();
    let mut c = Cursor { buf, pos: 0, path };
    if buf.len() < 4 {
        return Err(Error::Load(format!(
            "{shown}: {} bytes is too short for a GGUF file (truncated, or not GGUF)",
            buf.len()
        )));
    }
    let magic = c.array::<4>(&|| "the magic".into())?;
    if &magic != MAGIC {
        let old = match &magic {
            b"lmgg" | b"fmgg" | b"tjgg" | b"algg" => {
                " (an old ggml/ggjt file from before GGUF: convert it to GGUF)"
            }
            _ => "",
        };
        return Err(Error::Load(format!(
            "{shown}: not a GGUF file: magic {:?} ({:02x?}), expected \"GGUF\"{old}",
            String::from_utf8_lossy(&magic),
            magic
        )));
    }
    let version = c.u32(&|| "the version".into())?;
    if version != 2 && version != 3 {
        let why = if matches!(version.swap_bytes(), 2 | 3) {
            format!(
                "a big-endian GGUF v{} file; only little-endian files are read",
                version.swap_bytes()
            )
        } else if version == 1 {
            "GGUF version 1 (u32 counts) is not read; versions 2 and 3 are".into()
        } else {
            format!("GGUF version {version} is not read (corrupt, or newer than this reader: versions 2 and 3 are)")
        };
        return Err(Error::Unsupported(format!("{shown}: {why}")));
    }
    let n_tensors = c.u64(&|| "the tensor count".into())?;
    let n_kv = c.u64(&|| "the metadata count".into())?;
    if n_kv.checked_mul(MIN_KV).is_none_or(|n| n > c.remaining()) {
        return Err(Error::Load(format!(
            "{shown}: metadata count {n_kv} does not fit in the {}-byte file (each pair takes at \
             least {MIN_KV} bytes; truncated or corrupt)",
            buf.len()
        )));
    }
    if n_tensors
        .checked_mul(MIN_TENSOR_INFO)
        .is_none_or(|n| n > c.remaining())
    {
        return Err(Error::Load(format!(
            "{shown}: tensor count {n_tensors} does not fit in the {}-byte file (each tensor \
             info takes at least {MIN_TENSOR_INFO} bytes; truncated or corrupt)",
            buf.len()
        )));
    }

    let mut alignment = DEFAULT_ALIGNMENT;
    let mut split_count = None;
    let mut keys: HashSet<&[u8]> = HashSet::new();
    for i in 0..n_kv {
        let key = c.name(&|| format!("metadata key {i} of {n_kv}"))?;
        let k = String::from_utf8_lossy(key);
        let what = || format!("metadata `{k}`");
        if !keys.insert(key) {
            return Err(c.corrupt(format!("metadata key `{k}` appears twice")));
        }
        let ty = c.u32(&|| format!("{}'s value type", what()))?;
        let want = |want: u32| -> Result<()> {
            if ty == want {
                Ok(())
            } else {
                Err(Error::Load(format!(
                    "{shown}: corrupt GGUF: metadata `{k}` has value type {ty} ({}), expected {}",
                    value_type_name(ty),
                    value_type_name(want)
                )))
            }
        };
        match key {
            b"general.alignment" => {
                want(4)?;
                let a = c.u32(&what)?;
                if a == 0 || !a.is_power_of_two() {
                    return Err(c.corrupt(format!("general.alignment is {a}, not a power of two")));
                }
                alignment = a as u64;
            }
            b"split.count" => {
                want(2)?;
                split_count = Some(u16::from_le_bytes(c.array(&what)?) as u64);
            }
            _ => c.skip_value(ty, 0, &what)?,
        }
    }

    let mut raw = Vec::with_capacity(n_tensors.min(4096) as usize);
    let mut names: HashSet<&[u8]> = HashSet::new();
    for i in 0..n_tensors {
        let at = || format!("tensor info {i} of {n_tensors}");
        let name_bytes = c.name(&|| format!("{}'s name", at()))?;
        let name = String::from_utf8_lossy(name_bytes);
        let what = || format!("tensor info {i} of {n_tensors} (`{name}`)");
        if !names.insert(name_bytes) {
            return Err(c.corrupt(format!("tensor `{name}` appears twice")));
        }
        let n_dims = c.u32(&|| format!("{}'s dimension count", what()))?;
        if n_dims > MAX_DIMS {
            return Err(c.corrupt(format!(
                "tensor `{name}` has {n_dims} dimensions (at most {MAX_DIMS})"
            )));
        }
        let mut dims = Vec::with_capacity(n_dims as usize);
        for d in 0..n_dims {
            dims.push(c.u64(&|| format!("{}'s dimension {d}", what()))?);
        }
        let ty = c.u32(&|| format!("{}'s type", what()))?;
        let offset = c.u64(&|| format!("{}'s data offset", what()))?;
        raw.push((name, dims, ty, offset));
    }

    // The data section starts at the next multiple of the alignment.
    let data_start = (c.pos as u64).next_multiple_of(alignment);
    let len = buf.len() as u64;
    let mut tensors = Vec::with_capacity(raw.len());
    for (name, dims, ty, offset) in raw {
        if offset % alignment != 0 {
            return Err(c.corrupt(format!(
                "tensor `{name}`'s data offset {offset} is not a multiple of the alignment \
                 {alignment}"
            )));
        }
        let elements = dims.iter().try_fold(1u64, |a, &d| a.checked_mul(d));
        let Some(elements) = elements.filter(|&n| n <= i64::MAX as u64) else {
            return Err(c.corrupt(format!(
                "tensor `{name}`'s dims {dims:?} have more than 2^63 elements"
            )));
        };
        let bytes = match ggml_type(ty) {
            Some((tname, block, size)) => {
                let d0 = dims.first().copied().unwrap_or(1);
                if d0 % block != 0 {
                    return Err(c.corrupt(format!(
                        "tensor `{name}` ({tname}) has dims[0] = {d0}, not a multiple of its \
                         block of {block} values"
                    )));
                }
                match (elements / block).checked_mul(size) {
                    Some(b) => Some(b),
                    None => {
                        return Err(c.corrupt(format!(
                            "tensor `{name}`'s size in bytes overflows (dims {dims:?})"
                        )))
                    }
                }
            }
            None => None,
        };
        let start = data_start.checked_add(offset);
        let end = start.and_then(|s| s.checked_add(bytes.unwrap_or(0)));
        let (Some(start), Some(end)) = (start, end) else {
            return Err(c.corrupt(format!("tensor `{name}`'s data offset {offset} overflows")));
        };
        if end > len {
            return Err(Error::Load(format!(
                "{shown}: tensor `{name}`'s data (bytes {start}..{end}{}) runs past the end of \
                 the {len}-byte file (truncated, or a corrupt offset)",
                if bytes.is_none() {
                    ", size unknown"
                } else {
                    ""
                }
            )));
        }
        tensors.push(TensorInfo {
            name,
            dims,
            ty,
            start,
            bytes,
        });
    }
    Ok(Header {
        tensors,
        split_count,
    })
}
