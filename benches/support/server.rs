//! The servers the load benches start: a `berth serve` process (its address read from its
//! `listening on` line), killed when dropped; free loopback ports; waiting for a port.

use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running server, stopped (SIGKILL) when dropped.
pub struct Server {
    pub child: Child,
    /// `host:port`.
    pub addr: String,
    /// The path the repositories are under (`""` for berth, `/git` for lighttpd).
    pub prefix: &'static str,
}

impl Server {
    /// `http://<addr><prefix>`: the URL of the server's repository directory.
    pub fn url(&self) -> String {
        format!("http://{}{}", self.addr, self.prefix)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Spawn `cmd` (a `berth serve`; its stderr goes to `log`) and wait for its `listening on
/// http://…` line.
pub fn spawn_berth(mut cmd: Command, log: &Path) -> Server {
    let log = std::fs::File::create(log).unwrap();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    let addr = loop {
        line.clear();
        if std::io::BufRead::read_line(&mut out, &mut line).unwrap_or(0) == 0 {
            let _ = child.kill();
            let _ = child.wait();
            panic!("berth serve did not start: {cmd:?}");
        }
        if let Some(a) = line
            .trim()
            .strip_prefix("berth serve: listening on http://")
            .and_then(|a| a.strip_suffix('/'))
        {
            break a.to_owned();
        }
    };
    Server {
        child,
        addr,
        prefix: "",
    }
}

/// Wait until `port` on loopback accepts connections (up to 30 s); exit 2 if `child` exits
/// first or it never does.
pub fn wait_port(what: &str, port: u16, child: &mut Child) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Ok(Some(status)) = child.try_wait() {
            eprintln!("{what} exited ({status}) before listening on port {port}");
            std::process::exit(2);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            eprintln!("{what} did not listen on port {port} within 30 s");
            std::process::exit(2);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
