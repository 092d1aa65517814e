//! Criterion benchmarks of the request and the report: reading a 10,000-command update request,
//! and building the report-status-v2 report of 10,000 refs (9,900 `ok`, 100 `ng`).

use criterion::{Criterion, criterion_group, criterion_main};

fn request_bytes(n: usize) -> Vec<u8> {
    let zero = "0".repeat(40);
    let id = "1".repeat(40);
    let mut v = Vec::new();
    for i in 0..n {
        let line = if i == 0 {
            format!(
                "{zero} {id} refs/heads/b/{i:07}\0 report-status-v2 side-band-64k quiet object-format=sha1"
            )
        } else {
            format!("{zero} {id} refs/heads/b/{i:07}")
        };
        v.extend(format!("{:04x}{line}", line.len() + 4).into_bytes());
    }
    v.extend(b"0000");
    v
}

fn bench(c: &mut Criterion) {
    let input = request_bytes(10_000);
    let limits = berth::protocol::request::Limits {
        atomic: true,
        push_options: true,
        max_commands: 1_000_000,
        max_push_options: 10,
        max_bytes: 1 << 30,
        object_format: gix_hash::Kind::Sha1,
    };
    c.bench_function("parse 10k commands", |b| {
        b.iter(|| {
            let mut r = berth::protocol::pktline::Reader::new(&input[..]);
            berth::protocol::request::read(&mut r, &limits).unwrap()
        })
    });
    let names: Vec<String> = (0..10_000)
        .map(|i| format!("refs/heads/b/{i:07}"))
        .collect();
    use berth::protocol::report::{Reason, Status};
    let (ok, ng) = (Status::Updated, Status::Rejected(Reason::NonFastForward));
    c.bench_function("report 10k refs", |b| {
        b.iter(|| {
            let entries = names
                .iter()
                .enumerate()
                .map(|(i, n)| berth::protocol::report::Entry {
                    name: n.as_str().into(),
                    status: if i % 100 == 99 { &ng } else { &ok },
                });
            let mut out = Vec::with_capacity(400_000);
            berth::protocol::report::write(
                &mut out,
                berth::protocol::report::Kind::V2,
                None,
                entries,
            )
            .unwrap();
            out
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
