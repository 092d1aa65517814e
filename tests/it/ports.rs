//! Loopback ports for servers started on a port known up front ([`free_ports`]), shared by the
//! integration tests (`mod ports` of `main.rs`) and the benches (`benches/support`, which
//! include this file by its path): below the kernel's ephemeral range, so that no outgoing
//! connection takes one between its choice and the server's bind.

use std::sync::atomic::{AtomicU64, Ordering};

/// `n` TCP ports on 127.0.0.1 that nothing listens on, for servers a test starts on a port it
/// must know up front (a cluster node's advertised URL, etcd's members). Taken below the
/// kernel's ephemeral range (`net.ipv4.ip_local_port_range`): a port the kernel picked for
/// `bind(0)` and the test released could be taken by any outgoing connection of the tests
/// running beside it before the server bound it (a node then failed to start: "Address
/// already in use"); below that range no connection takes one. Each port is handed out once
/// per test process, from an offset its pid picks, and only if it can be bound now.
pub fn free_ports(n: usize) -> Vec<u16> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    const FLOOR: u64 = 10_000;
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u64>().ok())
        .unwrap_or(32_768);
    if low < FLOOR + 1_000 {
        // No room below the range: the kernel's choice, as before.
        let listeners: Vec<_> = (0..n)
            .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
            .collect();
        return listeners
            .iter()
            .map(|l| l.local_addr().unwrap().port())
            .collect();
    }
    let span = low - FLOOR;
    let start = u64::from(std::process::id()).wrapping_mul(7_919) % span;
    let mut ports = Vec::with_capacity(n);
    for _ in 0..span {
        if ports.len() == n {
            break;
        }
        let port = FLOOR + (start + NEXT.fetch_add(1, Ordering::Relaxed)) % span;
        let port = u16::try_from(port).expect("below the ephemeral range");
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            ports.push(port);
        }
    }
    assert_eq!(ports.len(), n, "no free port below {low}");
    ports
}
