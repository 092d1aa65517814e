//! The statistics of a benchmark's timed runs, as pure functions: mean ± σ, median, min … max,
//! Tukey outliers, a ratio of two means with its propagated σ, and the verdict on whether the
//! machine was quiet enough for the figures to mean anything.

/// One receiver's runs in one case, in milliseconds.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    /// How many runs.
    pub n: usize,
    /// Their mean.
    pub mean: f64,
    /// Their sample standard deviation (0 for one run).
    pub sd: f64,
    /// Their median (the mean of the middle two for an even count).
    pub median: f64,
    /// The fastest run.
    pub min: f64,
    /// The slowest run.
    pub max: f64,
    /// The runs (indices into the samples) outside Tukey's fences, 1.5 interquartile ranges
    /// beyond the quartiles.
    pub outliers: Vec<usize>,
}

impl Summary {
    /// The coefficient of variation, σ / mean.
    pub fn cv(&self) -> f64 {
        if self.mean > 0.0 {
            self.sd / self.mean
        } else {
            0.0
        }
    }
}

/// The `q` quantile of sorted samples, linearly interpolated between the closest ranks.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    let pos = q * (sorted.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

/// The summary of `samples`; `None` for no samples.
pub fn summarize(samples: &[f64]) -> Option<Summary> {
    if samples.is_empty() {
        return None;
    }
    let n = samples.len();
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let mean = samples.iter().sum::<f64>() / n as f64;
    let sd = if n > 1 {
        (samples.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt()
    } else {
        0.0
    };
    let (q1, q3) = (quantile(&sorted, 0.25), quantile(&sorted, 0.75));
    let iqr = q3 - q1;
    let (low, high) = (q1 - 1.5 * iqr, q3 + 1.5 * iqr);
    let outliers = if n >= 4 {
        (0..n)
            .filter(|&i| samples[i] < low || samples[i] > high)
            .collect()
    } else {
        // Quartiles of fewer than four runs say nothing about which one is odd.
        Vec::new()
    };
    Some(Summary {
        n,
        mean,
        sd,
        median: quantile(&sorted, 0.5),
        min: sorted[0],
        max: sorted[n - 1],
        outliers,
    })
}

/// A ratio of two means with its uncertainty.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ratio {
    /// mean / base mean.
    pub value: f64,
    /// Its standard deviation, the relative σ of both means propagated (as hyperfine does:
    /// `r · √((σ/μ)² + (σ₀/μ₀)²)`, from the runs' σ, not the σ of the means).
    pub sd: f64,
}

/// `of` over `base`; `None` when the base's mean is not positive.
pub fn ratio(of: &Summary, base: &Summary) -> Option<Ratio> {
    if base.mean <= 0.0 || of.mean <= 0.0 {
        return None;
    }
    let value = of.mean / base.mean;
    let sd = value * ((of.sd / of.mean).powi(2) + (base.sd / base.mean).powi(2)).sqrt();
    Some(Ratio { value, sd })
}

/// How much slower `of` was than `base`, run by run, in percent: the runs of one turn paired
/// (the same index in both), so that a machine that drifts over a sweep (its load, its caches,
/// its clock) shifts both sides of a pair alike and drops out, as it does not from a ratio of
/// two means.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Paired {
    /// How many pairs.
    pub n: usize,
    /// The median pair's overhead.
    pub median: f64,
    /// The first and third quartiles of the pairs' overheads: half the pairs lie between.
    pub quartiles: (f64, f64),
}

/// `of` over `base` pair by pair (`(of_i / base_i - 1) · 100`), over as many pairs as both have;
/// `None` without a pair or with a base run that took no time.
pub fn paired(of: &[f64], base: &[f64]) -> Option<Paired> {
    let mut overheads: Vec<f64> = of
        .iter()
        .zip(base)
        .map(|(o, b)| (*b > 0.0).then(|| (o / b - 1.0) * 100.0))
        .collect::<Option<_>>()?;
    if overheads.is_empty() {
        return None;
    }
    overheads.sort_by(f64::total_cmp);
    Some(Paired {
        n: overheads.len(),
        median: quantile(&overheads, 0.5),
        quartiles: (quantile(&overheads, 0.25), quantile(&overheads, 0.75)),
    })
}

/// Which receiver's spread says how noisy the machine was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gauge {
    /// The floor program: the least work, so its spread is the machine's.
    Floor,
    /// The baseline receiver, when the floor did not run.
    Baseline,
}

/// Whether the spread allows conclusions.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Noise {
    /// The gauge's coefficient of variation is at most the threshold.
    Quiet {
        /// The receiver gauged.
        gauge: Gauge,
        /// Its coefficient of variation.
        cv: f64,
    },
    /// Above the threshold: differences of that order are noise.
    Noisy {
        /// The receiver gauged.
        gauge: Gauge,
        /// Its coefficient of variation.
        cv: f64,
    },
    /// Fewer than two runs, or no gauge that ran: no spread to judge by.
    Unknown,
}

/// The default threshold on the gauge's coefficient of variation: 10 %.
pub const NOISY_CV: f64 = 0.10;

/// The verdict from the floor's summary if there is one, else the baseline's.
pub fn noise(floor: Option<&Summary>, baseline: Option<&Summary>, threshold: f64) -> Noise {
    let (gauge, s) = match (floor, baseline) {
        (Some(f), _) => (Gauge::Floor, f),
        (None, Some(b)) => (Gauge::Baseline, b),
        (None, None) => return Noise::Unknown,
    };
    if s.n < 2 {
        return Noise::Unknown;
    }
    let cv = s.cv();
    if cv > threshold {
        Noise::Noisy { gauge, cv }
    } else {
        Noise::Quiet { gauge, cv }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn paired_overheads_cancel_a_drift_that_the_means_keep() {
        // The machine slows down over the sweep; `of` is 2 % slower than `base` in every turn.
        let base = [100.0, 150.0, 200.0, 250.0, 300.0];
        let of: Vec<f64> = base.iter().map(|b| b * 1.02).collect();
        let p = paired(&of, &base).unwrap();
        assert_eq!(p.n, 5);
        assert!(close(p.median, 2.0));
        assert!(close(p.quartiles.0, 2.0) && close(p.quartiles.1, 2.0));
        // One turn where `of` was 20 % slower moves the median not at all.
        let mut spiked = of.clone();
        spiked[1] = 150.0 * 1.2;
        let p = paired(&spiked, &base).unwrap();
        assert!(close(p.median, 2.0));
        assert!(close(p.quartiles.1, 2.0));
        // Unequal lengths pair as far as both go; no pair or a zero base says nothing.
        assert_eq!(paired(&of[..3], &base).unwrap().n, 3);
        assert_eq!(paired(&[], &base), None);
        assert_eq!(paired(&[1.0], &[0.0]), None);
    }

    #[test]
    fn mean_sd_median_range() {
        let s = summarize(&[3.0, 1.0, 2.0, 4.0]).unwrap();
        assert_eq!((s.n, s.min, s.max), (4, 1.0, 4.0));
        assert!(close(s.mean, 2.5));
        assert!(close(s.median, 2.5));
        // Sample σ: √(((1.5² + 0.5²) · 2) / 3).
        assert!(close(s.sd, (5.0f64 / 3.0).sqrt()));
        assert!(s.outliers.is_empty());
        let one = summarize(&[7.0]).unwrap();
        assert_eq!((one.sd, one.median, one.cv()), (0.0, 7.0, 0.0));
        assert_eq!(summarize(&[]), None);
        assert!(close(summarize(&[1.0, 5.0, 3.0]).unwrap().median, 3.0));
    }

    #[test]
    fn outliers_beyond_tukeys_fences() {
        let s = summarize(&[10.0, 11.0, 10.5, 10.2, 95.0, 10.8]).unwrap();
        assert_eq!(s.outliers, [4]);
        let s = summarize(&[10.0, 11.0, 10.5, 10.2, 10.8]).unwrap();
        assert!(s.outliers.is_empty());
        // Three runs: no quartiles to speak of.
        assert!(summarize(&[1.0, 1.0, 90.0]).unwrap().outliers.is_empty());
    }

    #[test]
    fn ratio_propagates_both_relative_sds() {
        let base = summarize(&[9.0, 11.0]).unwrap(); // mean 10, σ √2
        let of = summarize(&[18.0, 22.0]).unwrap(); // mean 20, σ 2√2
        let r = ratio(&of, &base).unwrap();
        assert!(close(r.value, 2.0));
        let rel = 2f64.sqrt() / 10.0;
        assert!(close(r.sd, 2.0 * (2.0 * rel * rel).sqrt()));
        // Against itself: 1, and σ from both sides.
        assert!(close(ratio(&base, &base).unwrap().value, 1.0));
        let steady = summarize(&[5.0, 5.0]).unwrap();
        assert_eq!(
            ratio(&steady, &steady),
            Some(Ratio {
                value: 1.0,
                sd: 0.0
            })
        );
        assert_eq!(ratio(&steady, &summarize(&[0.0]).unwrap()), None);
    }

    #[test]
    fn noise_gauged_by_the_floor_else_the_baseline() {
        let quiet = summarize(&[10.0, 10.2, 9.9]).unwrap();
        let noisy = summarize(&[7.5, 96.5, 20.0]).unwrap();
        assert!(matches!(
            noise(Some(&noisy), Some(&quiet), NOISY_CV),
            Noise::Noisy { gauge: Gauge::Floor, cv } if cv > 1.0
        ));
        assert!(matches!(
            noise(None, Some(&quiet), NOISY_CV),
            Noise::Quiet {
                gauge: Gauge::Baseline,
                ..
            }
        ));
        assert_eq!(
            noise(None, Some(&summarize(&[3.0]).unwrap()), NOISY_CV),
            Noise::Unknown
        );
        assert_eq!(noise(None, None, NOISY_CV), Noise::Unknown);
    }
}
