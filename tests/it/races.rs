//! Races: many pushes at once to the same ref and to overlapping sets of refs, each a
//! compare-and-swap from the value every contender read at the start of the round. berth races
//! berth, `git receive-pack` and `git update-ref` on one repository; hand-made `--stateless-rpc`
//! requests make every contender send its command at the same moment. Whatever the interleaving:
//! at most one contender wins each ref (exactly one when they all race for a single ref), every
//! other gets a refusal (`ng <ref> <reason>`, or update-ref's failure), the ref ends at the
//! winner's value (no lost update), an atomic push wins all its refs or none, and the repository
//! stays `git fsck --strict` clean with no lock left behind.

use crate::common::{self, PACK_ONE_THREAD_MAIN, World, ZERO, pkt};

use std::collections::BTreeMap;
use std::sync::{Arc, Barrier};

/// A server `srv.git` whose refs `r0…r{n-1}` (half of them packed, half loose) and `main` are at
/// one base commit, with `candidates` further commits already in its object store (no ref), so
/// that `git update-ref` can race with pushes. Returns (base, candidates, empty pack).
fn setup(env: &World, refs: usize, candidates: usize) -> (String, Vec<String>, Vec<u8>) {
    env.git(".", &["init", "-q", "--bare", "srv.git"]);
    env.git(".", &["-C", "srv.git", "config", "receive.autogc", "false"]);
    env.git(".", &["init", "-q", "src"]);
    env.git(
        ".",
        &["-C", "src", "commit", "-q", "--allow-empty", "-m", "base"],
    );
    let base = env
        .git(".", &["-C", "src", "rev-parse", "HEAD"])
        .trim()
        .to_owned();
    let mut specs = vec!["main".to_owned()];
    specs.extend((0..refs / 2).map(|i| format!("main:refs/heads/r{i}")));
    let srv = env.path("srv.git");
    let mut args = vec!["-C", "src", "push", "-q", srv.to_str().unwrap()];
    args.extend(specs.iter().map(String::as_str));
    env.git(".", &args);
    env.git(".", &["-C", "srv.git", "pack-refs", "--all"]);
    let loose: Vec<String> = (refs / 2..refs)
        .map(|i| format!("main:refs/heads/r{i}"))
        .collect();
    let mut args = vec!["-C", "src", "push", "-q", srv.to_str().unwrap()];
    args.extend(loose.iter().map(String::as_str));
    env.git(".", &args);
    let mut ids = Vec::new();
    for i in 0..candidates {
        let id = env
            .git(
                ".",
                &[
                    "-C",
                    "src",
                    "commit-tree",
                    "-p",
                    &base,
                    "-m",
                    &format!("candidate {i}"),
                    &format!("{base}^{{tree}}"),
                ],
            )
            .trim()
            .to_owned();
        env.git(
            ".",
            &[
                "-C",
                "src",
                "push",
                "-q",
                srv.to_str().unwrap(),
                &format!("{id}:refs/tmp/c{i}"),
            ],
        );
        env.git(
            ".",
            &[
                "-C",
                "srv.git",
                "update-ref",
                "-d",
                &format!("refs/tmp/c{i}"),
            ],
        );
        ids.push(id);
    }
    let pack = env
        .cmd("git", ".")
        .args(["-C", "src", "pack-objects", "--stdout", "-q"])
        .output()
        .unwrap()
        .stdout;
    assert!(pack.starts_with(b"PACK"));
    (base, ids, pack)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Who {
    Berth,
    GitReceivePack,
    UpdateRef,
}

/// One contender: who, and the `(ref, old, new)` updates it tries as one push (or one
/// `update-ref --stdin` transaction, which is atomic).
struct Contender {
    who: Who,
    atomic: bool,
    updates: Vec<(String, String, String)>,
}

/// What a contender got per ref: `Ok(())` or the reason it was refused.
type Verdicts = BTreeMap<String, Result<(), String>>;

fn request(c: &Contender, pack: &[u8]) -> Vec<u8> {
    let mut caps = format!(
        "report-status quiet object-format={} agent=git/2.47.3",
        common::object_format_cap()
    );
    if c.atomic {
        caps.push_str(" atomic");
    }
    let mut req = Vec::new();
    for (i, (name, old, new)) in c.updates.iter().enumerate() {
        let line = if i == 0 {
            format!("{old} {new} {name}\0{caps}\n")
        } else {
            format!("{old} {new} {name}\n")
        };
        req.extend(pkt(&line));
    }
    req.extend_from_slice(b"0000");
    req.extend_from_slice(pack);
    req
}

fn contend(env: &World, c: &Contender, pack: &[u8], barrier: &Barrier) -> Verdicts {
    let srv = env.path("srv.git");
    let (cmd, input) = match c.who {
        Who::Berth | Who::GitReceivePack => {
            let mut cmd = if c.who == Who::Berth {
                env.cmd(env!("CARGO_BIN_EXE_berth"), ".")
            } else {
                let mut g = env.cmd("git", ".");
                g.arg("receive-pack");
                g
            };
            if c.who == Who::Berth {
                cmd.arg("receive-pack");
            }
            cmd.arg("--stateless-rpc").arg(&srv);
            (cmd, request(c, pack))
        }
        Who::UpdateRef => {
            let mut cmd = env.cmd("git", ".");
            cmd.arg("-C").arg(&srv).args(["update-ref", "--stdin"]);
            let mut input = String::from("start\n");
            for (name, old, new) in &c.updates {
                input.push_str(&format!("update {name} {new} {old}\n"));
            }
            input.push_str("commit\n");
            (cmd, input.into_bytes())
        }
    };
    barrier.wait();
    let out = common::run_with_stdin(cmd, &input);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let mut verdicts = Verdicts::new();
    if c.who == Who::UpdateRef {
        for (name, _, _) in &c.updates {
            let v = if out.status.success() {
                Ok(())
            } else {
                // git's wording, with the ids and the ref name left out.
                let line = stderr.lines().next().unwrap_or_default();
                Err(if line.contains("but expected") {
                    "cannot lock ref: is at <id> but expected <old>".to_owned()
                } else if line.ends_with("reference already exists") {
                    "cannot lock ref: reference already exists".to_owned()
                } else {
                    line.to_owned()
                })
            };
            verdicts.insert(name.clone(), v);
        }
        return verdicts;
    }
    assert!(
        stdout.contains("unpack ok\n"),
        "{:?}: {stdout}{stderr}",
        c.who
    );
    for (name, _, _) in &c.updates {
        let v = if stdout.contains(&format!("ok {name}\n")) {
            Ok(())
        } else {
            let prefix = format!("ng {name} ");
            let at = stdout
                .find(&prefix)
                .unwrap_or_else(|| panic!("{:?}: no verdict for {name}: {stdout}", c.who));
            let rest = &stdout[at + prefix.len()..];
            Err(rest[..rest.find('\n').unwrap()].to_owned())
        };
        verdicts.insert(name.clone(), v);
    }
    verdicts
}

/// Race `contenders` once; check the verdicts against the refs; return the refusal reasons.
fn race(
    env: &World,
    contenders: &[Contender],
    pack: &[u8],
    exactly_one: bool,
) -> BTreeMap<String, usize> {
    let before = env.ref_map("srv.git");
    let barrier = Arc::new(Barrier::new(contenders.len()));
    let results: Vec<Verdicts> = std::thread::scope(|s| {
        let handles: Vec<_> = contenders
            .iter()
            .map(|c| {
                let barrier = barrier.clone();
                s.spawn(move || contend(env, c, pack, &barrier))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let after = env.ref_map("srv.git");
    let mut reasons = BTreeMap::new();
    let mut names: Vec<&String> = contenders
        .iter()
        .flat_map(|c| c.updates.iter().map(|u| &u.0))
        .collect();
    names.sort();
    names.dedup();
    for name in names {
        let mut winners = Vec::new();
        for (c, v) in contenders.iter().zip(&results) {
            let Some(verdict) = v.get(name) else { continue };
            match verdict {
                Ok(()) => winners.push((c.who, c.updates.iter().find(|u| &u.0 == name).unwrap())),
                Err(reason) => *reasons.entry(format!("{:?}: {reason}", c.who)).or_default() += 1,
            }
        }
        let summary = || format!("{name}: {winners:?}\nresults: {results:#?}");
        assert!(winners.len() <= 1, "two winners for {}", summary());
        if exactly_one {
            assert_eq!(winners.len(), 1, "no winner for {}", summary());
        }
        match winners.first() {
            Some((_, (_, _, new))) => {
                let now = after.get(name).map_or(&*ZERO, String::as_str);
                assert_eq!(now, new, "lost update: {}", summary());
            }
            None => assert_eq!(after.get(name), before.get(name), "{}", summary()),
        }
    }
    // An atomic push (or update-ref transaction) wins all its refs or none.
    for (c, v) in contenders.iter().zip(&results) {
        if c.atomic || c.who == Who::UpdateRef {
            let won = v.values().filter(|r| r.is_ok()).count();
            assert!(
                won == 0 || won == v.len(),
                "{:?} atomic, won {won} of {}: {v:?}",
                c.who,
                v.len()
            );
        }
    }
    env.assert_clean("srv.git");
    reasons
}

fn who(i: usize) -> Who {
    match i % 4 {
        0 | 2 => Who::Berth,
        1 => Who::GitReceivePack,
        _ => Who::UpdateRef,
    }
}

#[test]
fn one_winner_per_compare_and_swap_on_one_ref() {
    let env = World::fixed_clock("berth-races-", PACK_ONE_THREAD_MAIN);
    let rounds = 16;
    let per_round = 8;
    let (_, ids, pack) = setup(&env, 2, rounds * per_round);
    let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
    for round in 0..rounds {
        // Alternate a packed ref, a loose ref and main; every contender expects what is there now.
        let name = ["refs/heads/r0", "refs/heads/r1", "refs/heads/main"][round % 3].to_owned();
        let old = env.ref_map("srv.git")[&name].clone();
        let contenders: Vec<Contender> = (0..per_round)
            .map(|i| Contender {
                who: if round % 2 == 0 { Who::Berth } else { who(i) },
                atomic: false,
                updates: vec![(
                    name.clone(),
                    old.clone(),
                    ids[round * per_round + i].clone(),
                )],
            })
            .collect();
        for (k, v) in race(&env, &contenders, &pack, true) {
            *reasons.entry(k).or_default() += v;
        }
    }
    // Creations of one new ref: one winner, the others find it exists.
    for round in 0..4 {
        let name = format!("refs/heads/new{round}");
        let contenders: Vec<Contender> = (0..per_round)
            .map(|i| Contender {
                who: who(i),
                atomic: false,
                updates: vec![(name.clone(), ZERO.to_owned(), ids[i].clone())],
            })
            .collect();
        for (k, v) in race(&env, &contenders, &pack, true) {
            *reasons.entry(k).or_default() += v;
        }
    }
    println!("one ref: refusals {reasons:#?}");
    // Every refusal is a compare-and-swap or lock failure, never anything else.
    for reason in reasons.keys() {
        let r = reason.split_once(": ").unwrap().1;
        assert!(
            [
                "incorrect old value provided",
                "reference already exists",
                "failed to update ref",
                "failed to update refs",
                "cannot lock ref: is at <id> but expected <old>",
                "cannot lock ref: reference already exists",
            ]
            .iter()
            .any(|ok| r.starts_with(ok)),
            "unexpected refusal {reason}"
        );
    }
}

#[test]
fn no_lost_update_on_overlapping_sets_of_refs() {
    let env = World::fixed_clock("berth-races-", PACK_ONE_THREAD_MAIN);
    let refs = 6;
    let contenders_per_round = 8;
    let rounds = 12;
    let (_, ids, pack) = setup(&env, refs, rounds * contenders_per_round);
    let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
    for round in 0..rounds {
        let now = env.ref_map("srv.git");
        let contenders: Vec<Contender> = (0..contenders_per_round)
            .map(|i| {
                // Windows of three refs, each shifted by one: every ref is in three sets.
                let updates = (0..3)
                    .map(|k| {
                        let name = format!("refs/heads/r{}", (i + k) % refs);
                        let old = now[&name].clone();
                        (name, old, ids[round * contenders_per_round + i].clone())
                    })
                    .collect();
                Contender {
                    who: who(i + round),
                    atomic: (i + round) % 3 == 0,
                    updates,
                }
            })
            .collect();
        for (k, v) in race(&env, &contenders, &pack, false) {
            *reasons.entry(k).or_default() += v;
        }
    }
    println!("overlapping sets: refusals {reasons:#?}");
}
