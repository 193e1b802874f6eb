//! FP8 block-scaled safetensors checkpoints (`weight` F8_E4M3 + `weight_scale_inv` F32), shapes
//! not divisible by 128 included.
use denseffn::load::load_fp8_layer;
use denseffn::pack::random_activations;
use denseffn::pack_fp8::Fp8Host;
use denseffn::Error;
use rand::rngs::SmallRng;
use rand::SeedableRng;

/// (name, dtype, shape, bytes) of each tensor of a file.
type Tensors = Vec<(String, &'static str, Vec<usize>, Vec<u8>)>;

/// A safetensors file from (name, dtype, shape, bytes), written by hand (8-byte header length,
/// JSON header, data).
fn safetensors(tensors: &[(String, &'static str, Vec<usize>, Vec<u8>)]) -> Vec<u8> {
    let mut header = serde_json::Map::new();
    let mut data = Vec::new();
    for (name, dtype, shape, bytes) in tensors {
        let start = data.len();
        data.extend_from_slice(bytes);
        header.insert(name.clone(), serde_json::json!({"dtype": dtype, "shape": shape, "data_offsets": [start, data.len()]}));
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

fn layer_tensors(layer: usize, hidden: usize, inter: usize) -> (Tensors, Vec<Fp8Host>) {
    let mut rng = SmallRng::seed_from_u64(layer as u64 + 7);
    let mut tensors = Vec::new();
    let mut hosts = Vec::new();
    for (p, r, c) in [
        ("gate_proj", inter, hidden),
        ("up_proj", inter, hidden),
        ("down_proj", hidden, inter),
    ] {
        let w: Vec<f32> = random_activations(r * c, &mut rng)
            .iter()
            .map(|v| v * 0.02)
            .collect();
        let q = Fp8Host::quantize(&w, r, c).unwrap();
        let name = format!("model.layers.{layer}.mlp.{p}");
        let (br, bc) = Fp8Host::scale_dims(r, c);
        tensors.push((
            format!("{name}.weight"),
            "F8_E4M3",
            vec![r, c],
            q.weight.clone(),
        ));
        tensors.push((
            format!("{name}.weight_scale_inv"),
            "F32",
            vec![br, bc],
            q.scale_inv.iter().flat_map(|s| s.to_le_bytes()).collect(),
        ));
        hosts.push(q);
    }
    (tensors, hosts)
}

fn write(name: &str, bytes: &[u8]) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("denseffn-fp8-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

#[test]
fn fp8_layers_load_exactly_with_partial_blocks() {
    let (h, i) = (200, 300); // neither a multiple of 128
    let (mut t0, hosts0) = layer_tensors(0, h, i);
    let (t1, hosts1) = layer_tensors(1, h, i);
    t0.extend(t1);
    let path = write("ok.safetensors", &safetensors(&t0));
    for (layer, hosts) in [(0, &hosts0), (1, &hosts1)] {
        let (g, u, d) = load_fp8_layer(&path, layer).unwrap();
        assert_eq!(
            [&g, &u, &d],
            [&hosts[0], &hosts[1], &hosts[2]],
            "layer {layer}"
        );
        assert_eq!(d.scale_inv.len(), 2 * 3);
    }
    assert!(
        matches!(load_fp8_layer(&path, 2), Err(Error::Invalid(ref s)) if s.contains("2 layers"))
    );
}

#[test]
fn fp8_bad_inputs_are_named() {
    let (h, i) = (130, 260);
    let (base, _) = layer_tensors(0, h, i);
    let edit = |f: &dyn Fn(&mut Tensors)| {
        let mut t = base.clone();
        f(&mut t);
        load_fp8_layer(&write("bad.safetensors", &safetensors(&t)), 0).expect_err("must fail")
    };
    // Wrong scale grid (as if the scales were per 64×64).
    let e = edit(&|t| {
        t[1].2 = vec![3, 5];
        t[1].3 = 1.0f32.to_le_bytes().repeat(15);
    });
    assert!(
        matches!(e, Error::Shape(ref s) if s.contains("weight_scale_inv")),
        "{e}"
    );
    // A NaN weight byte; a negative block scale.
    let e = edit(&|t| t[2].3[5] = 0x7F);
    assert!(
        matches!(e, Error::BadWeights(ref s) if s.contains("up_proj") && s.contains("NaN")),
        "{e}"
    );
    let e = edit(&|t| t[5].3[0..4].copy_from_slice(&(-1.0f32).to_le_bytes()));
    assert!(
        matches!(e, Error::BadWeights(ref s) if s.contains("down_proj")),
        "{e}"
    );
    // Wrong dtype for the weights; missing scales; gate/up shapes that disagree.
    let e = edit(&|t| t[0].1 = "U8");
    assert!(
        matches!(e, Error::Load(ref s) if s.contains("gate_proj.weight")),
        "{e}"
    );
    let e = edit(&|t| {
        t.remove(3);
    });
    assert!(
        matches!(e, Error::Load(ref s) if s.contains("up_proj.weight_scale_inv")),
        "{e}"
    );
    let (other, _) = layer_tensors(0, h, 2 * i);
    let e = edit(&|t| {
        t[2] = other[2].clone();
        t[3] = other[3].clone();
    });
    assert!(
        matches!(e, Error::Shape(ref s) if s.contains("up_proj")),
        "{e}"
    );
}
