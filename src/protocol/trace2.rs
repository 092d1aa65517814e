//! A minimal writer for git's trace2 event stream (`GIT_TRACE2_EVENT`), for the few events
//! receive-pack is expected to log (`transfer/client-sid`), and git's trace2 session id, which
//! `transfer.advertiseSID` puts in the `session-id` capability.

use std::io::Write;
use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

/// git's trace2 session id: `<UTC time>-H<8 hex of SHA-1(hostname)>-P<pid hex>`, prefixed by
/// `GIT_TRACE2_PARENT_SID` and `/` when a parent git process set it.
pub fn session_id() -> &'static str {
    static SID: OnceLock<String> = OnceLock::new();
    SID.get_or_init(|| {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_owned())
            .unwrap_or_default();
        let host = if host.is_empty() {
            "Localhost".to_owned()
        } else {
            let mut hasher = gix_hash::hasher(gix_hash::Kind::Sha1);
            hasher.update(host.as_bytes());
            match hasher.try_finalize() {
                Ok(id) => format!("H{}", &id.to_hex().to_string()[..8]),
                Err(_) => "Localhost".to_owned(),
            }
        };
        let own = format!("{}-{host}-P{:08x}", utc_now(), std::process::id());
        match std::env::var("GIT_TRACE2_PARENT_SID") {
            Ok(parent) if !parent.is_empty() => format!("{parent}/{own}"),
            _ => own,
        }
    })
}

/// `YYYYMMDDTHHMMSS.ffffffZ`
fn utc_now() -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let secs = now.as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}{month:02}{day:02}T{:02}{:02}{:02}.{:06}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        now.subsec_micros()
    )
}

/// Log a `data` event, as git's `trace2_data_string(category, NULL, key, value)`, when
/// `GIT_TRACE2_EVENT` names a file (an absolute path). Other targets are not supported.
pub fn data(category: &str, key: &str, value: &str) {
    let Ok(target) = std::env::var("GIT_TRACE2_EVENT") else {
        return;
    };
    if !target.starts_with('/') {
        return;
    }
    let esc = |s: &str| s.replace('\\', "\\\\").replace('"', "\\\"");
    let line = format!(
        "{{\"event\":\"data\",\"sid\":\"{}\",\"thread\":\"main\",\"time\":\"{}\",\"category\":\"{}\",\"key\":\"{}\",\"value\":\"{}\"}}\n",
        esc(session_id()),
        utc_now(),
        esc(category),
        esc(key),
        esc(value)
    );
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(&target)
    {
        let _ = f.write_all(line.as_bytes());
    }
}
