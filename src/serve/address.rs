//! A client address as every per-address count of the server sees it ([`AddrGroup`]): the
//! connection and slot caps (`per_address.rs`), failed logins (`logins.rs`) and the fair queue of
//! password checks (`fair.rs`).

use std::net::IpAddr;

/// An IPv4 address (also an IPv4-mapped IPv6 one) by itself, an IPv6 address by its /64: the
/// prefix one host or one site gets and can rotate addresses within.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum AddrGroup {
    V4(u32),
    /// The upper 64 bits.
    V6Prefix(u64),
}

impl AddrGroup {
    pub(super) fn of(ip: IpAddr) -> AddrGroup {
        match ip {
            IpAddr::V4(v4) => AddrGroup::V4(u32::from(v4)),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => AddrGroup::V4(u32::from(v4)),
                None => AddrGroup::V6Prefix((u128::from(v6) >> 64) as u64),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups() {
        let g = |s: &str| AddrGroup::of(s.parse().unwrap());
        assert_eq!(g("10.0.0.1"), AddrGroup::V4(0x0a00_0001));
        assert_eq!(g("::ffff:10.0.0.1"), g("10.0.0.1"));
        assert_eq!(g("2001:db8:1:2::1"), g("2001:db8:1:2:ffff::9"));
        assert_ne!(g("2001:db8:1:2::1"), g("2001:db8:1:3::1"));
    }
}
