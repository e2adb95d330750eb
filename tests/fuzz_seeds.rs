//! Replays the fuzz targets' inputs without AFL: every seed (`fuzz/seeds/<target>/`) and every
//! regression input (`fuzz/regressions/<target>/`) goes through the same check function the
//! AFL binary runs (`fuzz/src/lib.rs`, included here), and so do the seeds the encoders make now.

#[path = "../fuzz/src/lib.rs"]
mod fuzz;

use std::path::Path;

fn replay(folder: &str) -> usize {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz")
        .join(folder);
    let mut n = 0;
    for (name, check) in fuzz::TARGETS {
        let dir = root.join(name);
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries {
            let path = e.expect("directory entry").path();
            let data = std::fs::read(&path).expect("readable input");
            check(&data);
            n += 1;
        }
    }
    n
}

#[test]
fn committed_seeds_pass_their_checks() {
    let seeds = replay("seeds");
    let made = fuzz::seeds().len();
    assert!(
        seeds >= made,
        "{seeds} seed files, the encoders make {made}: run gen_seeds"
    );
    for (name, _) in fuzz::TARGETS {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fuzz/seeds")
            .join(name);
        assert!(
            dir.read_dir().is_ok_and(|mut d| d.next().is_some()),
            "no seeds for {name}"
        );
    }
}

#[test]
fn regression_inputs_pass_their_checks() {
    // Inputs that once crashed a target (none of them may fail again).
    replay("regressions");
}

#[test]
fn fresh_seeds_match_the_committed_ones() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds");
    for (target, name, bytes) in fuzz::seeds() {
        fuzz::target(target).expect("seed of a known target")(&bytes);
        let committed = std::fs::read(root.join(target).join(&name))
            .unwrap_or_else(|e| panic!("fuzz/seeds/{target}/{name}: {e} (run gen_seeds)"));
        assert_eq!(
            committed, bytes,
            "fuzz/seeds/{target}/{name} is stale: run gen_seeds"
        );
    }
}

#[test]
fn recorded_sessions_replay_to_their_last_file() {
    // The file_session seeds are a real sender's script: replayed, each commits its files, so
    // the fuzzer starts from whole sessions, not from the first message.
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds/file_session");
    let mut seeds = 0;
    for e in std::fs::read_dir(&dir).expect("file_session seeds") {
        let path = e.expect("entry").path();
        let committed = fuzz::replay_session(&std::fs::read(&path).expect("seed"));
        assert!(committed > 0, "{}: nothing committed", path.display());
        seeds += 1;
    }
    assert!(seeds >= 3, "{seeds} seeds");
    // Recorded afresh, they replay whole too (session_seeds asserts it of each).
    assert!(fuzz::session_seeds().len() >= 3);
}
