//! BF16 safetensors checkpoints into the BF16 overlay: values exact, every bad input an error
//! naming the tensor, and the loaded layer runs against the f64 reference.
use denseffn::backend::{CpuBackend, GpuBackend};
use denseffn::layer::{DenseFfnLayer, DenseFfnWeights, FfnActivation, ForwardContext};
use denseffn::load::load_bf16_layer;
use denseffn::pack::random_activations;
use denseffn::reference::{ffn_f64, rel_l2};
use denseffn::Error;
use half::bf16;
use rand::rngs::SmallRng;
use rand::SeedableRng;
use std::sync::Arc;

/// A safetensors file from (name, dtype, shape, bytes), written by hand (8-byte header length,
/// JSON header, data) so the reader is checked against an independent writer.
fn safetensors(tensors: &[(String, &str, Vec<usize>, Vec<u8>)]) -> Vec<u8> {
    let mut header = serde_json::Map::new();
    let mut data = Vec::new();
    for (name, dtype, shape, bytes) in tensors {
        let start = data.len();
        data.extend_from_slice(bytes);
        header.insert(
            name.clone(),
            serde_json::json!({"dtype": dtype, "shape": shape, "data_offsets": [start, data.len()]}),
        );
    }
    let mut h = serde_json::Value::Object(header).to_string().into_bytes();
    while h.len() % 8 != 0 {
        h.push(b' ');
    }
    let mut out = (h.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&h);
    out.extend_from_slice(&data);
    out
}

/// (name, dtype, shape, bytes) of each tensor of a file.
type Tensors = Vec<(String, &'static str, Vec<usize>, Vec<u8>)>;

const H: usize = 128;
const I: usize = 192;

/// Layer 0's three BF16 projections: (tensors, values).
fn layer(seed: u64) -> (Tensors, Vec<Vec<f32>>) {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut tensors = Vec::new();
    let mut values = Vec::new();
    for (p, r, c) in [("gate_proj", I, H), ("up_proj", I, H), ("down_proj", H, I)] {
        let v: Vec<f32> = random_activations(r * c, &mut rng)
            .iter()
            .map(|x| bf16::from_f32(x * 0.1).to_f32())
            .collect();
        let bytes = v
            .iter()
            .flat_map(|x| bf16::from_f32(*x).to_bits().to_le_bytes())
            .collect();
        tensors.push((
            format!("model.layers.0.mlp.{p}.weight"),
            "BF16",
            vec![r, c],
            bytes,
        ));
        values.push(v);
    }
    (tensors, values)
}

fn write(
    dir: &tempdir::Dir,
    tensors: &[(String, &str, Vec<usize>, Vec<u8>)],
) -> std::path::PathBuf {
    let p = dir.path().join("model.safetensors");
    std::fs::write(&p, safetensors(tensors)).unwrap();
    p
}

mod tempdir {
    /// A fresh directory under the target dir, removed on drop.
    pub struct Dir(std::path::PathBuf);
    impl Dir {
        pub fn new(tag: &str) -> Dir {
            let p =
                std::env::temp_dir().join(format!("denseffn-bf16-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&p);
            std::fs::create_dir_all(&p).unwrap();
            Dir(p)
        }
        pub fn path(&self) -> &std::path::Path {
            &self.0
        }
    }
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

#[test]
fn bf16_checkpoint_loads_exactly_and_runs() {
    let dir = tempdir::Dir::new("ok");
    let (tensors, values) = layer(1);
    let path = write(&dir, &tensors);
    let (g, u, d) = load_bf16_layer(&path, 0).unwrap();
    // The format-detecting loader picks the BF16 weight set for this file.
    let host = denseffn::load::load_ffn(&path, 0).unwrap();
    assert_eq!((host.format(), host.dims()), ("bf16", (H, I)));
    for (w, v) in [&g, &u, &d].iter().zip(&values) {
        let got: Vec<f32> = w.data.iter().map(|x| x.to_f32()).collect();
        assert_eq!(&got, v);
    }
    let gpu: Arc<dyn GpuBackend> = Arc::new(CpuBackend::new());
    let mut layer = DenseFfnLayer::new_with_activation(
        DenseFfnWeights::placeholder(&gpu, H, I).unwrap(),
        FfnActivation::Silu,
        gpu.clone(),
    )
    .unwrap();
    layer.set_bf16_weights(&g, &u, &d).unwrap();
    let mut ctx = ForwardContext::new(&layer, 16).unwrap();
    let x = random_activations(16 * H, &mut SmallRng::seed_from_u64(2));
    let xb: Vec<u8> = x
        .iter()
        .flat_map(|v| bf16::from_f32(*v).to_bits().to_le_bytes())
        .collect();
    let xp = gpu.alloc(xb.len()).unwrap();
    gpu.upload(xp, &xb).unwrap();
    let y = layer.forward_prefill(xp, 16, &mut ctx, 0).unwrap();
    let mut out = vec![0u8; 16 * H * 2];
    gpu.download(&mut out, y).unwrap();
    let got: Vec<f64> = out
        .chunks_exact(2)
        .map(|c| bf16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f64())
        .collect();
    let want = ffn_f64(
        &values[0],
        &values[1],
        &values[2],
        H,
        I,
        &x,
        FfnActivation::Silu,
    );
    let e = rel_l2(&got, &want);
    assert!(e < 1e-2, "rel L2 {e}");
}

#[test]
fn bad_bf16_checkpoints_are_errors_naming_the_tensor() {
    let dir = tempdir::Dir::new("bad");
    // Wrong dtype.
    let (mut t, _) = layer(3);
    t[1].1 = "F16";
    let e = load_bf16_layer(&write(&dir, &t), 0).unwrap_err();
    assert!(
        matches!(e, Error::Load(_)) && e.to_string().contains("up_proj"),
        "{e}"
    );
    // NaN value.
    let (mut t, _) = layer(4);
    t[2].3[10..12].copy_from_slice(&bf16::NAN.to_bits().to_le_bytes());
    let e = load_bf16_layer(&write(&dir, &t), 0).unwrap_err();
    assert!(
        matches!(e, Error::BadWeights(_)) && e.to_string().contains("down_proj"),
        "{e}"
    );
    // Shapes that do not fit together.
    let (mut t, _) = layer(5);
    t[2].2 = vec![I, H];
    let e = load_bf16_layer(&write(&dir, &t), 0).unwrap_err();
    assert!(matches!(e, Error::Shape(_)), "{e}");
    // Missing tensor; layer out of range.
    let (t, _) = layer(6);
    let e = load_bf16_layer(&write(&dir, &t[..2]), 0).unwrap_err();
    assert!(e.to_string().contains("down_proj"), "{e}");
    let e = load_bf16_layer(&write(&dir, &t), 3).unwrap_err();
    assert!(e.to_string().contains("out of range"), "{e}");
}
