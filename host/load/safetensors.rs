//! NVIDIA ModelOpt NVFP4 FFN weights from safetensors checkpoints.
//!
//! A ModelOpt NVFP4 export stores each linear layer `model.layers.{N}.mlp.{P}` (`P` one of
//! `gate_proj`, `up_proj`, `down_proj`) as:
//!
//! | tensor | dtype | shape | meaning |
//! |---|---|---|---|
//! | `{P}.weight` | `U8` | `[out, in/2]` | E2M1 codes, even column in the low nibble |
//! | `{P}.weight_scale` | `F8_E4M3` | `[out, in/16]` | one E4M3 scale per 16 values of a row |
//! | `{P}.weight_scale_2` | `F32` | `[]` or `[1]` | the per-tensor (global) scale |
//! | `{P}.input_scale` | `F32` | `[]` | activation scale: **ignored** (see below) |
//!
//! which is exactly [`Nvfp4Host`]'s layout, so loading is a copy plus checks. A checkpoint is
//! one `.safetensors` file, or a directory / `model.safetensors.index.json` whose `weight_map`
//! says which shard holds each tensor. Files are memory-mapped; only the tensors asked for are
//! read (copied out of the map).
//!
//! Every problem with the input is an [`Error`] naming the file or tensor: [`Error::Load`] for
//! a missing or unreadable file, a truncated file, a corrupt header, a bad index, a missing
//! tensor or a wrong dtype; [`Error::Shape`] for shapes that do not fit together;
//! [`Error::BadWeights`] for NaN or negative block scales and a global scale that is not finite
//! and positive; [`Error::Invalid`] for a layer index past the last layer.
use crate::error::{Error, Result};
use crate::layer::DenseWeight;
use crate::pack::Nvfp4Host;
use crate::pack_fp8::Fp8Host;
use ::safetensors::tensor::{Dtype, Metadata, SafeTensorError, SafeTensors};
use half::bf16;
use memmap2::Mmap;
use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Component, Path, PathBuf};

/// The name of a sharded checkpoint's index.
pub const INDEX_FILE: &str = "model.safetensors.index.json";
/// The name of a one-file checkpoint inside a model directory.
pub const SINGLE_FILE: &str = "model.safetensors";
/// The projections of a dense FFN, in the order [`load_nvfp4_layer`] returns them.
pub const PROJECTIONS: [&str; 3] = ["gate_proj", "up_proj", "down_proj"];

const LAYER_PREFIX: &str = "model.layers.";
/// The tensors of one NVFP4 projection, in listing order.
const SUFFIXES: [&str; 4] = ["weight", "weight_scale", "weight_scale_2", "input_scale"];

/// One FFN tensor of a checkpoint, as [`inspect`] lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FfnTensorInfo {
    /// Layer index `N` of `model.layers.{N}.mlp.*`.
    pub layer: usize,
    /// Full tensor name, e.g. `model.layers.0.mlp.gate_proj.weight`.
    pub name: String,
    /// safetensors dtype as the file spells it (`U8`, `F8_E4M3`, `F32`, `BF16`, …).
    pub dtype: String,
    /// Shape as stored (`[]` for a 0-d scalar).
    pub shape: Vec<usize>,
    /// Bytes of data in the file.
    pub bytes: usize,
    /// The file (shard) that holds it.
    pub file: PathBuf,
}

impl FfnTensorInfo {
    /// The name without `model.layers.{N}.mlp.`, e.g. `gate_proj.weight`.
    pub fn short_name(&self) -> &str {
        self.name
            .strip_prefix(LAYER_PREFIX)
            .and_then(|r| r.split_once('.'))
            .and_then(|(_, r)| r.strip_prefix("mlp."))
            .unwrap_or(&self.name)
    }
}

/// Loads layer `layer`'s FFN as (gate, up, down) NVFP4 matrices in the ModelOpt layout: gate and
/// up `[intermediate, hidden]`, down `[hidden, intermediate]`.
///
/// `path` is a `.safetensors` file, a `model.safetensors.index.json`, or a model directory
/// (its index if it has one, else its `model.safetensors`, else every `*.safetensors` in it).
/// Reads `model.layers.{layer}.mlp.{gate,up,down}_proj.{weight,weight_scale,weight_scale_2}`;
/// `input_scale`, when present, is ignored: it is the scale for quantizing *activations* to
/// NVFP4, and this layer takes bf16 activations.
///
/// Each file is memory-mapped while it is read; it must not be changed by another process
/// meanwhile. Never panics on bad input: every problem is an [`Error`] naming the tensor or file
/// (the module documentation lists which variant for what).
pub fn load_nvfp4_layer(path: &Path, layer: usize) -> Result<(Nvfp4Host, Nvfp4Host, Nvfp4Host)> {
    load_layer(path, layer, Checkpoint::nvfp4, |w: &Nvfp4Host| {
        (w.rows, w.cols)
    })
}

/// Loads layer `layer`'s FFN from an FP8 block-scaled checkpoint: per projection `weight`
/// (F8_E4M3 `[out, in]`) and `weight_scale_inv` (F32 `[⌈out/128⌉, ⌈in/128⌉]`), as
/// [`Fp8Host`]s; `path` and errors as for [`load_nvfp4_layer`].
pub fn load_fp8_layer(path: &Path, layer: usize) -> Result<(Fp8Host, Fp8Host, Fp8Host)> {
    load_layer(path, layer, Checkpoint::fp8, |w: &Fp8Host| (w.rows, w.cols))
}

/// Loads layer `layer`'s FFN from a BF16 checkpoint: per projection `weight` (BF16 `[out, in]`)
/// as [`DenseWeight`]s (for [`crate::layer::DenseFfnLayer::set_bf16_weights`]); NaN/Inf values
/// are an error naming the tensor. `path` and errors as for [`load_nvfp4_layer`].
pub fn load_bf16_layer(
    path: &Path,
    layer: usize,
) -> Result<(DenseWeight, DenseWeight, DenseWeight)> {
    load_layer(path, layer, Checkpoint::bf16, |w: &DenseWeight| {
        (w.rows, w.cols)
    })
}

/// Opens the checkpoint, checks `layer` is in range, reads the three projections with `read`
/// and checks that their (out, in) shapes fit together.
fn load_layer<T>(
    path: &Path,
    layer: usize,
    read: fn(&mut Checkpoint, &str) -> Result<T>,
    dims: fn(&T) -> (usize, usize),
) -> Result<(T, T, T)> {
    let mut ck = Checkpoint::open(path)?;
    let layers = ck.layer_count();
    if layers == 0 {
        return Err(Error::Invalid(format!(
            "layer {layer}: {} has no `{LAYER_PREFIX}N.*` tensors (0 layers)",
            path.display()
        )));
    }
    if layer >= layers {
        return Err(Error::Invalid(format!(
            "layer {layer} is out of range: {} has {layers} layers (0..={})",
            path.display(),
            layers - 1
        )));
    }
    let prefix = |p: &str| format!("{LAYER_PREFIX}{layer}.mlp.{p}");
    let gate = read(&mut ck, &prefix("gate_proj"))?;
    let up = read(&mut ck, &prefix("up_proj"))?;
    let down = read(&mut ck, &prefix("down_proj"))?;
    let (inter, hidden) = dims(&gate);
    for (p, w, rows, cols) in [
        ("up_proj", &up, inter, hidden),
        ("down_proj", &down, hidden, inter),
    ] {
        let (r, c) = dims(w);
        if (r, c) != (rows, cols) {
            return Err(Error::Shape(format!(
                "{}: [{r}, {c}] (out, in), expected [{rows}, {cols}] to match {} [{inter}, {hidden}] \
                 (gate and up [intermediate, hidden], down [hidden, intermediate])",
                prefix(p),
                prefix("gate_proj"),
            )));
        }
    }
    Ok((gate, up, down))
}

/// Lists the FFN tensors (`model.layers.{N}.mlp.*`) of a checkpoint, sorted by layer, then
/// gate/up/down, then weight/weight_scale/weight_scale_2/input_scale, then name. `path` as for
/// [`load_nvfp4_layer`]. Reads headers only. Tensors of any dtype are listed (a bf16
/// checkpoint lists its bf16 weights); an empty list means the checkpoint has no FFN tensors.
pub fn inspect(path: &Path) -> Result<Vec<FfnTensorInfo>> {
    let mut ck = Checkpoint::open(path)?;
    let mut ffn: Vec<(usize, usize, usize, String)> = ck
        .names
        .keys()
        .filter_map(|name| {
            let (layer, rest) = split_layer(name)?;
            let rest = rest.strip_prefix("mlp.")?;
            let proj = PROJECTIONS
                .iter()
                .position(|p| rest.split('.').any(|s| s == *p))
                .unwrap_or(PROJECTIONS.len());
            let kind = rest
                .rsplit_once('.')
                .and_then(|(_, s)| SUFFIXES.iter().position(|k| *k == s))
                .unwrap_or(SUFFIXES.len());
            Some((layer, proj, kind, name.clone()))
        })
        .collect();
    ffn.sort();
    let mut out = Vec::with_capacity(ffn.len());
    for (layer, _, _, name) in ffn {
        let t = ck.tensor(&name)?;
        out.push(FfnTensorInfo {
            layer,
            dtype: t.dtype.to_string(),
            shape: t.shape.clone(),
            bytes: t.data.len(),
            file: t.file.to_path_buf(),
            name,
        });
    }
    Ok(out)
}

/// `model.layers.{N}.rest` → (N, rest).
fn split_layer(name: &str) -> Option<(usize, &str)> {
    let (n, rest) = name.strip_prefix(LAYER_PREFIX)?.split_once('.')?;
    Some((n.parse().ok()?, rest))
}

/// One mapped `.safetensors` file with its parsed header.
struct Shard {
    map: Mmap,
    /// Offset of the data section (8 + header length).
    data_start: usize,
    meta: Metadata,
}

impl Shard {
    fn open(path: &Path) -> Result<Shard> {
        let file = File::open(path)
            .map_err(|e| Error::Load(format!("{}: cannot open: {e}", path.display())))?;
        // SAFETY: a read-only private map; every byte range taken from it is checked against
        // its length. The file changing under the map (another process truncating it) is the
        // caller's to avoid, as documented on the public functions.
        let map = unsafe { Mmap::map(&file) }
            .map_err(|e| Error::Load(format!("{}: cannot map: {e}", path.display())))?;
        let (n, meta) = SafeTensors::read_metadata(&map)
            .map_err(|e| Error::Load(format!("{}: {}", path.display(), header_problem(&map, e))))?;
        Ok(Shard {
            data_start: 8 + n,
            map,
            meta,
        })
    }
}

/// What a failed header parse means, in words.
fn header_problem(file: &[u8], e: SafeTensorError) -> String {
    let len = file.len();
    let n = file
        .get(..8)
        .map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])));
    match e {
        SafeTensorError::HeaderTooSmall => format!(
            "{len} bytes is too short for a safetensors file (truncated, or not safetensors)"
        ),
        SafeTensorError::HeaderTooLarge => format!(
            "header length {} is over the safetensors limit of 100 MB (corrupt, or not safetensors)",
            n.unwrap_or(0)
        ),
        SafeTensorError::InvalidHeaderLength => format!(
            "header length {} runs past the end of the {len}-byte file (truncated, or not safetensors)",
            n.unwrap_or(0)
        ),
        SafeTensorError::InvalidHeader(e) => format!("corrupt header: not UTF-8 ({e})"),
        SafeTensorError::InvalidHeaderDeserialization(e) => {
            format!("corrupt header: not a valid safetensors JSON header ({e})")
        }
        SafeTensorError::MetadataIncompleteBuffer => format!(
            "the header's tensors do not cover the {len}-byte file exactly (truncated, or trailing bytes)"
        ),
        SafeTensorError::InvalidOffset(name) => {
            format!("corrupt header: tensor `{name}` has data offsets that overlap or leave a gap")
        }
        SafeTensorError::TensorInvalidInfo => {
            "corrupt header: a tensor's byte range does not match its shape and dtype".into()
        }
        SafeTensorError::ValidationOverflow => {
            "corrupt header: a tensor's size overflows".into()
        }
        other => format!("corrupt header: {other}"),
    }
}

/// A tensor as found: dtype, shape, bytes, the file holding it.
struct RawTensor<'a> {
    dtype: Dtype,
    shape: &'a Vec<usize>,
    data: &'a [u8],
    file: &'a Path,
}

/// The files of a checkpoint and where each tensor is. Shards named by an index are mapped
/// when first needed.
struct Checkpoint {
    /// What the tensor names came from (the file or directory given, or the index), for
    /// messages.
    origin: PathBuf,
    /// Whether `names` came from an index (so a shard may disagree with it).
    indexed: bool,
    files: Vec<PathBuf>,
    shards: Vec<Option<Shard>>,
    /// Tensor name → index into `files`.
    names: BTreeMap<String, usize>,
}

impl Checkpoint {
    fn open(path: &Path) -> Result<Checkpoint> {
        let meta =
            std::fs::metadata(path).map_err(|e| Error::Load(format!("{}: {e}", path.display())))?;
        if meta.is_dir() {
            let index = path.join(INDEX_FILE);
            if index.is_file() {
                return Self::from_index(&index);
            }
            let single = path.join(SINGLE_FILE);
            if single.is_file() {
                return Self::from_files(path, vec![single]);
            }
            let mut files: Vec<PathBuf> = std::fs::read_dir(path)
                .map_err(|e| Error::Load(format!("{}: {e}", path.display())))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "safetensors"))
                .collect();
            if files.is_empty() {
                return Err(Error::Load(format!(
                    "{}: no {INDEX_FILE}, {SINGLE_FILE} or other .safetensors file in this directory",
                    path.display()
                )));
            }
            files.sort();
            Self::from_files(path, files)
        } else if path.extension().is_some_and(|x| x == "json") {
            Self::from_index(path)
        } else {
            Self::from_files(path, vec![path.to_path_buf()])
        }
    }

    /// Maps every file now: their headers are the only list of names.
    fn from_files(origin: &Path, files: Vec<PathBuf>) -> Result<Checkpoint> {
        let mut names = BTreeMap::new();
        let mut shards = Vec::with_capacity(files.len());
        for (i, f) in files.iter().enumerate() {
            let shard = Shard::open(f)?;
            for name in shard.meta.tensors().into_keys() {
                if let Some(j) = names.insert(name.clone(), i) {
                    return Err(Error::Load(format!(
                        "tensor `{name}` is in both {} and {}",
                        files[j].display(),
                        f.display()
                    )));
                }
            }
            shards.push(Some(shard));
        }
        Ok(Checkpoint {
            origin: origin.to_path_buf(),
            indexed: false,
            files,
            shards,
            names,
        })
    }

    /// Reads the index's `weight_map`; shards are mapped on first use.
    fn from_index(index: &Path) -> Result<Checkpoint> {
        let shown = index.display();
        let text = std::fs::read_to_string(index)
            .map_err(|e| Error::Load(format!("{shown}: cannot read: {e}")))?;
        let json: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| Error::Load(format!("{shown}: not valid JSON: {e}")))?;
        let map = json
            .get("weight_map")
            .and_then(|m| m.as_object())
            .ok_or_else(|| Error::Load(format!("{shown}: no `weight_map` object")))?;
        let dir = index.parent().unwrap_or(Path::new("."));
        let mut files: Vec<PathBuf> = Vec::new();
        let mut file_ids: BTreeMap<&str, usize> = BTreeMap::new();
        let mut names = BTreeMap::new();
        for (name, shard) in map {
            let shard = shard.as_str().ok_or_else(|| {
                Error::Load(format!(
                    "{shown}: weight_map[`{name}`] is {shard}, not a file name"
                ))
            })?;
            let id = match file_ids.get(shard) {
                Some(&id) => id,
                None => {
                    let rel = Path::new(shard);
                    if shard.is_empty()
                        || !rel.components().all(|c| matches!(c, Component::Normal(_)))
                    {
                        return Err(Error::Load(format!(
                            "{shown}: weight_map[`{name}`] = `{shard}` is not a file name inside the checkpoint directory"
                        )));
                    }
                    files.push(dir.join(rel));
                    file_ids.insert(shard, files.len() - 1);
                    files.len() - 1
                }
            };
            names.insert(name.clone(), id);
        }
        Ok(Checkpoint {
            origin: index.to_path_buf(),
            indexed: true,
            shards: files.iter().map(|_| None).collect(),
            files,
            names,
        })
    }

    /// The largest `N` of any `model.layers.{N}.*` tensor, plus one (0 when there is none).
    fn layer_count(&self) -> usize {
        self.names
            .keys()
            .filter_map(|n| split_layer(n))
            .map(|(l, _)| l.saturating_add(1))
            .max()
            .unwrap_or(0)
    }

    fn tensor(&mut self, name: &str) -> Result<RawTensor<'_>> {
        let Some(&id) = self.names.get(name) else {
            return Err(Error::Load(format!(
                "tensor `{name}` not found in {}",
                self.origin.display()
            )));
        };
        if self.shards[id].is_none() {
            self.shards[id] = Some(Shard::open(&self.files[id])?);
        }
        let file = &self.files[id];
        let Some(shard) = self.shards[id].as_ref() else {
            return Err(Error::Load(format!("{}: not opened", file.display())));
        };
        let Some(info) = shard.meta.info(name) else {
            let why = if self.indexed {
                format!(
                    "{} maps tensor `{name}` to {}, which does not contain it",
                    self.origin.display(),
                    file.display()
                )
            } else {
                format!("tensor `{name}` not found in {}", file.display())
            };
            return Err(Error::Load(why));
        };
        let (s, e) = info.data_offsets;
        let data = shard
            .data_start
            .checked_add(s)
            .zip(shard.data_start.checked_add(e))
            .and_then(|(s, e)| shard.map.get(s..e))
            .ok_or_else(|| {
                Error::Load(format!(
                    "{}: tensor `{name}`'s data lies outside the file",
                    file.display()
                ))
            })?;
        Ok(RawTensor {
            dtype: info.dtype,
            shape: &info.shape,
            data,
            file,
        })
    }

    /// A tensor that must have dtype `want`.
    fn typed(&mut self, name: &str, want: Dtype, what: &str) -> Result<RawTensor<'_>> {
        let t = self.tensor(name)?;
        if t.dtype != want {
            return Err(Error::Load(format!(
                "tensor `{name}` ({}) has dtype {}, expected {want} ({what})",
                t.file.display(),
                t.dtype
            )));
        }
        Ok(t)
    }

    /// The FP8 matrix `{prefix}.weight` / `.weight_scale_inv`, checked.
    fn fp8(&mut self, prefix: &str) -> Result<Fp8Host> {
        let wname = format!("{prefix}.weight");
        let sname = format!("{prefix}.weight_scale_inv");
        let w = self.typed(&wname, Dtype::F8_E4M3, "FP8 E4M3 weights")?;
        let &[rows, cols] = w.shape.as_slice() else {
            return Err(Error::Shape(format!(
                "{wname}: shape {:?}, expected 2 dimensions [out, in]",
                w.shape
            )));
        };
        if rows == 0 || cols == 0 {
            return Err(Error::Shape(format!(
                "{wname}: zero-sized shape [{rows}, {cols}]"
            )));
        }
        let weight = w.data.to_vec();
        let s = self.typed(&sname, Dtype::F32, "one scale per 128×128 block")?;
        let (br, bc) = Fp8Host::scale_dims(rows, cols);
        if s.shape.as_slice() != [br, bc] {
            return Err(Error::Shape(format!(
                "{sname}: shape {:?}, expected [{br}, {bc}] for {wname} [{rows}, {cols}] (128×128 blocks)",
                s.shape
            )));
        }
        let scale_inv = s
            .data
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        let host = Fp8Host {
            rows,
            cols,
            weight,
            scale_inv,
        };
        host.validate(prefix)?;
        Ok(host)
    }

    /// The BF16 matrix `{prefix}.weight`, checked for NaN/Inf.
    fn bf16(&mut self, prefix: &str) -> Result<DenseWeight> {
        let wname = format!("{prefix}.weight");
        let w = self.typed(&wname, Dtype::BF16, "BF16 weights")?;
        let &[rows, cols] = w.shape.as_slice() else {
            return Err(Error::Shape(format!(
                "{wname}: shape {:?}, expected 2 dimensions [out, in]",
                w.shape
            )));
        };
        if rows == 0 || cols == 0 {
            return Err(Error::Shape(format!(
                "{wname}: zero-sized shape [{rows}, {cols}]"
            )));
        }
        let data: Vec<bf16> = w
            .data
            .chunks_exact(2)
            .map(|c| bf16::from_bits(u16::from_le_bytes([c[0], c[1]])))
            .collect();
        if let Some(i) = data.iter().position(|v| !v.is_finite()) {
            return Err(Error::BadWeights(format!(
                "{wname}: value [{}, {}] is {}",
                i / cols,
                i % cols,
                data[i]
            )));
        }
        Ok(DenseWeight { rows, cols, data })
    }

    /// The NVFP4 matrix `{prefix}.weight` / `.weight_scale` / `.weight_scale_2`, checked.
    fn nvfp4(&mut self, prefix: &str) -> Result<Nvfp4Host> {
        let wname = format!("{prefix}.weight");
        let sname = format!("{prefix}.weight_scale");
        let gname = format!("{prefix}.weight_scale_2");

        let w = self.typed(&wname, Dtype::U8, "two E2M1 codes per byte")?;
        let &[rows, half] = w.shape.as_slice() else {
            return Err(Error::Shape(format!(
                "{wname}: shape {:?}, expected 2 dimensions [out, in/2]",
                w.shape
            )));
        };
        if rows == 0 || half == 0 {
            return Err(Error::Shape(format!(
                "{wname}: zero-sized shape [{rows}, {half}]"
            )));
        }
        let cols = half * 2; // fits: the file holds rows·half bytes
        if cols % 16 != 0 {
            return Err(Error::Shape(format!(
                "{wname}: shape [{rows}, {half}] is {cols} input features, not a multiple of the NVFP4 group (16)"
            )));
        }
        let codes = w.data.to_vec();

        let s = self.typed(&sname, Dtype::F8_E4M3, "one block scale per 16 weights")?;
        if s.shape.as_slice() != [rows, cols / 16] {
            return Err(Error::Shape(format!(
                "{sname}: shape {:?}, expected [{rows}, {}] for {wname} [{rows}, {half}] ({cols} input features / 16)",
                s.shape,
                cols / 16
            )));
        }
        let scales = s.data.to_vec();

        let g = self.typed(&gname, Dtype::F32, "the per-tensor scale")?;
        if !matches!(g.shape.as_slice(), [] | [1]) {
            return Err(Error::Shape(format!(
                "{gname}: shape {:?}, expected a scalar ([] or [1])",
                g.shape
            )));
        }
        let global = g
            .data
            .try_into()
            .map(f32::from_le_bytes)
            .map_err(|_| Error::Load(format!("{gname}: {} bytes, expected 4", g.data.len())))?;
        if !(global.is_finite() && global > 0.0) {
            return Err(Error::BadWeights(format!(
                "{gname}: global scale {global} must be finite and positive"
            )));
        }
        let host = Nvfp4Host {
            rows,
            cols,
            codes,
            scales,
            global,
        };
        host.validate(&sname)?;
        Ok(host)
    }
}
