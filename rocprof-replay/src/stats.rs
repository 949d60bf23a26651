//! Statistics over pass times: [`Summary`].
//!
//! ```
//! use rocprof_replay::stats::Summary;
//! use std::time::Duration;
//!
//! let times = [10, 12, 14].map(Duration::from_micros);
//! let s = Summary::of(&times).unwrap();
//! assert_eq!((s.n, s.min, s.median, s.max), (3, times[0], times[1], times[2]));
//! assert_eq!(s.stddev, Duration::from_micros(2)); // sample standard deviation
//! assert!((s.rse.unwrap() - 2.0 / 3f64.sqrt() / 12.0).abs() < 1e-12);
//! ```

use std::time::Duration;

/// Count, extremes, median, mean, spread and relative standard error of a set of times.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Summary {
    /// Number of samples (at least 1).
    pub n: usize,
    /// The shortest time.
    pub min: Duration,
    /// The median (the mean of the two middle values for an even count).
    pub median: Duration,
    /// The longest time.
    pub max: Duration,
    /// The mean.
    pub mean: Duration,
    /// Sample standard deviation (n - 1 in the denominator); zero for one sample.
    pub stddev: Duration,
    /// Relative standard error of the mean, `stddev / sqrt(n) / mean`; `None` with fewer than
    /// two samples, 0 when every sample is 0.
    pub rse: Option<f64>,
}

impl Summary {
    /// Summarizes `samples`; `None` when there are none.
    pub fn of(samples: &[Duration]) -> Option<Summary> {
        if samples.is_empty() {
            return None;
        }
        let mut sorted = samples.to_vec();
        sorted.sort_unstable();
        let n = sorted.len();
        let mid = n / 2;
        let median = if n % 2 == 1 {
            sorted[mid]
        } else {
            (sorted[mid - 1] + sorted[mid]) / 2
        };
        let nf = n as f64;
        let secs = |d: &Duration| d.as_secs_f64();
        let mean = sorted.iter().map(secs).sum::<f64>() / nf;
        let stddev = if n < 2 {
            0.0
        } else {
            let ss: f64 = sorted.iter().map(|d| (secs(d) - mean).powi(2)).sum();
            (ss / (nf - 1.0)).sqrt()
        };
        let rse = (n >= 2).then(|| {
            if mean > 0.0 {
                stddev / nf.sqrt() / mean
            } else {
                0.0
            }
        });
        Some(Summary {
            n,
            min: sorted[0],
            median,
            max: sorted[n - 1],
            mean: Duration::from_secs_f64(mean),
            stddev: Duration::from_secs_f64(stddev),
            rse,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn us(v: &[u64]) -> Vec<Duration> {
        v.iter().map(|&u| Duration::from_micros(u)).collect()
    }

    #[test]
    fn median_of_even_and_odd_counts() {
        assert_eq!(Summary::of(&[]), None);
        let odd = Summary::of(&us(&[30, 10, 20])).unwrap();
        assert_eq!(
            (odd.min, odd.median, odd.max),
            (us(&[10])[0], us(&[20])[0], us(&[30])[0])
        );
        let even = Summary::of(&us(&[40, 10, 20, 30])).unwrap();
        assert_eq!(even.median, Duration::from_micros(25));
    }

    #[test]
    fn spread_and_rse_match_hand_computation() {
        let one = Summary::of(&us(&[10])).unwrap();
        assert_eq!((one.n, one.stddev, one.rse), (1, Duration::ZERO, None));
        let s = Summary::of(&us(&[10, 12, 14])).unwrap();
        assert_eq!(s.mean, Duration::from_micros(12));
        assert_eq!(s.stddev, Duration::from_micros(2));
        let rse = s.rse.unwrap();
        assert!((rse - 2.0 / 3f64.sqrt() / 12.0).abs() < 1e-12, "{rse}");
        assert_eq!(Summary::of(&us(&[7, 7, 7])).unwrap().rse, Some(0.0));
        assert_eq!(Summary::of(&us(&[0, 0])).unwrap().rse, Some(0.0));
    }
}
