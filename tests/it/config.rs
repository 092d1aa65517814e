//! `berth serve --config FILE` with the built binary: the file's settings are used, a flag on
//! the command line overrides its key, a wrong key stops the server with the key and its line,
//! `--print-config` shows the result, and the example `docs/berth.toml` stays valid. (That every
//! flag is a key is a unit test beside the code, `src/cli/config.rs`: it walks clap's definition.)

use crate::common;
use crate::serve::{git, ok};
use common::World;

fn berth_serve(w: &World, args: &[&str]) -> std::process::Output {
    w.cmd(common::berth(), ".")
        .arg("serve")
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn serve_takes_its_settings_from_the_file_and_flags_override_them() {
    let w = World::new();
    let root = w.path("from-file");
    // listen is overridden below; a server that used the file's would fail to bind port 1.
    let file = format!(
        "# berth serve's settings\nroot = {:?}\nlisten = \"127.0.0.1:1\"\nauto-init = true\nhook-env = [\"A\", \"B\"]\n",
        root.to_str().unwrap()
    );
    std::fs::write(w.path("berth.toml"), file).unwrap();
    let printed = ok(berth_serve(
        &w,
        &[
            "--config",
            "berth.toml",
            "--listen",
            "127.0.0.1:0",
            "--hook-env=C",
            "--print-config",
        ],
    ));
    assert!(
        printed.contains("\nlisten = \"127.0.0.1:0\"\n"),
        "{printed}"
    );
    assert!(printed.contains("\nauto-init = true\n"), "{printed}");
    assert!(printed.contains("\nhook-env = [\"C\"]\n"), "{printed}");
    assert!(
        printed.contains(&format!("\nroot = {:?}\n", root.to_str().unwrap())),
        "{printed}"
    );

    let mut cmd = w.cmd(common::berth(), ".");
    cmd.args(["serve", "--config", "berth.toml", "--listen", "127.0.0.1:0"]);
    let server = common::ServeProcess::spawn(cmd, |out| out.contains('\n'));
    let addr = server
        .stdout
        .trim()
        .strip_prefix("berth serve: listening on http://")
        .and_then(|a| a.strip_suffix('/'))
        .unwrap_or_else(|| panic!("{:?}\n{}", server.stdout, server.log()))
        .to_owned();
    w.git(".", &["init", "-q", "src"]);
    w.commit("src", "a", "1");
    ok(git(
        &w,
        "src",
        &[
            "push",
            &format!("http://{addr}/demo.git"),
            "HEAD:refs/heads/main",
        ],
    ));
    assert!(
        root.join("demo.git/refs").is_dir(),
        "not under the file's root"
    );
}

#[test]
fn a_wrong_key_stops_the_server_naming_the_key_and_its_line() {
    let w = World::new();
    std::fs::write(
        w.path("berth.toml"),
        "root = \"r\"\n\n# typo below\nlisen = \"0.0.0.0:80\"\n",
    )
    .unwrap();
    let out = berth_serve(&w, &["--config", "berth.toml"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("berth.toml: line 4: unknown key `lisen`"),
        "{stderr}"
    );
    std::fs::write(w.path("berth.toml"), "max-concurrent-pushes = \"many\"\n").unwrap();
    let out = berth_serve(&w, &["--config", "berth.toml"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("berth.toml: line 1: `max-concurrent-pushes`: invalid value 'many'"),
        "{stderr}"
    );
}

#[test]
fn the_example_settings_file_is_valid() {
    let w = World::new();
    let example = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/berth.toml");
    let printed = ok(berth_serve(
        &w,
        &["--config", example.to_str().unwrap(), "--print-config"],
    ));
    assert!(printed.contains("\nlisten = "), "{printed}");
}
