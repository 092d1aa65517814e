//! Minimum transfer rates, judged over windows of the time spent waiting for the client: a
//! transfer that moved fewer bytes than the rate asks in a window's worth of waiting is too
//! slow. Time the server itself spends (a slow `git upload-pack`, a hook) is not counted.
//! Pure; responses use it in `conn.rs` (`--min-send-rate`).

use std::time::Duration;

/// A minimum rate as configured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum MinRate {
    /// No minimum (`0`).
    Off,
    /// At least `bytes_per_sec` over every `window` of waiting.
    Min {
        bytes_per_sec: u64,
        window: Duration,
    },
}

impl MinRate {
    /// `rate` bytes per second over `window` (at least 100 ms); 0 turns it off.
    pub(super) fn new(rate: u64, window: Duration) -> MinRate {
        match rate {
            0 => MinRate::Off,
            r => MinRate::Min {
                bytes_per_sec: r,
                window: window.max(Duration::from_millis(100)),
            },
        }
    }
}

/// Bytes moved and time waited in the current window.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Window {
    bytes: u64,
    waited: Duration,
}

/// The judgement after some progress or waiting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Verdict {
    /// Fast enough so far: this much waiting is left before the window is judged.
    Open(Duration),
    /// The window is full of waiting and too few bytes came through it.
    TooSlow,
}

impl Window {
    /// Count `bytes` moved after `waited` of waiting, and judge the window when it is full (a
    /// window that passes starts the next one).
    pub(super) fn record(&mut self, rate: MinRate, bytes: u64, waited: Duration) -> Verdict {
        let MinRate::Min {
            bytes_per_sec,
            window,
        } = rate
        else {
            return Verdict::Open(Duration::MAX);
        };
        self.bytes = self.bytes.saturating_add(bytes);
        self.waited += waited;
        if self.waited < window {
            return Verdict::Open(window - self.waited);
        }
        let needed = (bytes_per_sec as f64 * window.as_secs_f64()) as u64;
        if self.bytes < needed {
            return Verdict::TooSlow;
        }
        *self = Window::default();
        Verdict::Open(window)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn off_never_judges() {
        let mut w = Window::default();
        assert_eq!(
            w.record(MinRate::new(0, S), 0, S * 1000),
            Verdict::Open(Duration::MAX)
        );
    }

    #[test]
    fn a_window_of_waiting_with_too_few_bytes_is_too_slow() {
        let rate = MinRate::new(100, S * 2);
        let mut w = Window::default();
        assert_eq!(w.record(rate, 50, S), Verdict::Open(S));
        assert_eq!(w.record(rate, 100, S), Verdict::TooSlow);
    }

    #[test]
    fn a_fast_window_starts_the_next_and_server_time_is_not_counted() {
        let rate = MinRate::new(100, S);
        let mut w = Window::default();
        // Bytes that went out without waiting (the client kept up) count, no time does.
        assert_eq!(w.record(rate, 1000, Duration::ZERO), Verdict::Open(S));
        assert_eq!(w.record(rate, 0, S), Verdict::Open(S));
        // The next window starts empty.
        assert_eq!(w.record(rate, 10, S / 2), Verdict::Open(S / 2));
        assert_eq!(w.record(rate, 10, S / 2), Verdict::TooSlow);
    }
}
