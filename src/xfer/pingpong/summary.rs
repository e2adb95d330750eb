//! A summary of latency samples: min, percentiles, mean, max.

use serde::Serialize;

/// min / p50 / mean / p99 / p99.9 / max, in microseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
#[non_exhaustive]
pub struct Summary {
    /// Smallest.
    pub min: f64,
    /// Median (nearest rank).
    pub p50: f64,
    /// Arithmetic mean.
    pub mean: f64,
    /// 99th percentile (nearest rank).
    pub p99: f64,
    /// 99.9th percentile (nearest rank).
    pub p999: f64,
    /// Largest.
    pub max: f64,
}

impl Summary {
    /// Summarises samples (any order); all zero when there are none.
    pub fn of(samples: &[f64]) -> Summary {
        if samples.is_empty() {
            return Summary::default();
        }
        let mut s = samples.to_vec();
        s.sort_by(f64::total_cmp);
        let rank = |q: f64| {
            let r = (q * s.len() as f64).ceil() as usize;
            s[r.clamp(1, s.len()) - 1]
        };
        Summary {
            min: s[0],
            p50: rank(0.5),
            mean: s.iter().sum::<f64>() / s.len() as f64,
            p99: rank(0.99),
            p999: rank(0.999),
            max: s[s.len() - 1],
        }
    }

    /// Every value halved (one-way latency from round trips).
    pub fn halved(&self) -> Summary {
        Summary {
            min: self.min / 2.0,
            p50: self.p50 / 2.0,
            mean: self.mean / 2.0,
            p99: self.p99 / 2.0,
            p999: self.p999 / 2.0,
            max: self.max / 2.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_percentiles() {
        let v: Vec<f64> = (1..=1000).map(f64::from).collect();
        let s = Summary::of(&v);
        assert_eq!(
            (s.min, s.p50, s.p99, s.p999, s.max),
            (1.0, 500.0, 990.0, 999.0, 1000.0)
        );
        assert!((s.mean - 500.5).abs() < 1e-9);
        assert_eq!(s.halved().p50, 250.0);
        assert_eq!(Summary::of(&[]), Summary::default());
        assert_eq!(Summary::of(&[3.0]).p999, 3.0);
    }
}
