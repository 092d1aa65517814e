//! `--plot FILE.svg`: each receiver's median time against the ref count, log scales, one line
//! per receiver and ref format (and per value of any other swept option), drawn with plotters'
//! SVG backend.

use plotters::prelude::*;

use super::output;
use super::sweep;

/// Why the plot could not be drawn.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No receiver passed in any case: nothing to draw.
    #[error("no receiver passed: nothing to plot")]
    Empty,
    /// plotters failed.
    #[error("drawing the plot: {0}")]
    Draw(String),
}

impl<E: std::error::Error + Send + Sync> From<DrawingAreaErrorKind<E>> for Error {
    fn from(e: DrawingAreaErrorKind<E>) -> Self {
        Error::Draw(e.to_string())
    }
}

/// One line of the plot.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// `receiver, reftable[, update_hook on …]`.
    pub label: String,
    /// (refs, median ms), by ref count.
    pub points: Vec<(f64, f64)>,
}

/// The lines: one per receiver × the values of every swept option but the ref count (the ref
/// format always), in the order first met.
pub fn series(o: &sweep::Outcome, noisy_cv: f64) -> Vec<Series> {
    let all: Vec<_> = o.cases.iter().map(|c| c.case.fields()).collect();
    // Field 0 is refs, the x axis; 2 is the ref format, always named.
    let named: Vec<usize> = (1..all.first().map_or(0, |f| f.len()))
        .filter(|&k| k == 2 || all.iter().any(|f| f[k].1 != all[0][k].1))
        .collect();
    let mut out: Vec<Series> = Vec::new();
    for (c, fields) in o.cases.iter().zip(&all) {
        let v = output::view(c, noisy_cv);
        for r in &v.rows {
            let mut label = r.name.to_owned();
            for &k in &named {
                let (key, val) = &fields[k];
                label.push_str(", ");
                match *key {
                    "ref_format" | "object_format" | "objects" => label.push_str(val),
                    _ => {
                        label.push_str(key);
                        label.push(' ');
                        label.push_str(val);
                    }
                }
            }
            let at = match out.iter().position(|s| s.label == label) {
                Some(i) => i,
                None => {
                    out.push(Series {
                        label,
                        points: Vec::new(),
                    });
                    out.len() - 1
                }
            };
            if let (Some(s), None) = (&r.summary, r.failure) {
                out[at].points.push((c.case.refs as f64, s.median));
            }
        }
    }
    for s in &mut out {
        s.points.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    out.retain(|s| !s.points.is_empty());
    out
}

/// The SVG document.
pub fn svg(o: &sweep::Outcome, noisy_cv: f64) -> Result<String, Error> {
    let lines = series(o, noisy_cv);
    let points = lines.iter().flat_map(|s| s.points.iter());
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, y) in points {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y0 = y0.min(y);
        y1 = y1.max(y);
    }
    if lines.is_empty() {
        return Err(Error::Empty);
    }
    let (x0, x1) = (x0 / 1.3, x1 * 1.3);
    let (y0, y1) = ((y0 / 1.5).max(1e-3), y1 * 1.5);
    let mut text = String::new();
    {
        let root = SVGBackend::with_string(&mut text, (960, 600)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                format!(
                    "berth bench many-refs: median of {} runs (log scales)",
                    o.runs
                ),
                ("sans-serif", 20),
            )
            .margin(16)
            .x_label_area_size(44)
            .y_label_area_size(64)
            .build_cartesian_2d((x0..x1).log_scale(), (y0..y1).log_scale())?;
        chart
            .configure_mesh()
            .x_desc("refs created by the push")
            .y_desc("time (ms)")
            .draw()?;
        for (i, s) in lines.iter().enumerate() {
            let color = Palette99::pick(i).to_rgba();
            chart
                .draw_series(LineSeries::new(
                    s.points.iter().copied(),
                    color.stroke_width(2),
                ))?
                .label(s.label.as_str())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                });
            chart.draw_series(s.points.iter().map(|&p| Circle::new(p, 3, color.filled())))?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK)
            .draw()?;
        root.present()?;
    }
    Ok(text)
}
