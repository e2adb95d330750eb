//! Host micro-benchmark of the file verification (no RDMA): the real per-chunk hashing
//! (`digest::Chunks::hash` on `digest::par_for`, as the sender's readers and the receiver's
//! writers run it) over an in-memory file, for each algorithm at 1, 2 and all threads.
//!
//! `cargo run --release --example verify_bench -- [MiB] [chunk KiB] [rounds]`
//! (defaults 256 MiB, 1024 KiB chunks, 3 rounds; the best round is printed). `ci/bench-verify.sh`.
//! Columns: wall-clock rate, rate per CPU-second of the process (what one core hashes, less
//! sensitive to other load on the machine), and the wall-clock speed-up over one thread.

use std::time::Instant;

use rdmaxfer::xfer::file::digest::{self, Algo, Chunks, Layout};

fn arg(i: usize, default: u64) -> u64 {
    std::env::args()
        .nth(i)
        .map(|s| s.parse().expect("a number"))
        .unwrap_or(default)
}

/// CPU seconds used by this process so far (all threads, including ended ones).
fn cpu_seconds() -> f64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
}

fn main() {
    let mib = arg(1, 256);
    let chunk = arg(2, 1024) << 10;
    let rounds = arg(3, 3).max(1);
    let size = mib << 20;
    let data: Vec<u8> = (0..size)
        .map(|i| (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8)
        .collect();
    let all = digest::threads(usize::MAX);
    let mut counts = vec![1, 2, all];
    counts.dedup();
    counts.sort_unstable();
    counts.dedup();
    println!(
        "verify_bench: {mib} MiB in {} KiB chunks, best of {rounds}, {all} hardware threads",
        chunk >> 10
    );
    println!(
        "{:<8} {:>7} {:>10} {:>12} {:>8}",
        "algo", "threads", "MiB/s", "MiB/cpu-s", "speedup"
    );
    for algo in Algo::ALL {
        let mut one = 0.0;
        let mut reference = None;
        for &t in &counts {
            let mut best = f64::MAX;
            let mut best_cpu = f64::MAX;
            for _ in 0..rounds {
                let layout = Layout::new(algo, chunk, size).expect("chunk > 0");
                let chunks = Chunks::new(layout);
                let start = Instant::now();
                let cpu0 = cpu_seconds();
                digest::par_for(0..layout.chunks(), t, |i| {
                    let (off, len) = layout.range(i).expect("in range");
                    chunks.hash(i, &data[off as usize..][..len]).map(|_| ())
                })
                .expect("hashing");
                let d = chunks.finish().expect("all chunks");
                best = best.min(start.elapsed().as_secs_f64());
                best_cpu = best_cpu.min(cpu_seconds() - cpu0);
                // Every thread count gives the same file digest.
                assert_eq!(*reference.get_or_insert(d), d, "{algo} at {t} threads");
            }
            let rate = mib as f64 / best;
            if t == 1 {
                one = rate;
            }
            println!(
                "{:<8} {:>7} {:>10.0} {:>12.0} {:>7.2}x",
                algo.as_str(),
                t,
                rate,
                mib as f64 / best_cpu,
                rate / one
            );
        }
    }
}
