//! What a sweep's results look like: each case's receivers summarised (mean ± σ, median,
//! min … max, outliers, the ratio to the baseline and to the floor, each with its σ) and the
//! noise verdict, written as the terminal table, JSON, CSV or a markdown table.

use std::fmt::Write as _;
use std::time::Duration;

use super::run::{self, FLOOR, Failure};
use super::stats::{self, Noise, Ratio, Summary};
use super::sweep;

/// One receiver's line of a case.
#[derive(Debug, Clone)]
pub struct Row<'a> {
    /// The receiver.
    pub name: &'a str,
    /// Its timed runs, in ms, when it passed.
    pub summary: Option<Summary>,
    /// Its mean over the baseline's.
    pub ratio: Option<Ratio>,
    /// Its mean over the floor's, when the floor ran.
    pub floor_ratio: Option<Ratio>,
    /// The same with the start ([`CaseView::start`]) taken from both: its work over the
    /// floor's.
    pub floor_ratio_beyond_start: Option<f64>,
    /// Why it failed.
    pub failure: Option<&'a Failure>,
    /// Its runs in ms.
    pub times: Vec<f64>,
    /// The largest peak RSS of its timed runs, in KiB (see [`run::Measured::peak_rss_kib`]).
    pub peak_rss_kib: Option<u64>,
}

/// One case's lines and verdict.
#[derive(Debug, Clone)]
pub struct CaseView<'a> {
    /// One per receiver, the baseline first.
    pub rows: Vec<Row<'a>>,
    /// Spawning the hook N times, in ms.
    pub hook_spawn: Option<Summary>,
    /// Those runs, in ms, one per turn: paired with each receiver's run of the same turn.
    pub hook_spawn_times: Vec<f64>,
    /// The request's size in bytes.
    pub request_bytes: usize,
    /// Starting a program that does nothing with the request as each receiver is started
    /// ([`run::Outcome::start`]), in ms.
    pub start: Option<Summary>,
    /// Whether the machine was quiet enough.
    pub noise: Noise,
}

fn ms(d: &Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The summaries, ratios and verdict of one case (the baseline is its first receiver).
pub fn view(outcome: &run::Outcome, noisy_cv: f64) -> CaseView<'_> {
    let summaries: Vec<Option<Summary>> = outcome
        .receivers
        .iter()
        .map(|r| {
            if r.failure.is_some() {
                None
            } else {
                stats::summarize(&r.times.iter().map(ms).collect::<Vec<_>>())
            }
        })
        .collect();
    let base = summaries.first().cloned().flatten();
    let floor = outcome
        .receivers
        .iter()
        .position(|r| r.name == FLOOR)
        .and_then(|i| summaries[i].clone());
    let start = stats::summarize(&outcome.start.iter().map(ms).collect::<Vec<_>>());
    let rows = outcome
        .receivers
        .iter()
        .zip(&summaries)
        .map(|(r, s)| Row {
            floor_ratio_beyond_start: beyond_start(s.as_ref(), floor.as_ref(), start.as_ref()),
            name: &r.name,
            summary: s.clone(),
            ratio: s
                .as_ref()
                .zip(base.as_ref())
                .and_then(|(s, b)| stats::ratio(s, b)),
            floor_ratio: s
                .as_ref()
                .zip(floor.as_ref())
                .and_then(|(s, f)| stats::ratio(s, f)),
            failure: r.failure.as_ref(),
            times: r.times.iter().map(ms).collect(),
            peak_rss_kib: if r.failure.is_some() {
                None
            } else {
                r.peak_rss_kib.iter().copied().max()
            },
        })
        .collect();
    CaseView {
        rows,
        hook_spawn: stats::summarize(&outcome.hook_spawn.iter().map(ms).collect::<Vec<_>>()),
        hook_spawn_times: outcome.hook_spawn.iter().map(ms).collect(),
        request_bytes: outcome.request_bytes,
        start,
        noise: stats::noise(floor.as_ref(), base.as_ref(), noisy_cv),
    }
}

/// A receiver's mean over the floor's with the start's mean taken from both; `None` without
/// a floor or a start, or when the floor's runs are not longer than the start's.
fn beyond_start(
    receiver: Option<&Summary>,
    floor: Option<&Summary>,
    start: Option<&Summary>,
) -> Option<f64> {
    let (r, f, s) = (receiver?, floor?, start?);
    (f.mean > s.mean).then(|| (r.mean - s.mean) / (f.mean - s.mean))
}

/// The warning to print for a noisy case, if it is one.
pub fn noise_warning(noise: &Noise, threshold: f64) -> Option<String> {
    match noise {
        Noise::Noisy { gauge, cv } => Some(format!(
            "WARNING: the machine is too noisy for these figures: the {}'s runs vary by {:.1} % \
             (σ/mean, above {:.0} %); differences smaller than that are noise. Quiet the machine \
             or add --runs.",
            match gauge {
                stats::Gauge::Floor => "floor",
                stats::Gauge::Baseline => "baseline",
            },
            cv * 100.0,
            threshold * 100.0
        )),
        Noise::Quiet { .. } | Noise::Unknown => None,
    }
}

/// KiB as MiB, one decimal, or `-`.
fn mib_text(kib: Option<u64>) -> String {
    kib.map_or("-".to_owned(), |k| format!("{:.1} MiB", k as f64 / 1024.0))
}

fn ratio_text(r: Option<Ratio>) -> String {
    r.map_or("-".to_owned(), |r| format!("{:.3} ± {:.3}", r.value, r.sd))
}

/// The terminal table: per case its title, one line per receiver, the hook's cost, a warning.
pub fn table(o: &sweep::Outcome, noisy_cv: f64) -> String {
    let mut out = String::new();
    let of = o.cases.len();
    for (i, c) in o.cases.iter().enumerate() {
        let v = view(c, noisy_cv);
        if i > 0 {
            out.push('\n');
        }
        let _ = writeln!(
            out,
            "{}{}; {} runs each after {} warm-up",
            if of > 1 {
                format!("[{}/{of}] ", i + 1)
            } else {
                String::new()
            },
            c.case.title(),
            o.runs,
            o.warmup
        );
        let width = v
            .rows
            .iter()
            .map(|r| r.name.len())
            .max()
            .unwrap_or(8)
            .max(8);
        let _ = writeln!(
            out,
            "{:<width$}  {:>21} {:>10} {:>23} {:>16} {:>16} {:>10}",
            "receiver", "mean ± σ", "median", "min … max", "ratio", "x floor", "peak RSS"
        );
        for r in &v.rows {
            match (&r.summary, r.failure) {
                (Some(s), None) => {
                    let _ = writeln!(
                        out,
                        "{:<width$}  {:>21} {:>10} {:>23} {:>16} {:>16} {:>10}{}",
                        r.name,
                        format!("{:.1} ± {:.1} ms", s.mean, s.sd),
                        format!("{:.1} ms", s.median),
                        format!("{:.1} … {:.1} ms", s.min, s.max),
                        ratio_text(r.ratio),
                        ratio_text(r.floor_ratio),
                        mib_text(r.peak_rss_kib),
                        if s.outliers.is_empty() {
                            String::new()
                        } else {
                            format!(
                                "  ({} outlier{})",
                                s.outliers.len(),
                                if s.outliers.len() == 1 { "" } else { "s" }
                            )
                        }
                    );
                }
                (_, f) => {
                    let _ = writeln!(
                        out,
                        "{:<width$}  FAILED: {}",
                        r.name,
                        f.map_or("no runs".to_owned(), |f| f.to_string())
                    );
                }
            }
        }
        // Every receiver's time includes its start; the floor's, being short, most of all.
        if let Some(st) = &v.start
            && v.rows.iter().any(|r| r.floor_ratio_beyond_start.is_some())
        {
            let _ = writeln!(
                out,
                "starting a program as each receiver is started (`{}`): {:.1} ± {:.1} ms; \
                 beyond it, x floor:",
                run::START,
                st.mean,
                st.sd
            );
            for r in &v.rows {
                if let Some(x) = r.floor_ratio_beyond_start {
                    let _ = writeln!(out, "  {}: {x:.3}", r.name);
                }
            }
        }
        // Memory per command beyond the request (issue 24): what a receiver holds per ref
        // besides what it was sent, fixed costs included (so meaningful at many refs).
        if c.case.refs >= 100_000 {
            let _ = writeln!(
                out,
                "peak RSS beyond the request ({:.1} MiB), per ref:",
                v.request_bytes as f64 / (1 << 20) as f64
            );
            for r in &v.rows {
                if let Some(kib) = r.peak_rss_kib {
                    let beyond = (kib * 1024).saturating_sub(v.request_bytes as u64);
                    let _ = writeln!(out, "  {}: {} bytes", r.name, beyond / c.case.refs as u64);
                }
            }
        }
        if let Some(h) = &v.hook_spawn {
            let _ = writeln!(
                out,
                "spawning the update hook {} times in a row: {:.1} ± {:.1} ms",
                c.case.refs, h.mean, h.sd
            );
            for r in &v.rows {
                if let Some(s) = &r.summary {
                    let over = (s.mean / h.mean - 1.0) * 100.0;
                    let _ = write!(out, "  {}: {over:+.1} % over spawning (means)", r.name);
                    if let Some(p) = stats::paired(&r.times, &v.hook_spawn_times) {
                        let _ = write!(
                            out,
                            "; run by run: median {:+.1} %, half the runs {:+.1} … {:+.1} %",
                            p.median, p.quartiles.0, p.quartiles.1
                        );
                    }
                    out.push('\n');
                }
            }
        }
        if let Some(w) = noise_warning(&v.noise, noisy_cv) {
            let _ = writeln!(out, "{w}");
        }
    }
    out
}

fn json_string(s: &str) -> String {
    serde_json::Value::from(s).to_string()
}

fn num(x: Option<f64>, places: usize) -> String {
    x.map_or("null".to_owned(), |x| format!("{x:.places$}"))
}

/// The results as JSON: `{"runs","warmup","cases":[{<case fields>,"noise",...,"receivers":[…]}]}`.
pub fn json(o: &sweep::Outcome, noisy_cv: f64) -> String {
    let mut out = format!("{{\"runs\":{},\"warmup\":{},\"cases\":[", o.runs, o.warmup);
    for (i, c) in o.cases.iter().enumerate() {
        let v = view(c, noisy_cv);
        if i > 0 {
            out.push(',');
        }
        out.push('{');
        for (k, val) in c.case.fields() {
            let val = match val.parse::<usize>() {
                Ok(n) => n.to_string(),
                Err(_) => json_string(&val),
            };
            let _ = write!(out, "\"{k}\":{val},");
        }
        let (noise, cv) = match v.noise {
            Noise::Quiet { cv, .. } => ("quiet", Some(cv)),
            Noise::Noisy { cv, .. } => ("noisy", Some(cv)),
            Noise::Unknown => ("unknown", None),
        };
        let _ = write!(
            out,
            "\"noise\":\"{noise}\",\"noise_cv\":{},\"hook_spawn_ms\":{},\"start_ms\":{},\
             \"receivers\":[",
            num(cv, 4),
            num(v.hook_spawn.as_ref().map(|h| h.mean), 3),
            num(v.start.as_ref().map(|s| s.mean), 3)
        );
        for (j, r) in v.rows.iter().enumerate() {
            if j > 0 {
                out.push(',');
            }
            let s = r.summary.as_ref();
            let times: Vec<String> = r.times.iter().map(|t| format!("{t:.3}")).collect();
            let _ = write!(
                out,
                "{{\"name\":{},\"ok\":{},\"error\":{},\"mean_ms\":{},\"sd_ms\":{},\"median_ms\":{},\
                 \"min_ms\":{},\"max_ms\":{},\"outliers\":{},\"ratio\":{},\"ratio_sd\":{},\
                 \"floor_ratio\":{},\"floor_ratio_sd\":{},\"floor_ratio_beyond_start\":{},\
                 \"peak_rss_kib\":{},\"times_ms\":[{}]}}",
                json_string(r.name),
                r.failure.is_none(),
                r.failure
                    .map_or("null".to_owned(), |f| json_string(&f.to_string())),
                num(s.map(|s| s.mean), 3),
                num(s.map(|s| s.sd), 3),
                num(s.map(|s| s.median), 3),
                num(s.map(|s| s.min), 3),
                num(s.map(|s| s.max), 3),
                s.map_or("[]".to_owned(), |s| format!("{:?}", s.outliers)),
                num(r.ratio.map(|x| x.value), 4),
                num(r.ratio.map(|x| x.sd), 4),
                num(r.floor_ratio.map(|x| x.value), 4),
                num(r.floor_ratio.map(|x| x.sd), 4),
                num(r.floor_ratio_beyond_start, 4),
                r.peak_rss_kib.map_or("null".to_owned(), |k| k.to_string()),
                times.join(",")
            );
        }
        out.push_str("]}");
    }
    out.push_str("]}");
    out
}

const COLUMNS: [&str; 13] = [
    "receiver",
    "ok",
    "mean_ms",
    "sd_ms",
    "median_ms",
    "min_ms",
    "max_ms",
    "outliers",
    "ratio",
    "ratio_sd",
    "floor_ratio_beyond_start",
    "peak_rss_kib",
    "noise",
];

/// One line per case × receiver: the case's fields, then [`COLUMNS`].
fn records(o: &sweep::Outcome, noisy_cv: f64) -> (Vec<&'static str>, Vec<Vec<String>>) {
    let mut header: Vec<&'static str> = Vec::new();
    let mut lines = Vec::new();
    for c in &o.cases {
        let v = view(c, noisy_cv);
        let fields = c.case.fields();
        if header.is_empty() {
            header = fields.iter().map(|(k, _)| *k).chain(COLUMNS).collect();
        }
        let noise = match v.noise {
            Noise::Quiet { .. } => "quiet",
            Noise::Noisy { .. } => "noisy",
            Noise::Unknown => "unknown",
        };
        for r in &v.rows {
            let s = r.summary.as_ref();
            let f = |x: Option<f64>, p: usize| x.map_or(String::new(), |x| format!("{x:.p$}"));
            let mut line: Vec<String> = fields.iter().map(|(_, v)| v.clone()).collect();
            line.extend([
                r.name.to_owned(),
                r.failure.is_none().to_string(),
                f(s.map(|s| s.mean), 3),
                f(s.map(|s| s.sd), 3),
                f(s.map(|s| s.median), 3),
                f(s.map(|s| s.min), 3),
                f(s.map(|s| s.max), 3),
                s.map_or(String::new(), |s| s.outliers.len().to_string()),
                f(r.ratio.map(|x| x.value), 4),
                f(r.ratio.map(|x| x.sd), 4),
                f(r.floor_ratio_beyond_start, 4),
                r.peak_rss_kib.map_or(String::new(), |k| k.to_string()),
                noise.to_owned(),
            ]);
            lines.push(line);
        }
    }
    (header, lines)
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_owned()
    }
}

/// The results as CSV: a header, then one line per case × receiver.
pub fn csv(o: &sweep::Outcome, noisy_cv: f64) -> String {
    let (header, lines) = records(o, noisy_cv);
    let mut out = header.join(",");
    out.push('\n');
    for l in lines {
        out.push_str(&l.iter().map(|f| csv_field(f)).collect::<Vec<_>>().join(","));
        out.push('\n');
    }
    out
}

/// The results as a markdown table for a PR or a mailing-list post: one row per case ×
/// receiver, the columns that vary across the cases, mean ± σ, median, range and ratio.
pub fn markdown(o: &sweep::Outcome, noisy_cv: f64) -> String {
    let all: Vec<_> = o.cases.iter().map(|c| c.case.fields()).collect();
    // The case's columns whose value differs between cases (refs always).
    let varying: Vec<usize> = (0..all.first().map_or(0, |f| f.len()))
        .filter(|&k| k == 0 || all.iter().any(|f| f[k].1 != all[0][k].1))
        .collect();
    let mut out = String::new();
    let names: Vec<&str> = varying.iter().map(|&k| all[0][k].0).collect();
    let _ = writeln!(
        out,
        "| {} | receiver | mean ± σ (ms) | median (ms) | min … max (ms) | ratio | peak RSS |",
        names.join(" | ")
    );
    let _ = writeln!(out, "|{}", "---|".repeat(names.len() + 6));
    let mut noisy = 0;
    for (c, fields) in o.cases.iter().zip(&all) {
        let v = view(c, noisy_cv);
        if matches!(v.noise, Noise::Noisy { .. }) {
            noisy += 1;
        }
        let case: Vec<&str> = varying.iter().map(|&k| fields[k].1.as_str()).collect();
        for r in &v.rows {
            let cells = match (&r.summary, r.failure) {
                (Some(s), None) => format!(
                    "{:.1} ± {:.1} | {:.1} | {:.1} … {:.1} | {} | {}",
                    s.mean,
                    s.sd,
                    s.median,
                    s.min,
                    s.max,
                    ratio_text(r.ratio),
                    mib_text(r.peak_rss_kib)
                ),
                (_, f) => format!(
                    "FAILED: {} | | | | ",
                    f.map_or("no runs".to_owned(), |f| f.to_string())
                        .replace('|', "\\|")
                ),
            };
            let _ = writeln!(out, "| {} | {} | {cells} |", case.join(" | "), r.name);
        }
    }
    let _ = writeln!(
        out,
        "\n{} runs per receiver after {} warm-up; ratio: mean over the first receiver's, ± σ; \
         peak RSS: the largest process's, the most of the runs.",
        o.runs, o.warmup
    );
    if noisy > 0 {
        let _ = writeln!(
            out,
            "**Noisy:** in {noisy} of {} cases the gauge's runs varied by more than {:.0} %.",
            o.cases.len(),
            noisy_cv * 100.0
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::case::{Case, ObjectFormat, RefFormat, Report, Scenario, Switch};

    fn case(refs: usize, ref_format: RefFormat) -> Case {
        Case {
            refs,
            commits: 1,
            ref_format,
            object_format: ObjectFormat::Sha1,
            sideband: Switch::Off,
            report: Report::V2,
            atomic: Switch::Off,
            update_hook: Switch::Off,
            objects: Scenario::Server,
        }
    }

    fn measured(name: &str, ms: &[u64]) -> run::Measured {
        run::Measured {
            name: name.into(),
            times: ms.iter().map(|&m| Duration::from_millis(m)).collect(),
            peak_rss_kib: ms.iter().map(|&m| 1000 + m).collect(),
            failure: None,
        }
    }

    fn outcome() -> sweep::Outcome {
        let mut cases = Vec::new();
        for f in [RefFormat::Files, RefFormat::Reftable] {
            for refs in [100, 300] {
                cases.push(run::Outcome {
                    case: case(refs, f),
                    receivers: vec![
                        measured("git", &[10, 12, 11]),
                        measured("berth", &[5, 6, 7]),
                        measured(FLOOR, &[1, 1, 1]),
                    ],
                    hook_spawn: Vec::new(),
                    request_bytes: refs * 106,
                    start: vec![Duration::from_micros(500); 3],
                });
            }
        }
        cases[3].receivers[1].failure = Some(Failure::RefMissing("refs/heads/b/0000007".into()));
        cases[3].receivers[1].times.clear();
        sweep::Outcome {
            runs: 3,
            warmup: 1,
            cases,
        }
    }

    #[test]
    fn ratios_against_the_first_receiver_and_the_floor() {
        let o = outcome();
        let v = view(&o.cases[0], stats::NOISY_CV);
        assert_eq!(v.rows[0].ratio.unwrap().value, 1.0);
        assert!((v.rows[1].ratio.unwrap().value - 6.0 / 11.0).abs() < 1e-9);
        assert!(v.rows[1].ratio.unwrap().sd > 0.0);
        assert!((v.rows[0].floor_ratio.unwrap().value - 11.0).abs() < 1e-9);
        assert!(matches!(
            v.noise,
            Noise::Quiet {
                gauge: stats::Gauge::Floor,
                ..
            }
        ));
        let failed = view(&o.cases[3], stats::NOISY_CV);
        assert!(failed.rows[1].summary.is_none() && failed.rows[1].ratio.is_none());
    }

    /// The start (a program that does nothing, started as the receivers are) is taken from
    /// every receiver's time and the floor's for the "beyond it" ratio, printed under the
    /// table and in JSON and CSV; without it, or without a floor, there is none.
    #[test]
    fn ratios_to_the_floor_beyond_starting_a_program() {
        let mut o = outcome();
        let v = view(&o.cases[0], stats::NOISY_CV);
        // berth (6 - 0.5) / (1 - 0.5); git (11 - 0.5) / (1 - 0.5); the floor 1.
        assert!((v.rows[1].floor_ratio_beyond_start.unwrap() - 11.0).abs() < 1e-9);
        assert!((v.rows[0].floor_ratio_beyond_start.unwrap() - 21.0).abs() < 1e-9);
        assert!((v.rows[2].floor_ratio_beyond_start.unwrap() - 1.0).abs() < 1e-9);
        let t = table(&o, stats::NOISY_CV);
        assert!(
            t.contains("(`cat > /dev/null`): 0.5 ± 0.0 ms; beyond it, x floor:\n  git: 21.000\n  berth: 11.000\n  floor: 1.000\n"),
            "{t}"
        );
        let j = json(&o, stats::NOISY_CV);
        assert!(j.contains("\"start_ms\":0.500,"), "{j}");
        assert!(j.contains("\"floor_ratio_beyond_start\":11.0000,"), "{j}");
        let c = csv(&o, stats::NOISY_CV);
        assert!(
            c.lines()
                .next()
                .unwrap()
                .contains(",floor_ratio_beyond_start,"),
            "{c}"
        );
        assert!(c.lines().nth(2).unwrap().contains(",11.0000,"), "{c}");
        // No start measured, or no floor: no such ratio, no such line.
        o.cases[0].start.clear();
        o.cases[1].receivers.pop();
        for i in [0, 1] {
            let v = view(&o.cases[i], stats::NOISY_CV);
            assert!(v.rows.iter().all(|r| r.floor_ratio_beyond_start.is_none()));
        }
        let t = table(&o, stats::NOISY_CV);
        assert_eq!(t.matches("beyond it").count(), 2, "{t}");
    }

    #[test]
    fn csv_and_markdown_have_a_row_per_case_and_receiver() {
        let o = outcome();
        let csv = csv(&o, stats::NOISY_CV);
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines.len(), 1 + 4 * 3);
        assert!(lines[0].starts_with("refs,commits,ref_format,"), "{csv}");
        assert!(lines[1].starts_with("100,1,files,sha1,server,v2,off,off,off,git,true,11.000,"));
        assert!(csv.contains(",berth,false,,"), "{csv}");
        let md = markdown(&o, stats::NOISY_CV);
        let rows: Vec<&str> = md.lines().filter(|l| l.starts_with("| ")).collect();
        // The header and 12 rows; only refs and ref_format vary.
        assert_eq!(rows.len(), 13, "{md}");
        assert!(
            rows[0].starts_with("| refs | ref_format | receiver |"),
            "{md}"
        );
        assert!(
            rows.iter()
                .any(|r| r.starts_with("| 300 | reftable | berth | FAILED: ref"))
        );
    }

    #[test]
    fn the_update_hook_is_compared_with_spawning_it_by_means_and_run_by_run() {
        let mut o = outcome();
        o.cases.truncate(1);
        o.cases[0].case.update_hook = Switch::On;
        // Spawning took 10, 20, 10 ms in the three turns; berth 5, 6, 7: the means say −40 %,
        // the pairs −50 %, −70 %, −30 %.
        o.cases[0].hook_spawn = [10, 20, 10].map(Duration::from_millis).to_vec();
        let t = table(&o, stats::NOISY_CV);
        assert!(
            t.contains("spawning the update hook 100 times in a row: 13.3 ± 5.8 ms"),
            "{t}"
        );
        assert!(
            t.contains(
                "  berth: -55.0 % over spawning (means); run by run: median -50.0 %, \
                 half the runs -60.0 … -40.0 %\n"
            ),
            "{t}"
        );
    }

    #[test]
    fn noisy_machines_are_warned_about() {
        let mut o = outcome();
        o.cases[0].receivers[2] = measured(FLOOR, &[7, 96, 20]);
        let t = table(&o, stats::NOISY_CV);
        assert_eq!(
            t.matches("WARNING: the machine is too noisy").count(),
            1,
            "{t}"
        );
        assert!(t.contains("floor's runs vary by"), "{t}");
        assert!(json(&o, stats::NOISY_CV).contains("\"noise\":\"noisy\""));
        assert!(markdown(&o, stats::NOISY_CV).contains("**Noisy:** in 1 of 4 cases"));
    }
}
