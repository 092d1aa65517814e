//! `berth --version`: the package version and, in a git checkout, the commit it was built from
//! (`0.1.0 (1a2b3c4d5e6f)`). Built from a tarball
//! without `.git`, or without git installed, it is the package version alone.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(std::env::var_os("CARGO_MANIFEST_DIR")?)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn main() {
    let version = std::env::var("CARGO_PKG_VERSION").unwrap_or_default();
    println!("cargo:rerun-if-changed=build.rs");
    let Some(commit) = git(&["rev-parse", "--short=12", "HEAD"]) else {
        println!("cargo:rustc-env=BERTH_VERSION={version}");
        return;
    };
    // Built again when HEAD moves: HEAD itself, the branch it names, packed-refs.
    let mut watched = vec!["HEAD".to_owned(), "packed-refs".to_owned()];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watched.push(branch);
    }
    for w in watched {
        // A path that does not exist would make cargo run this script on every build.
        if let Some(path) = git(&["rev-parse", "--path-format=absolute", "--git-path", &w])
            && std::path::Path::new(&path).exists()
        {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    // (No `-dirty`: the script runs again when HEAD moves, not on every edit.)
    println!("cargo:rustc-env=BERTH_VERSION={version} ({commit})");
}
