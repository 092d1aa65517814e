//! `--plot FILE.svg`: each receiver's median time against the ref count, and below it its peak
//! RSS against the ref count, log scales, one line per receiver and ref format (and per value of
//! any other swept option) in both, drawn with plotters' SVG backend.

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
    /// (refs, median ms) or (refs, peak RSS MiB), by ref count.
    pub points: Vec<(f64, f64)>,
}

/// The time lines: one per receiver × the values of every swept option but the ref count (the
/// ref format always), in the order first met; each point the median time in ms.
pub fn series(o: &sweep::Outcome, noisy_cv: f64) -> Vec<Series> {
    lines(o, noisy_cv, |r| r.summary.as_ref().map(|s| s.median))
}

/// The memory lines, labelled as [`series`]; each point the peak RSS in MiB.
pub fn rss_series(o: &sweep::Outcome, noisy_cv: f64) -> Vec<Series> {
    lines(o, noisy_cv, |r| r.peak_rss_kib.map(|k| k as f64 / 1024.0))
}

fn lines(
    o: &sweep::Outcome,
    noisy_cv: f64,
    value: impl Fn(&output::Row) -> Option<f64>,
) -> Vec<Series> {
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
            if let (Some(y), None) = (value(r), r.failure) {
                out[at].points.push((c.case.refs as f64, y));
            }
        }
    }
    for s in &mut out {
        s.points.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    out.retain(|s| !s.points.is_empty());
    out
}

/// The bounds of the lines' points, widened for the margins of a log-log chart.
fn bounds(lines: &[Series]) -> (std::ops::Range<f64>, std::ops::Range<f64>) {
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, y) in lines.iter().flat_map(|s| s.points.iter()) {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y0 = y0.min(y);
        y1 = y1.max(y);
    }
    (x0 / 1.3..x1 * 1.3, (y0 / 1.5).max(1e-3)..y1 * 1.5)
}

/// Draw one chart of `lines` on `area`, log scales, the line of series `i` in colour `i`.
fn chart<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    caption: &str,
    y_desc: &str,
    lines: &[Series],
) -> Result<(), Error>
where
    DB::ErrorType: 'static,
{
    let (x, y) = bounds(lines);
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 20))
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(64)
        .build_cartesian_2d(x.log_scale(), y.log_scale())?;
    chart
        .configure_mesh()
        .x_desc("refs created by the push")
        .y_desc(y_desc)
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
    Ok(())
}

/// The SVG document: the time chart above, the peak RSS chart below (the same series, in the
/// same colours; the RSS chart is left out when no run measured it).
pub fn svg(o: &sweep::Outcome, noisy_cv: f64) -> Result<String, Error> {
    let time = series(o, noisy_cv);
    if time.is_empty() {
        return Err(Error::Empty);
    }
    let mut rss = rss_series(o, noisy_cv);
    // The same colour for a series in both charts: the time lines' order (a run that passed
    // has both a time and a peak RSS, so the two hold the same series).
    rss.sort_by_key(|s| time.iter().position(|t| t.label == s.label));
    let mut text = String::new();
    {
        let height = if rss.is_empty() { 600 } else { 1200 };
        let root = SVGBackend::with_string(&mut text, (960, height)).into_drawing_area();
        root.fill(&WHITE)?;
        let caption = format!(
            "berth bench many-refs: median of {} runs (log scales)",
            o.runs
        );
        if rss.is_empty() {
            chart(&root, &caption, "time (ms)", &time)?;
        } else {
            let (top, bottom) = root.split_vertically(600);
            chart(&top, &caption, "time (ms)", &time)?;
            chart(
                &bottom,
                &format!(
                    "peak RSS: the largest process, the most of {} runs (log scales)",
                    o.runs
                ),
                "peak RSS (MiB)",
                &rss,
            )?;
        }
        root.present()?;
    }
    Ok(text)
}
