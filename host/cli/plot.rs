//! The SVG plots of `denseffn bench` (plotters' SVG backend: text is written as SVG `<text>`,
//! so no system fonts are needed). Per shape: weight GB/s against m (forward_km, direct and
//! graph-replayed, per format; copy bandwidth, cuBLAS bf16 and ggml as reference lines) and
//! TFLOP/s against N (forward_prefill per format; cuBLAS bf16 and ggml as reference lines).
use crate::bench::{DecodeRow, PrefillRow, Report};
use denseffn::bench::anchors::{self, Unit};
use denseffn::{Error, Result};
use plotters::prelude::*;
use std::path::{Path, PathBuf};

type Points = Vec<(f64, f64)>;

/// One line of a chart.
struct Line {
    label: String,
    color: RGBColor,
    dashed: bool,
    points: Points,
}

/// Writes `decode-<shape>.svg` and `prefill-<shape>.svg` for each shape; returns their paths.
pub fn plots(r: &Report, dir: &Path) -> Result<Vec<PathBuf>> {
    let mut written = Vec::new();
    for shape in &r.shapes {
        let decode: Vec<&DecodeRow> = r
            .decode
            .iter()
            .flatten()
            .filter(|d| d.shape == shape.name && d.path.starts_with("forward_km"))
            .collect();
        let prefill: Vec<&PrefillRow> = r
            .prefill
            .iter()
            .flatten()
            .filter(|p| p.shape == shape.name)
            .collect();
        let mut lines = Vec::new();
        let mut plines = Vec::new();
        for (k, f) in r.formats.iter().enumerate() {
            let color = color(k);
            let rows = decode.iter().filter(|d| d.format == f.name);
            let direct: Points = rows.clone().map(|d| (d.m as f64, d.gbs)).collect();
            let graph: Points = rows
                .filter_map(|d| d.graph_us.map(|g| (d.m as f64, d.gbs * d.us / g)))
                .collect();
            lines.push(line(f.name.to_string(), color, false, direct));
            lines.push(line(format!("{} (graph)", f.name), color, true, graph));
            let ggml = anchors::series(&r.ggml, f.ggml, Unit::GBps);
            let ggml = ggml.iter().map(|&(n, v)| (n as f64, v)).collect();
            lines.push(line(
                format!("ggml {} (1 matrix)", f.ggml),
                color.mix_light(),
                true,
                ggml,
            ));

            let tf: Points = prefill
                .iter()
                .filter(|p| p.format == f.name)
                .map(|p| ((p.n as f64).log2(), p.tflops))
                .collect();
            plines.push(line(f.name.to_string(), color, false, tf));
            if let Some(&(_, v)) = anchors::series(&r.ggml, f.ggml, Unit::Tflops).first() {
                plines.push(line(
                    format!("ggml {} N=512 (1 matrix)", f.ggml),
                    color.mix_light(),
                    true,
                    vec![(f64::NAN, v)],
                ));
            }
        }
        let first = r.decode.iter().flatten().find(|d| d.shape == shape.name);
        if let Some(d) = first {
            let cublas: Points = decode
                .iter()
                .filter(|x| x.format == d.format)
                .filter_map(|x| {
                    x.cublas_us
                        .map(|c| (x.m as f64, bf16_bytes(shape.h, shape.i) / c / 1e3))
                })
                .collect();
            lines.push(line("cuBLAS bf16 FFN".into(), GREY, true, cublas));
        }
        lines.push(line(
            "copy (device to device)".into(),
            BLACK,
            true,
            vec![(f64::NAN, r.copy_gbs)],
        ));
        if let Some(p0) = prefill.first() {
            let cublas: Points = prefill
                .iter()
                .filter(|p| p.format == p0.format)
                .filter_map(|p| p.cublas_tflops.map(|c| ((p.n as f64).log2(), c)))
                .collect();
            plines.push(line("cuBLAS bf16 FFN".into(), GREY, true, cublas));
        }
        let act = format!("{}×{} {:?}", shape.h, shape.i, shape.act);
        let charts = [
            (
                "decode",
                "decode forward_km: weight GB/s vs m",
                "m (tokens)",
                "weight GB/s",
                false,
                &lines,
            ),
            (
                "prefill",
                "forward_prefill: TFLOP/s vs N",
                "N (tokens)",
                "TFLOP/s",
                true,
                &plines,
            ),
        ];
        for (kind, what, xdesc, ydesc, log2_x, lines) in charts {
            let p = dir.join(format!("{kind}-{}.svg", shape.name));
            let title = format!("{} {what} ({act})", shape.name);
            let spec = Spec {
                title: &title,
                xdesc,
                ydesc,
                log2_x,
            };
            chart(&p, &spec, lines)?;
            written.push(p);
        }
    }
    Ok(written)
}

fn bf16_bytes(h: usize, i: usize) -> f64 {
    (3 * h * i * 2) as f64
}

fn line(label: String, color: RGBColor, dashed: bool, points: Points) -> Line {
    Line {
        label,
        color,
        dashed,
        points,
    }
}

fn color(k: usize) -> RGBColor {
    const C: [RGBColor; 6] = [
        RGBColor(31, 119, 180),
        RGBColor(214, 39, 40),
        RGBColor(44, 160, 44),
        RGBColor(148, 103, 189),
        RGBColor(255, 127, 14),
        RGBColor(140, 86, 75),
    ];
    C[k % C.len()]
}

const GREY: RGBColor = RGBColor(110, 110, 110);

trait Light {
    fn mix_light(self) -> RGBColor;
}

impl Light for RGBColor {
    /// Halfway to white: the ggml reference lines in the format's hue.
    fn mix_light(self) -> RGBColor {
        let m = |c: u8| ((c as u16 + 255) / 2) as u8;
        RGBColor(m(self.0), m(self.1), m(self.2))
    }
}

/// A chart's title and axes; `log2_x`: x values are log2 of the quantity, labelled with it.
struct Spec<'a> {
    title: &'a str,
    xdesc: &'a str,
    ydesc: &'a str,
    log2_x: bool,
}

/// Draws `lines` (a point with x = NaN is a horizontal line across the chart) into `path`.
fn chart(path: &Path, spec: &Spec, lines: &[Line]) -> Result<()> {
    draw(path, spec, lines).map_err(|e| Error::Invalid(format!("plotting {}: {e}", path.display())))
}

fn draw(
    path: &Path,
    spec: &Spec,
    lines: &[Line],
) -> std::result::Result<(), Box<dyn std::error::Error>> {
    let (title, xdesc, ydesc, log2_x) = (spec.title, spec.xdesc, spec.ydesc, spec.log2_x);
    let pts = || {
        lines
            .iter()
            .flat_map(|l| l.points.iter())
            .filter(|p| p.1.is_finite())
    };
    let xs: Vec<f64> = pts().map(|p| p.0).filter(|x| x.is_finite()).collect();
    let (mut x0, mut x1) = xs
        .iter()
        .fold((f64::MAX, f64::MIN), |(a, b), &x| (a.min(x), b.max(x)));
    if xs.is_empty() {
        (x0, x1) = (0.0, 1.0);
    }
    let pad = ((x1 - x0) * 0.05).max(0.5);
    let (x0, x1) = (x0 - pad, x1 + pad);
    let ymax = pts().map(|p| p.1).fold(0.0, f64::max);
    let ymax = if ymax > 0.0 { ymax * 1.1 } else { 1.0 };

    let root = SVGBackend::new(path, (960, 600)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(x0..x1, 0.0..ymax)?;
    let fmt_x = |x: &f64| {
        if log2_x {
            format!("{:.0}", x.exp2())
        } else {
            format!("{x:.0}")
        }
    };
    chart
        .configure_mesh()
        .x_desc(xdesc)
        .y_desc(ydesc)
        .x_labels(if log2_x {
            (x1 - x0).floor() as usize + 1
        } else {
            12
        })
        .x_label_formatter(&fmt_x)
        .draw()?;
    for l in lines {
        let points: Points = match l.points.as_slice() {
            [(x, y)] if x.is_nan() => vec![(x0, *y), (x1, *y)],
            p => p
                .iter()
                .copied()
                .filter(|p| p.0.is_finite() && p.1.is_finite())
                .collect(),
        };
        if points.is_empty() {
            continue;
        }
        let style = l.color.stroke_width(2);
        let (color, label) = (l.color, l.label.clone());
        let legend = move |(x, y): (i32, i32)| {
            PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
        };
        if l.dashed {
            chart
                .draw_series(DashedLineSeries::new(points.clone(), 6, 4, style))?
                .label(label)
                .legend(legend);
        } else {
            chart
                .draw_series(LineSeries::new(points.clone(), style))?
                .label(label)
                .legend(legend);
            chart.draw_series(points.iter().map(|&p| Circle::new(p, 3, color.filled())))?;
        }
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 12))
        .draw()?;
    root.present()?;
    Ok(())
}
