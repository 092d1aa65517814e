//! Which ssh connections are served: at most `--ssh-max-connections` in all and
//! `--ssh-max-connections-per-address` from one client address (`per_address.rs`). At either
//! cap, the connection that has waited longest without authenticating (in that scope) is cut
//! off to make room, so that connections that never authenticate cannot fill the server; only
//! when every connection in scope has authenticated is a newcomer refused.

use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::super::per_address::{self, AddrGroup, AddrPermit, Cap, PerAddress, Scope};

/// How long a newcomer waits for a connection it evicted to close.
const EVICTION_WAIT: Duration = Duration::from_millis(500);

/// Why a connection was refused at accept.
#[derive(Debug, thiserror::Error)]
pub(super) enum Refused {
    #[error("too many connections")]
    Server,
    #[error("too many connections from the address")]
    Address,
}

/// A connection as the caps see it.
struct Entry {
    key: AddrGroup,
    since: Instant,
    /// Set once the connection has authenticated (then it is never evicted).
    authed: Arc<AtomicBool>,
    /// A handle on its socket, to cut it off.
    socket: Option<Arc<std::net::TcpStream>>,
}

#[derive(Default)]
struct Table {
    next: u64,
    entries: std::collections::HashMap<u64, Entry>,
}

/// The connection caps of the ssh side.
pub(super) struct Admission {
    connections: Arc<Semaphore>,
    per_address: Arc<PerAddress>,
    table: Mutex<Table>,
}

/// A connection's places, given back when dropped.
pub(super) struct Admitted {
    admission: Arc<Admission>,
    id: u64,
    _global: OwnedSemaphorePermit,
    _address: AddrPermit,
}

impl Admitted {
    /// The connection's socket (cut off when it is evicted) and its authenticated flag.
    pub(super) fn watch(&self, socket: Arc<std::net::TcpStream>, authed: Arc<AtomicBool>) {
        let mut t = self.admission.lock();
        if let Some(e) = t.entries.get_mut(&self.id) {
            e.socket = Some(socket);
            e.authed = authed;
        }
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.admission.lock().entries.remove(&self.id);
    }
}

impl Admission {
    pub(super) fn new(max: usize, per_address: Option<usize>) -> Arc<Admission> {
        let max = max.max(1);
        Arc::new(Admission {
            connections: Arc::new(Semaphore::new(max)),
            per_address: PerAddress::new(Cap::from_flag(per_address, max), Vec::new()),
            table: Mutex::new(Table::default()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Cut off the connection in `scope` that has waited longest without authenticating.
    fn evict(&self, scope: Scope) -> bool {
        let mut t = self.lock();
        let candidates = t.entries.iter().filter_map(|(id, e)| {
            (!e.authed.load(Ordering::SeqCst) && e.socket.is_some())
                .then_some((*id, e.key, e.since))
        });
        let Some(id) = per_address::victim(candidates, scope) else {
            return false;
        };
        if let Some(Entry {
            socket: Some(s), ..
        }) = t.entries.remove(&id)
        {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        true
    }

    /// Places for a new connection from `ip`, evicting an unauthenticated one if need be.
    pub(super) async fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<Admitted, Refused> {
        let key = AddrGroup::of(ip);
        let address = match self.per_address.try_acquire(ip) {
            Ok(p) => p,
            Err(_) if self.evict(Scope::Address(key)) => {
                match tokio::time::timeout(EVICTION_WAIT, self.per_address.acquire(ip)).await {
                    Ok(Ok(p)) => p,
                    _ => return Err(Refused::Address),
                }
            }
            Err(_) => return Err(Refused::Address),
        };
        let global = match self.connections.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(_) if self.evict(Scope::Any) => {
                match tokio::time::timeout(EVICTION_WAIT, self.connections.clone().acquire_owned())
                    .await
                {
                    Ok(Ok(p)) => p,
                    _ => return Err(Refused::Server),
                }
            }
            Err(_) => return Err(Refused::Server),
        };
        let mut t = self.lock();
        t.next += 1;
        let id = t.next;
        t.entries.insert(
            id,
            Entry {
                key,
                since: Instant::now(),
                authed: Arc::new(AtomicBool::new(false)),
                socket: None,
            },
        );
        drop(t);
        Ok(Admitted {
            admission: self.clone(),
            id,
            _global: global,
            _address: address,
        })
    }
}
