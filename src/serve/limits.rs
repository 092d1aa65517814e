//! The limits that keep `berth serve` answering on a network: each is a flag of `berth serve`
//! with the default below (README, "`berth serve`").

use std::net::IpAddr;

use super::*;

/// Connection, request and authentication limits of `berth serve`.
#[derive(Debug, Clone)]
pub struct Limits {
    /// `--header-read-timeout`: from the first byte of a request to its last header line; also
    /// bounds a TLS handshake and the wait for a new connection's first request.
    pub header_read_timeout: Duration,
    /// `--keepalive-timeout`: how long a connection may wait for its next request.
    pub keepalive_timeout: Duration,
    /// `--write-timeout`: how long a response may wait for a client that does not read.
    pub write_timeout: Duration,
    /// `--min-body-rate`: a request body arriving slower than this many bytes per second over
    /// [`Limits::body_rate_window`] (counting only the time spent waiting for the client) is
    /// dropped; 0 turns the check off.
    pub min_body_rate: u64,
    /// `--body-rate-window`: the window of `--min-body-rate`.
    pub body_rate_window: Duration,
    /// `--max-connections`: open connections; `None` for a quarter of the descriptor limit.
    pub max_connections: Option<usize>,
    /// `--push-slot-timeout`: how long a push waits for one of `--max-concurrent-pushes`
    /// slots before it gets 503 with `Retry-After`.
    pub push_slot_timeout: Duration,
    /// `--max-concurrent-fetches`: `git upload-pack` processes at once (waiting as pushes do).
    pub max_concurrent_fetches: usize,
    /// `--max-command-bytes`: bytes of commands and push options in one push (at most
    /// `berth.maxRequestBytes` of the repository).
    pub max_command_bytes: u64,
    /// `--max-concurrent-auth`: argon2 verifications at once (each takes ~19 MiB).
    pub max_concurrent_auth: usize,
    /// How long a request waits for a verification slot before it gets 503.
    pub auth_wait: Duration,
    /// `--auth-cache-ttl`: how long a verified user/password pair is trusted without a new
    /// verification; 0 turns the cache off.
    pub auth_cache_ttl: Duration,
    /// `--auth-max-failures`: failed logins per client address (IPv6 by its /64) within
    /// [`Limits::auth_failure_window`] before its further attempts get 429; a user with as
    /// many failures from anywhere is under attack, and an address that failed for them waits
    /// too (never one that has not failed); 0 turns it off.
    pub auth_max_failures: u32,
    /// `--auth-failure-window`: the window of `--auth-max-failures`.
    pub auth_failure_window: Duration,
    /// `--max-connections-per-address`: open connections from one address (an IPv4 address or
    /// an IPv6 /64); `None` for half of `--max-connections`, `Some(0)` for no cap.
    pub max_connections_per_address: Option<usize>,
    /// `--max-pushes-per-address`: push slots one address may hold (or wait for) at once;
    /// `None` for half of `--max-concurrent-pushes`, `Some(0)` for no cap.
    pub max_pushes_per_address: Option<usize>,
    /// `--max-fetches-per-address`: fetch slots one address may hold at once; `None` for half
    /// of `--max-concurrent-fetches`, `Some(0)` for no cap.
    pub max_fetches_per_address: Option<usize>,
    /// `--min-send-rate`: a response read by its client slower than this many bytes per second
    /// over [`Limits::send_rate_window`] (counting only the time spent waiting for the client)
    /// is dropped, with its connection; 0 turns the check off.
    pub min_send_rate: u64,
    /// `--send-rate-window`: the window of `--min-send-rate`.
    pub send_rate_window: Duration,
    /// `--max-body-time`: how long a request body may take in all (a push slot is held while
    /// it arrives); zero for no limit.
    pub max_body_time: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            header_read_timeout: Duration::from_secs(10),
            keepalive_timeout: Duration::from_secs(60),
            write_timeout: Duration::from_secs(60),
            min_body_rate: 1024,
            body_rate_window: Duration::from_secs(30),
            max_connections: None,
            push_slot_timeout: Duration::from_secs(60),
            max_concurrent_fetches: 32,
            max_command_bytes: 64 << 20,
            max_concurrent_auth: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(2),
            auth_wait: Duration::from_secs(2),
            auth_cache_ttl: Duration::from_secs(60),
            auth_max_failures: 10,
            auth_failure_window: Duration::from_secs(60),
            max_connections_per_address: None,
            max_pushes_per_address: None,
            max_fetches_per_address: None,
            min_send_rate: 1024,
            send_rate_window: Duration::from_secs(30),
            // 2 GiB at 150 KB/s.
            max_body_time: Duration::from_secs(4 * 3600),
        }
    }
}

/// An address range of `--trusted-proxy`: `ADDR` or `ADDR/PREFIX`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

impl Cidr {
    pub(super) fn parse(s: &str) -> Option<Cidr> {
        let (a, p) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let addr: IpAddr = a.trim().parse().ok()?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match p {
            Some(p) => p.trim().parse::<u8>().ok().filter(|p| *p <= max)?,
            None => max,
        };
        Some(Cidr { addr, prefix })
    }

    pub(super) fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
            v4 => v4,
        };
        match (self.addr, ip) {
            (IpAddr::V4(a), IpAddr::V4(b)) => {
                let mask = u32::MAX.checked_shl(32 - self.prefix as u32).unwrap_or(0);
                u32::from(a) & mask == u32::from(b) & mask
            }
            (IpAddr::V6(a), IpAddr::V6(b)) => {
                let mask = u128::MAX.checked_shl(128 - self.prefix as u32).unwrap_or(0);
                u128::from(a) & mask == u128::from(b) & mask
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidrs() {
        let c = Cidr::parse("10.1.0.0/16").unwrap();
        assert!(c.contains("10.1.200.3".parse().unwrap()));
        assert!(!c.contains("10.2.0.1".parse().unwrap()));
        assert!(c.contains("::ffff:10.1.0.9".parse().unwrap()));
        let one = Cidr::parse("127.0.0.1").unwrap();
        assert!(one.contains("127.0.0.1".parse().unwrap()));
        assert!(!one.contains("127.0.0.2".parse().unwrap()));
        assert!(
            Cidr::parse("0.0.0.0/0")
                .unwrap()
                .contains("8.8.8.8".parse().unwrap())
        );
        assert!(
            Cidr::parse("fd00::/8")
                .unwrap()
                .contains("fd12::1".parse().unwrap())
        );
        assert!(Cidr::parse("10.0.0.0/33").is_none());
        assert!(Cidr::parse("nonsense").is_none());
    }
}
