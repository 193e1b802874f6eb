//! Loading ModelOpt NVFP4 FFN weights from safetensors (tests/fixtures, made by
//! tests/fixtures/make_fixtures.py): numerics against numpy's f64 reference on the CPU backend,
//! one file vs shards, `inspect`, and a clear error for each kind of bad input.
mod common;
use common::*;
use denseffn::backend::{CpuBackend, GpuBackend};
use denseffn::layer::{DenseFfnLayer, DenseFfnWeights, FfnActivation, ForwardContext};
use denseffn::load::{inspect, load_nvfp4_layer};
use denseffn::pack::Nvfp4Host;
use denseffn::reference::{ffn_f64, rel_l2};
use denseffn::Error;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

const HIDDEN: usize = 128;
const INTER: usize = 256;
const TOKENS: usize = 2;

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(rel)
}

fn single() -> PathBuf {
    fixture("nvfp4_tiny/model.safetensors")
}

fn sharded() -> PathBuf {
    fixture("nvfp4_tiny_sharded")
}

fn read_f32(path: &Path) -> Vec<f32> {
    std::fs::read(path)
        .unwrap()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// A fresh directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let p = std::env::temp_dir().join(format!(
            "denseffn-load-{}-{tag}-{}",
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
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// An owned tensor, to rewrite checkpoints.
#[derive(Clone)]
struct T {
    name: String,
    dtype: String,
    shape: Vec<usize>,
    data: Vec<u8>,
}

/// The tensors of a safetensors file, by name.
fn read_st(path: &Path) -> Vec<T> {
    let bytes = std::fs::read(path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut out: Vec<T> = st
        .tensors()
        .into_iter()
        .map(|(name, v)| T {
            name,
            dtype: v.dtype().to_string(),
            shape: v.shape().to_vec(),
            data: v.data().to_vec(),
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// Writes a safetensors file by hand (8-byte header length, JSON, data), independent of the
/// reader under test.
fn write_st(path: &Path, ts: &[T]) {
    let mut header = String::from("{");
    let mut off = 0;
    for (i, t) in ts.iter().enumerate() {
        if i > 0 {
            header.push(',');
        }
        let shape: Vec<String> = t.shape.iter().map(|d| d.to_string()).collect();
        header += &format!(
            "\"{}\":{{\"dtype\":\"{}\",\"shape\":[{}],\"data_offsets\":[{},{}]}}",
            t.name,
            t.dtype,
            shape.join(","),
            off,
            off + t.data.len()
        );
        off += t.data.len();
    }
    header.push('}');
    while header.len() % 8 != 0 {
        header.push(' ');
    }
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header.as_bytes());
    for t in ts {
        bytes.extend_from_slice(&t.data);
    }
    std::fs::write(path, bytes).unwrap();
}

fn find<'a>(ts: &'a mut [T], name: &str) -> &'a mut T {
    ts.iter_mut()
        .find(|t| t.name == name)
        .unwrap_or_else(|| panic!("fixture has no {name}"))
}

/// The fixture rewritten by `edit` into a temp dir: (dir guard, file path).
fn edited(tag: &str, edit: impl FnOnce(&mut Vec<T>)) -> (TempDir, PathBuf) {
    let dir = TempDir::new(tag);
    let mut ts = read_st(&single());
    edit(&mut ts);
    let p = dir.path("model.safetensors");
    write_st(&p, &ts);
    (dir, p)
}

/// The fixture's bytes changed by `edit`, in a temp dir.
fn raw_edited(tag: &str, edit: impl FnOnce(&mut Vec<u8>)) -> (TempDir, PathBuf) {
    let dir = TempDir::new(tag);
    let mut bytes = std::fs::read(single()).unwrap();
    edit(&mut bytes);
    let p = dir.path("model.safetensors");
    std::fs::write(&p, bytes).unwrap();
    (dir, p)
}

/// A copy of the sharded fixture, changed by `edit(dir)`.
fn sharded_copy(tag: &str, edit: impl FnOnce(&Path)) -> TempDir {
    let dir = TempDir::new(tag);
    for e in std::fs::read_dir(sharded()).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), dir.path(e.file_name().to_str().unwrap())).unwrap();
    }
    edit(&dir.0);
    dir
}

fn load_err(path: &Path, layer: usize) -> Error {
    match load_nvfp4_layer(path, layer) {
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

fn p(layer: usize, proj: &str, t: &str) -> String {
    format!("model.layers.{layer}.mlp.{proj}.{t}")
}

#[test]
fn forward_matches_numpy_reference() {
    let x = read_f32(&fixture("nvfp4_tiny/x.f32"));
    assert_eq!(x.len(), TOKENS * HIDDEN);
    for layer in 0..2 {
        let want: Vec<f64> = read_f32(&fixture(&format!("nvfp4_tiny/y_layer{layer}.f32")))
            .into_iter()
            .map(f64::from)
            .collect();
        assert_eq!(want.len(), TOKENS * HIDDEN);
        assert!(want.iter().any(|v| v.abs() > 0.1), "reference is trivial");
        let (gate, up, down) = load_nvfp4_layer(&single(), layer).unwrap();
        assert_eq!((gate.rows, gate.cols), (INTER, HIDDEN));
        assert_eq!((up.rows, up.cols), (INTER, HIDDEN));
        assert_eq!((down.rows, down.cols), (HIDDEN, INTER));

        // The Rust f64 reference over the loaded weights agrees with numpy's: same decoding.
        let rust_ref = ffn_f64(
            &gate.dequantize(),
            &up.dequantize(),
            &down.dequantize(),
            HIDDEN,
            INTER,
            &x,
            FfnActivation::Silu,
        );
        let e = rel_l2(&rust_ref, &want);
        assert!(e < 1e-5, "layer {layer}: Rust f64 vs numpy f64 rel L2 {e}");

        let gpu: Arc<dyn GpuBackend> = Arc::new(CpuBackend::new());
        let w = DenseFfnWeights::upload(&gpu, &gate, &up, &down).unwrap();
        let l = DenseFfnLayer::new_with_activation(w, FfnActivation::Silu, gpu.clone()).unwrap();
        let mut ctx = ForwardContext::new(&l, TOKENS).unwrap();
        let xin = upload_bf16(&gpu, &x);
        let y = download_bf16(&gpu, l.forward(xin, &mut ctx, 0).unwrap(), HIDDEN);
        let e = rel_l2(&y, &want[..HIDDEN]);
        assert!(e <= 1e-2, "layer {layer}: forward vs numpy rel L2 {e}");
        let ys = download_bf16(
            &gpu,
            l.forward_batched(xin, TOKENS, &mut ctx, 0).unwrap(),
            TOKENS * HIDDEN,
        );
        let e = rel_l2(&ys, &want);
        assert!(
            e <= 1e-2,
            "layer {layer}: forward_batched vs numpy rel L2 {e}"
        );
    }
}

#[test]
fn layers_differ_and_input_scale_is_ignored() {
    let l0 = load_nvfp4_layer(&single(), 0).unwrap();
    let l1 = load_nvfp4_layer(&single(), 1).unwrap();
    assert_ne!(l0, l1);
    // Removing every input_scale changes nothing.
    let (_d, path) = edited("no-input-scale", |ts| {
        ts.retain(|t| !t.name.ends_with(".input_scale"))
    });
    assert_eq!(load_nvfp4_layer(&path, 0).unwrap(), l0);
    assert_eq!(load_nvfp4_layer(&path, 1).unwrap(), l1);
}

#[test]
fn sharded_checkpoint_gives_identical_weights() {
    let index = sharded().join("model.safetensors.index.json");
    // The shards without their index: every *.safetensors of the directory.
    let no_index = sharded_copy("no-index", |d| {
        std::fs::remove_file(d.join("model.safetensors.index.json")).unwrap()
    });
    for layer in 0..2 {
        let want = load_nvfp4_layer(&single(), layer).unwrap();
        for path in [
            fixture("nvfp4_tiny"),
            sharded(),
            index.clone(),
            no_index.0.clone(),
        ] {
            let got = load_nvfp4_layer(&path, layer)
                .unwrap_or_else(|e| panic!("{} layer {layer}: {e}", path.display()));
            assert!(got == want, "{} layer {layer} differs", path.display());
        }
    }
}

#[test]
fn inspect_lists_ffn_tensors_per_layer() {
    let list = inspect(&single()).unwrap();
    assert_eq!(list.len(), 2 * 3 * 4, "{list:#?}");
    let mut i = 0;
    for layer in 0..2 {
        for (proj, rows, cols) in [
            ("gate_proj", INTER, HIDDEN),
            ("up_proj", INTER, HIDDEN),
            ("down_proj", HIDDEN, INTER),
        ] {
            let scalar: Vec<usize> = if layer == 0 { vec![] } else { vec![1] };
            for (t, dtype, shape, bytes) in [
                ("weight", "U8", vec![rows, cols / 2], rows * cols / 2),
                (
                    "weight_scale",
                    "F8_E4M3",
                    vec![rows, cols / 16],
                    rows * cols / 16,
                ),
                ("weight_scale_2", "F32", scalar, 4),
                ("input_scale", "F32", vec![], 4),
            ] {
                let e = &list[i];
                assert_eq!(e.layer, layer);
                assert_eq!(e.name, p(layer, proj, t));
                assert_eq!(e.short_name(), format!("{proj}.{t}"));
                assert_eq!(
                    (e.dtype.as_str(), &e.shape, e.bytes),
                    (dtype, &shape, bytes)
                );
                assert_eq!(e.file, single());
                i += 1;
            }
        }
    }
    // The sharded copy lists the same tensors, each with its shard.
    let shards = inspect(&sharded()).unwrap();
    assert_eq!(shards.len(), list.len());
    for (a, b) in list.iter().zip(&shards) {
        assert_eq!(
            (a.layer, &a.name, &a.dtype, &a.shape, a.bytes),
            (b.layer, &b.name, &b.dtype, &b.shape, b.bytes)
        );
    }
    let gate_g = shards
        .iter()
        .find(|t| t.name == p(0, "gate_proj", "weight_scale_2"))
        .unwrap();
    assert!(gate_g.file.ends_with("model-00002-of-00002.safetensors"));
    let gate_w = shards
        .iter()
        .find(|t| t.name == p(0, "gate_proj", "weight"))
        .unwrap();
    assert!(gate_w.file.ends_with("model-00001-of-00002.safetensors"));
    // No FFN tensors: an empty list, not an error.
    let (_d, path) = edited("no-ffn", |ts| ts.retain(|t| !t.name.contains(".mlp.")));
    assert!(inspect(&path).unwrap().is_empty());
}

#[test]
fn missing_files_are_load_errors() {
    let dir = TempDir::new("missing");
    let e = load_err(&dir.path("nope.safetensors"), 0);
    assert!(matches!(e, Error::Load(_)), "{e}");
    assert_says(&e, &["nope.safetensors"]);
    let e = load_err(&dir.0, 0);
    assert!(matches!(e, Error::Load(_)), "{e}");
    assert_says(&e, &["model.safetensors.index.json", "model.safetensors"]);
    assert!(matches!(
        inspect(&dir.path("nope.json")),
        Err(Error::Load(_))
    ));
}

/// A change to a file's bytes.
type Edit = dyn FnOnce(&mut Vec<u8>);

#[test]
fn truncated_and_corrupt_files_are_load_errors() {
    let cases: Vec<(&str, Box<Edit>, &str)> = vec![
        ("empty", Box::new(|b| b.clear()), "too short"),
        ("four-bytes", Box::new(|b| b.truncate(4)), "too short"),
        ("in-header", Box::new(|b| b.truncate(60)), "truncated"),
        (
            "in-data",
            Box::new(|b| b.truncate(b.len() - 100)),
            "truncated",
        ),
        (
            "trailing",
            Box::new(|b| b.extend_from_slice(&[0; 8])),
            "trailing",
        ),
        (
            "garbage-json",
            Box::new(|b| b[8..24].copy_from_slice(b"this is no json!")),
            "corrupt header",
        ),
        (
            "not-utf8",
            Box::new(|b| b[9..13].copy_from_slice(&[0xFF, 0xFE, 0xFD, 0xFC])),
            "corrupt header",
        ),
        (
            "huge-header-length",
            Box::new(|b| b[..8].copy_from_slice(&u64::MAX.to_le_bytes())),
            "header length",
        ),
        (
            "unknown-dtype",
            Box::new(|b| {
                let s = String::from_utf8_lossy(&b[8..]).into_owned();
                let at = s.find("\"F8_E4M3\"").unwrap() + 8;
                b[at..at + 9].copy_from_slice(b"\"F8_E9M9\"");
            }),
            "corrupt header",
        ),
    ];
    for (tag, edit, needle) in cases {
        let (_d, path) = raw_edited(tag, edit);
        let e = load_err(&path, 0);
        assert!(matches!(e, Error::Load(_)), "{tag}: {e}");
        assert_says(&e, &[needle, "model.safetensors"]);
        assert!(matches!(inspect(&path), Err(Error::Load(_))), "{tag}");
    }
}

#[test]
fn bad_offsets_are_load_errors() {
    // A header whose offsets leave a gap.
    let dir = TempDir::new("gap");
    let header = br#"{"a":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}}      "#;
    let mut b = (header.len() as u64).to_le_bytes().to_vec();
    b.extend_from_slice(header);
    b.extend_from_slice(&[0; 8]);
    let path = dir.path("x.safetensors");
    std::fs::write(&path, b).unwrap();
    let e = load_err(&path, 0);
    assert!(matches!(e, Error::Load(_)), "{e}");
    assert_says(&e, &["corrupt header", "`a`"]);
    // Shape and byte range disagree.
    let header = br#"{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,8]}}     "#;
    let mut b = (header.len() as u64).to_le_bytes().to_vec();
    b.extend_from_slice(header);
    b.extend_from_slice(&[0; 8]);
    std::fs::write(&path, b).unwrap();
    let e = load_err(&path, 0);
    assert!(matches!(e, Error::Load(_)), "{e}");
    assert_says(&e, &["corrupt header"]);
}

#[test]
fn missing_tensor_is_named() {
    for name in [
        p(1, "down_proj", "weight_scale"),
        p(0, "gate_proj", "weight"),
        p(0, "up_proj", "weight_scale_2"),
    ] {
        let (_d, path) = edited("missing-tensor", |ts| ts.retain(|t| t.name != name));
        let layer = if name.contains("layers.1.") { 1 } else { 0 };
        let e = load_err(&path, layer);
        assert!(matches!(e, Error::Load(_)), "{e}");
        assert_says(&e, &[&name, "not found"]);
        // The other layer still loads.
        load_nvfp4_layer(&path, 1 - layer).unwrap();
    }
}

#[test]
fn wrong_dtype_is_named() {
    for (name, dtype, want) in [
        (p(0, "gate_proj", "weight"), "I8", "U8"),
        (p(0, "up_proj", "weight_scale"), "U8", "F8_E4M3"),
        (p(0, "down_proj", "weight_scale"), "F8_E5M2", "F8_E4M3"),
        (p(0, "gate_proj", "weight_scale_2"), "I32", "F32"),
    ] {
        let (_d, path) = edited("dtype", |ts| find(ts, &name).dtype = dtype.into());
        let e = load_err(&path, 0);
        assert!(matches!(e, Error::Load(_)), "{e}");
        assert_says(
            &e,
            &[
                &name,
                &format!("dtype {dtype}"),
                &format!("expected {want}"),
            ],
        );
    }
    // A bf16 global scale (2 bytes) is a dtype error, not a misread.
    let name = p(0, "gate_proj", "weight_scale_2");
    let (_d, path) = edited("dtype-bf16", |ts| {
        let t = find(ts, &name);
        t.dtype = "BF16".into();
        t.data = vec![0x80, 0x3F];
    });
    let e = load_err(&path, 0);
    assert!(matches!(e, Error::Load(_)), "{e}");
    assert_says(&e, &[&name, "BF16"]);
}

#[test]
fn codes_vs_scales_shape_mismatch() {
    let name = p(0, "up_proj", "weight_scale");
    let (_d, path) = edited("scale-shape", |ts| {
        let t = find(ts, &name);
        t.shape = vec![INTER, HIDDEN / 32];
        t.data.truncate(INTER * HIDDEN / 32);
    });
    let e = load_err(&path, 0);
    assert!(matches!(e, Error::Shape(_)), "{e}");
    assert_says(&e, &[&name, "[256, 4]", "expected [256, 8]"]);

    // Scales with the rows of another matrix.
    let (_d, path) = edited("scale-rows", |ts| {
        let t = find(ts, &name);
        t.shape = vec![INTER / 2, HIDDEN / 8];
    });
    let e = load_err(&path, 0);
    assert!(matches!(e, Error::Shape(_)), "{e}");
    assert_says(&e, &[&name, "expected [256, 8]"]);

    // Codes not 2-D.
    let w = p(0, "gate_proj", "weight");
    let (_d, path) = edited("codes-1d", |ts| {
        find(ts, &w).shape = vec![INTER * HIDDEN / 2]
    });
    let e = load_err(&path, 0);
    assert!(matches!(e, Error::Shape(_)), "{e}");
    assert_says(&e, &[&w, "2 dimensions"]);

    // Columns not a multiple of 16.
    let (_d, path) = edited("codes-cols", |ts| {
        find(ts, &w).shape = vec![INTER * HIDDEN / 8, 4];
    });
    let e = load_err(&path, 0);
    assert!(matches!(e, Error::Shape(_)), "{e}");
    assert_says(&e, &[&w, "multiple of the NVFP4 group"]);

    // Global scale that is not a scalar.
    let g = p(0, "down_proj", "weight_scale_2");
    let (_d, path) = edited("global-shape", |ts| {
        let t = find(ts, &g);
        t.shape = vec![2];
        t.data = [1.0f32, 1.0].iter().flat_map(|v| v.to_le_bytes()).collect();
    });
    let e = load_err(&path, 0);
    assert!(matches!(e, Error::Shape(_)), "{e}");
    assert_says(&e, &[&g, "scalar"]);
}

/// Replaces layer 0's `proj` with a random NVFP4 matrix `[rows, cols]`.
fn replace(ts: &mut [T], proj: &str, rows: usize, cols: usize) {
    let m = Nvfp4Host::random(
        rows,
        cols,
        0.01,
        &mut <rand::rngs::SmallRng as rand::SeedableRng>::seed_from_u64(3),
    )
    .unwrap();
    let w = find(ts, &p(0, proj, "weight"));
    w.shape = vec![rows, cols / 2];
    w.data = m.codes;
    let s = find(ts, &p(0, proj, "weight_scale"));
    s.shape = vec![rows, cols / 16];
    s.data = m.scales;
}

#[test]
fn projection_shapes_must_agree() {
    // down [128, 128] where gate is [256, 128]: down must be [hidden, intermediate].
    let (_d, path) = edited("down-shape", |ts| replace(ts, "down_proj", HIDDEN, HIDDEN));
    let e = load_err(&path, 0);
    assert!(matches!(e, Error::Shape(_)), "{e}");
    assert_says(
        &e,
        &[
            "down_proj",
            "[128, 128]",
            "expected [128, 256]",
            "gate_proj",
        ],
    );
    // up [128, 128] where gate is [256, 128].
    let (_d, path) = edited("up-shape", |ts| replace(ts, "up_proj", HIDDEN, HIDDEN));
    let e = load_err(&path, 0);
    assert!(matches!(e, Error::Shape(_)), "{e}");
    assert_says(&e, &["up_proj", "[128, 128]", "expected [256, 128]"]);
    // The loaded shapes are also what the layer checks: a consistent but transposed down
    // ([intermediate, hidden]) is refused here, before any upload.
    let (_d, path) = edited("down-transposed", |ts| {
        replace(ts, "down_proj", INTER, HIDDEN)
    });
    assert!(matches!(load_err(&path, 0), Error::Shape(_)));
}

#[test]
fn nan_and_negative_scales_are_bad_weights() {
    let name = p(0, "gate_proj", "weight_scale");
    for (byte, what) in [(0x7F, "NaN"), (0xFF, "NaN"), (0xB0, "negative")] {
        let (_d, path) = edited("bad-scale", |ts| find(ts, &name).data[37] = byte);
        let e = load_err(&path, 0);
        assert!(matches!(e, Error::BadWeights(_)), "{e}");
        assert_says(&e, &[&name, what, "scale 37"]);
    }
    // -0 is zero, not negative.
    let (_d, path) = edited("neg-zero", |ts| find(ts, &name).data[37] = 0x80);
    load_nvfp4_layer(&path, 0).unwrap();
}

#[test]
fn bad_global_scales_are_bad_weights() {
    let name = p(1, "down_proj", "weight_scale_2");
    for v in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 0.0, -0.0, -0.5] {
        let (_d, path) = edited("bad-global", |ts| {
            find(ts, &name).data = v.to_le_bytes().to_vec()
        });
        let e = load_err(&path, 1);
        assert!(matches!(e, Error::BadWeights(_)), "{v}: {e}");
        assert_says(&e, &[&name, "finite and positive"]);
        load_nvfp4_layer(&path, 0).unwrap();
    }
}

#[test]
fn layer_out_of_range_says_how_many() {
    for layer in [2, 3, usize::MAX] {
        let e = load_err(&single(), layer);
        assert!(matches!(e, Error::Invalid(_)), "{e}");
        assert_says(&e, &[&format!("layer {layer}"), "2 layers"]);
        let e = load_err(&sharded(), layer);
        assert_says(&e, &["2 layers"]);
    }
    let (_d, path) = edited("no-layers", |ts| {
        ts.retain(|t| !t.name.starts_with("model.layers."))
    });
    let e = load_err(&path, 0);
    assert!(matches!(e, Error::Invalid(_)), "{e}");
    assert_says(&e, &["0 layers"]);
}

#[test]
fn bad_indexes_are_load_errors() {
    let idx = "model.safetensors.index.json";
    let shard2 = "model-00002-of-00002.safetensors";
    // A shard the index names is missing.
    let d = sharded_copy("no-shard", |d| {
        std::fs::remove_file(d.join(shard2)).unwrap()
    });
    let e = load_err(&d.0, 0);
    assert!(matches!(e, Error::Load(_)), "{e}");
    assert_says(&e, &[shard2, "cannot open"]);
    assert!(matches!(inspect(&d.0), Err(Error::Load(_))));

    // A shard is truncated.
    let d = sharded_copy("short-shard", |d| {
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(d.join(shard2))
            .unwrap();
        let len = f.metadata().unwrap().len();
        f.set_len(len - 10).unwrap();
    });
    let e = load_err(&d.0, 1);
    assert!(matches!(e, Error::Load(_)), "{e}");
    assert_says(&e, &[shard2, "truncated"]);

    // Not JSON / no weight_map / a non-string entry / a path out of the directory.
    for (tag, text, needle) in [
        ("not-json", "{ \"weight_map\": ", "not valid JSON"),
        ("no-map", "{\"metadata\": {}}", "weight_map"),
        (
            "number",
            "{\"weight_map\": {\"model.layers.0.mlp.gate_proj.weight\": 3}}",
            "not a file name",
        ),
        (
            "escape",
            "{\"weight_map\": {\"model.layers.0.mlp.gate_proj.weight\": \"../x.safetensors\"}}",
            "inside the checkpoint directory",
        ),
    ] {
        let d = sharded_copy(tag, |d| std::fs::write(d.join(idx), text).unwrap());
        let e = load_err(&d.0, 0);
        assert!(matches!(e, Error::Load(_)), "{tag}: {e}");
        assert_says(&e, &[idx, needle]);
        assert!(
            matches!(inspect(&d.path(idx)), Err(Error::Load(_))),
            "{tag}"
        );
    }

    // The index sends a tensor to the wrong shard.
    let name = p(0, "down_proj", "weight");
    let d = sharded_copy("wrong-shard", |d| {
        let text = std::fs::read_to_string(d.join(idx)).unwrap();
        let needle = format!("\"{name}\": \"{shard2}\"");
        assert!(text.contains(&needle));
        let text = text.replace(
            &needle,
            &format!("\"{name}\": \"model-00001-of-00002.safetensors\""),
        );
        std::fs::write(d.join(idx), text).unwrap();
    });
    let e = load_err(&d.0, 0);
    assert!(matches!(e, Error::Load(_)), "{e}");
    assert_says(&e, &[&name, "does not contain"]);
    // Layer 1 lives in the other shard and still loads.
    load_nvfp4_layer(&d.0, 1).unwrap();
}

#[test]
fn duplicate_tensor_across_files_is_an_error() {
    let d = TempDir::new("dup");
    std::fs::copy(single(), d.path("a.safetensors")).unwrap();
    std::fs::copy(single(), d.path("b.safetensors")).unwrap();
    let e = load_err(&d.0, 0);
    assert!(matches!(e, Error::Load(_)), "{e}");
    assert_says(&e, &["in both", "a.safetensors", "b.safetensors"]);
}

#[test]
fn corrupted_bytes_never_panic() {
    // Every byte of the header and the first data bytes set to a few values: each load gives
    // Ok or an error, never a panic.
    let bytes = std::fs::read(single()).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let d = TempDir::new("fuzz");
    let path = d.path("model.safetensors");
    let mut errors = 0;
    for at in (0..8 + n + 64).step_by(7) {
        for v in [0x00u8, 0x7F, 0xFF, b'9', b'"'] {
            let mut b = bytes.clone();
            b[at] = v;
            std::fs::write(&path, &b).unwrap();
            errors += load_nvfp4_layer(&path, 0).is_err() as usize;
            let _ = inspect(&path);
        }
    }
    assert!(errors > 0);
}

fn cli(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_denseffn"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn cli_inspect_prints_the_ffn_tensors() {
    let out = cli(&["inspect", sharded().to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("| 0 | gate_proj.weight | U8 | [256, 64] | 16384 |"),
        "{text}"
    );
    assert!(
        text.contains("| 1 | down_proj.weight_scale_2 | F32 | [1] | 4 |"),
        "{text}"
    );
    assert!(
        text.contains("| 1 | NVFP4 | [256, 128] | [256, 128] | [128, 256] |"),
        "{text}"
    );
    assert!(
        text.contains("2 layers with FFN tensors, 24 tensors"),
        "{text}"
    );
    let out = cli(&["inspect", "/nonexistent/denseffn-model"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot load weights"));
}

#[test]
fn cli_run_loads_a_layer_from_the_model() {
    let model = fixture("nvfp4_tiny");
    let out = cli(&[
        "run",
        "--backend",
        "cpu",
        "--model",
        model.to_str().unwrap(),
        "--layer",
        "1",
        "--json",
    ]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(stderr.contains("NVFP4 layer 1 of"), "{stderr}");
    assert!(stderr.contains("(128×256)"), "{stderr}");
    assert!(stdout.contains("\"path\":\"forward\""), "{stdout}");
    let out = cli(&[
        "run",
        "--backend",
        "cpu",
        "--model",
        model.to_str().unwrap(),
        "--layer",
        "2",
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("2 layers"));
}
