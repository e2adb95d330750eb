//! Device tests of async file transfer (`--features tokio`; need rxe0): the sessions run on the
//! caller's task, with no thread of tokio's blocking pool; per-file reports with a refused
//! file; a sender's future dropped mid-file commits nothing at the receiver.

use std::pin::pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rdmaxfer::aio::{AsyncEndpoint, AsyncListener};
use rdmaxfer::xfer::endpoint::EndpointOptions;
use rdmaxfer::xfer::file::{source, Progress, ReceiverOptions, SenderOptions, SessionReport};

use crate::common::{self, addr, need_rxe0, our_resources, pseudo_random, tid};

/// Bounds every test (a hang fails instead of blocking the suite); not a pass criterion.
const LIMIT: Duration = Duration::from_secs(300);

/// Each file's name and result, sorted.
fn results(r: &SessionReport) -> Vec<(String, String)> {
    let mut v: Vec<_> = r
        .files
        .iter()
        .map(|f| (f.name.clone(), f.result.clone()))
        .collect();
    v.sort();
    v
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn an_async_tree_transfer_uses_no_blocking_pool_and_reports_each_file_with_a_refused_one() {
    need_rxe0();
    let (_tmp, src, out) = common::dirs();
    let tree = src.join("t");
    std::fs::create_dir_all(tree.join("sub")).unwrap();
    let a = pseudo_random(600 << 10, 61);
    std::fs::write(tree.join("a.bin"), &a).unwrap();
    std::fs::write(tree.join("sub/b.txt"), b"bee").unwrap();
    std::fs::write(tree.join("sub/c.txt"), b"sea").unwrap();
    std::fs::write(tree.join("big.bin"), pseudo_random(2 << 20, 62)).unwrap();
    let mut ropts = ReceiverOptions::new(&out);
    ropts.max_size = Some(1 << 20);
    let sopts = SenderOptions::default().chunk(256 << 10);
    let base = EndpointOptions::default();
    let port = common::port();
    // One thread in the blocking pool, held by another task for the whole transfer: a session
    // that needed it would wait for it (past LIMIT).
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .max_blocking_threads(1)
        .build()
        .expect("a current-thread runtime");
    let (sent, got) = rt.block_on(async {
        let (held_tx, held) = tokio::sync::oneshot::channel();
        let (release, released) = std::sync::mpsc::channel::<()>();
        let holder = tokio::task::spawn_blocking(move || {
            held_tx.send(()).expect("the test waits");
            released.recv().expect("released at the end");
        });
        held.await.expect("the pool's thread is held");
        let mut l = AsyncListener::bind(addr(port), &ropts.endpoint_options(&base)).expect("bind");
        let receiver = tokio::spawn(async move {
            let ep = l.accept().await.expect("accept");
            ep.receive_files(ropts).await
        });
        let entries = source::walk(std::slice::from_ref(&tree)).expect("walk");
        let ep = AsyncEndpoint::connect(addr(port), &sopts.endpoint_options(&base))
            .await
            .expect("connect");
        let sent = tokio::time::timeout(LIMIT, ep.send_files(entries, sopts))
            .await
            .expect("sent in time");
        let got = tokio::time::timeout(LIMIT, receiver)
            .await
            .expect("received in time")
            .expect("receiver task");
        release.send(()).expect("the holder waits");
        holder.await.expect("holder");
        (sent, got)
    });
    // A refused file makes both sessions' results errors that carry their reports.
    let (sent, got) = (
        sent.expect_err("a file was refused"),
        got.expect_err("refused"),
    );
    assert!(
        matches!(sent.error, rdmaxfer::Error::Incomplete { .. }),
        "{}",
        sent.error
    );
    let ok = |n: &str| (n.to_string(), "ok".to_string());
    let want_sent = results(&sent.report);
    let refused = want_sent
        .iter()
        .find(|(n, _)| n == "t/big.bin")
        .expect("big.bin");
    assert_eq!(refused.1, "too large", "{want_sent:?}");
    for n in ["t/a.bin", "t/sub/b.txt", "t/sub/c.txt"] {
        assert!(want_sent.contains(&ok(n)), "{n}: {want_sent:?}");
    }
    assert_eq!(want_sent.len(), 4, "{want_sent:?}");
    assert_eq!(
        results(&got.report),
        want_sent,
        "both sides report each file alike"
    );
    let big = sent.report.files.iter().find(|f| f.name == "t/big.bin");
    let message = big.and_then(|f| f.message.clone()).unwrap_or_default();
    assert!(
        message.contains("exceeds the limit of 1048576"),
        "{message}"
    );
    assert_eq!(std::fs::read(out.join("t/a.bin")).unwrap(), a);
    assert_eq!(std::fs::read(out.join("t/sub/c.txt")).unwrap(), b"sea");
    assert!(!out.join("t/big.bin").exists());
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn an_async_send_dropped_mid_file_commits_nothing_and_frees_its_device_resources() {
    need_rxe0();
    let (_tmp, src, out) = common::dirs();
    let file = src.join("big.bin");
    std::fs::write(&file, pseudo_random(64 << 20, 63)).unwrap();
    let port = common::port();
    let mut r = common::recv(port, &out, &[]);
    // Slowed down (8 MiB/s) so that the file is half-way for seconds.
    let sopts = SenderOptions::default()
        .chunk(1 << 20)
        .streams(1)
        .bwlimit(Some(8 << 20));
    let epo = sopts.endpoint_options(&EndpointOptions::default());
    let t = [tid()];
    let counts = || ["qp", "cq", "mr"].map(|k| our_resources(k, &t).len());
    let before = counts();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread runtime");
    rt.block_on(async {
        let entries = source::walk(std::slice::from_ref(&file)).expect("walk");
        let ep = AsyncEndpoint::connect(addr(port), &epo)
            .await
            .expect("connect");
        let written = Arc::new(AtomicU64::new(0));
        let w = written.clone();
        let mut sending = pin!(ep.send_files_with(entries, sopts, move |p| {
            if let Progress::Bytes { total_done, .. } = p {
                w.store(total_done, Ordering::Relaxed);
            }
        }));
        // Driven until 4 MiB are written, then dropped (at the end of this block).
        while written.load(Ordering::Relaxed) < 4 << 20 {
            tokio::select! {
                r = &mut sending => panic!("the transfer ended first: {:?}", r.err()),
                () = tokio::time::sleep(Duration::from_millis(20)) => {}
            }
        }
    });
    assert_eq!(
        counts(),
        before,
        "the sender's QP, CQ and MRs are gone with its future"
    );
    // The receiver's session ends with the connection: its summary line says so.
    let line = r.wait_for("\"session\"", LIMIT);
    assert!(line.contains("error"), "{line}");
    let left: Vec<_> = std::fs::read_dir(&out).unwrap().flatten().collect();
    assert!(left.is_empty(), "nothing committed, nothing left: {left:?}");
    r.kill();
    drop(r.finish(LIMIT));
}
