//! The kill campaign: a striped tree transfer whose sender or receiver is SIGKILLed at a
//! moment chosen by a seeded generator, then completed by a `--resume` run, again and again.
//! Each time the final tree is bit-identical to the source, nothing temporary is left, nothing
//! appears outside `--out`, and the resumed run sends again at most what can be in flight
//! (slots × chunk × streams, and small files in flight: at most all of them, a few hundred KB
//! here). `RDMAXFER_KILLS` (default 20) and `RDMAXFER_KILL_SEED` (default
//! 42) set the campaign; `ci/kill-campaign.sh COUNT SEED` runs a longer one.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::common::{self, entries, listing, need_rxe0, pseudo_random, recv, send, FILE_T as T};

/// splitmix64: the campaign's moments, reproducible from the seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name}={v}: not a number"))
        })
        .unwrap_or(default)
}

/// Bytes of file data under `dir` that are on disk (allocated, at most each file's length):
/// what the receiver had written when it stopped. The receiver may rename or remove entries
/// while this looks: those are passed over.
fn on_disk(dir: &Path) -> u64 {
    let Ok(list) = std::fs::read_dir(dir) else {
        return 0;
    };
    list.flatten()
        .filter_map(|e| {
            std::fs::symlink_metadata(e.path())
                .ok()
                .map(|m| (e.path(), m))
        })
        .map(|(p, m)| match m.is_dir() {
            true => on_disk(&p),
            false if m.is_file() => (m.blocks() * 512).min(m.len()),
            false => 0,
        })
        .sum()
}

/// The source: one file striped over the streams, one over a single stream, small files.
/// Returns the total bytes and those of the small files.
fn tree(src: &Path) -> (u64, u64) {
    let top = src.join("t");
    let mut total = 0;
    let mut put = |rel: &str, len: usize, seed: u64| {
        let p = top.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, pseudo_random(len, seed)).unwrap();
        total += len as u64;
    };
    let large = (12 << 20) + 12_345 + (3 << 20) + 7;
    put("big.bin", (12 << 20) + 12_345, 1);
    put("mid.bin", (3 << 20) + 7, 2);
    for i in 0..60 {
        put(
            &format!("small/d{}/f{i}", i % 6),
            1000 + i * 317,
            100 + i as u64,
        );
    }
    (total, total - large)
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn a_striped_tree_survives_kills_at_random_moments() {
    need_rxe0();
    let kills = env_or("RDMAXFER_KILLS", 20);
    let seed = env_or("RDMAXFER_KILL_SEED", 42);
    let mut rng = Rng(seed);
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    let (total, small) = tree(&src);
    let top = src.join("t");
    let out = tmp.path().join("out");
    let port = common::port();
    let (slots, chunk, streams) = (8u64, 256u64 << 10, 2u64);
    let in_flight = slots * chunk * streams + small;
    let (s_slots, s_chunk, s_streams) = (slots.to_string(), "256K", streams.to_string());
    let send_args = [
        "--resume",
        "--streams",
        &s_streams,
        "--chunk",
        s_chunk,
        "--slots",
        &s_slots,
    ];
    let recv_args = ["--resume", "--once", "--slots", &s_slots];
    eprintln!("kill campaign: {kills} kills, seed {seed}, {total} bytes, bound {in_flight}");
    let (mut done, mut tries, mut resent_max) = (0, 0, 0u64);
    while done < kills {
        tries += 1;
        assert!(
            tries <= kills * 3,
            "only {done} of {kills} kills landed in {tries} tries"
        );
        if out.exists() {
            std::fs::remove_dir_all(&out).unwrap();
        }
        std::fs::create_dir(&out).unwrap();
        let kill_receiver = rng.next() % 2 == 0;
        let target = 1 + rng.next() % (total - 1);
        let mut r = recv(port, &out, &recv_args);
        let mut s = send(port, &[&top], &send_args);
        // The moment: when the receiver has this many bytes on disk (or the end, if sooner).
        common::wait_until("the kill's moment", T, || {
            on_disk(&out) >= target || !s.running()
        });
        if !s.running() {
            // Finished before the moment: no kill this time.
            s.finish(T);
            r.finish(T);
            continue;
        }
        if kill_receiver {
            r.kill();
            r.finish(T);
            s.finish(T).failed("a send whose receiver was killed");
        } else {
            s.kill();
            s.finish(T);
            r.finish(T).failed("a receiver whose sender was killed");
        }
        done += 1;
        let kept = on_disk(&out);
        let r = recv(port, &out, &recv_args);
        let d = send(port, &[&top], &send_args).finish(T);
        d.ok("the resumed send");
        r.finish(T).ok("the resumed receiver");
        let moved = d.one_json()["bytes"].as_u64().unwrap();
        // What the resumed run sent beyond what was missing on disk.
        let resent = moved.saturating_sub(total - kept.min(total));
        resent_max = resent_max.max(resent);
        eprintln!(
            "kill {done}: {} at {target}, {kept} on disk, resumed run sent {moved}, {resent} again",
            if kill_receiver { "receiver" } else { "sender" }
        );
        assert!(
            resent <= in_flight,
            "kill {done} (seed {seed}): the resumed run sent {resent} bytes again, more than \
             the {in_flight} that can be in flight"
        );
        let got = out.join("t");
        for (rel, path, m) in entries(&top) {
            if m.is_file() {
                assert!(
                    std::fs::read(&path).unwrap() == std::fs::read(got.join(&rel)).unwrap(),
                    "kill {done} (seed {seed}): {rel} differs"
                );
            }
        }
        assert_eq!(
            listing(&got),
            listing(&top),
            "kill {done} (seed {seed}): entries"
        );
        let mut top_level: Vec<_> = std::fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        top_level.sort();
        assert_eq!(top_level, ["out", "src"], "nothing outside --out");
        assert_eq!(
            listing(&out).len(),
            listing(&top).len(),
            "no temporary file left"
        );
    }
    eprintln!("kill campaign: {done} kills in {tries} tries, most sent again {resent_max}");
}
