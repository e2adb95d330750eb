//! Device tests of the async API (`--features tokio`; need rxe0 at 198.18.0.1; run inside the
//! guest by ci/test.sh): sixteen concurrent ping-pong clients against one async server on a
//! current-thread runtime, and futures dropped mid-transfer (a recv, an RDMA WRITE) without
//! the buffer being reused early and without leaked QPs, CQs or MRs.

use std::future::Future;
use std::pin::{pin, Pin};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use rdmaxfer::aio::{AsyncEndpoint, AsyncListener};
use rdmaxfer::verbs::{ExposedRegion, LocalBuf, RemoteAccess, RemoteRegion};
use rdmaxfer::xfer::endpoint::EndpointOptions;

use crate::common::{self, addr, need_rxe0, our_resources, pseudo_random, tid};

/// Bounds every test (a hang fails instead of blocking the suite); not a pass criterion.
const LIMIT: Duration = Duration::from_secs(300);

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread runtime")
}

/// QPs, CQs and MRs of this process (every resource here is made on this test's thread).
fn counts() -> [usize; 3] {
    let t = [tid()];
    ["qp", "cq", "mr"].map(|k| our_resources(k, &t).len())
}

const CLIENTS: usize = 16;
const ROUNDS: usize = 20;

/// Client `c`'s message of round `r`: its own bytes, so a reply meant for another client (or
/// another round) cannot pass.
fn message(c: usize, r: usize) -> Vec<u8> {
    let mut m = format!("client {c} round {r} ").into_bytes();
    m.extend(pseudo_random(100 + c * 7 + r, (c * 1000 + r) as u64 + 1));
    m
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn sixteen_async_clients_ping_pong_against_one_current_thread_server() {
    need_rxe0();
    let opts = EndpointOptions::default()
        .msg_size(512)
        .recv_depth(4)
        .send_depth(2);
    let port = common::port();
    runtime().block_on(async {
        let mut l = AsyncListener::bind(addr(port), &opts).expect("bind");
        // The server: one task per connection on this one thread; each echoes until "bye".
        let server = tokio::spawn(async move {
            let mut conns = Vec::new();
            for _ in 0..CLIENTS {
                let p = l.take().await.expect("take");
                conns.push(tokio::spawn(async move {
                    let mut ep = p.finish().await.expect("finish");
                    let mut echoed = 0usize;
                    loop {
                        let m = ep.recv().await.expect("server recv");
                        ep.send(&m).await.expect("server send");
                        if m == b"bye" {
                            break;
                        }
                        echoed += 1;
                    }
                    ep.close().await.expect("server close");
                    echoed
                }));
            }
            let mut total = 0;
            for c in conns {
                total += c.await.expect("server task");
            }
            total
        });
        // The clients: all connected before any starts (so all 16 are served at once).
        let barrier = Arc::new(tokio::sync::Barrier::new(CLIENTS));
        let mut clients = Vec::new();
        for c in 0..CLIENTS {
            let (opts, barrier) = (opts.clone(), barrier.clone());
            clients.push(tokio::spawn(async move {
                let mut ep = AsyncEndpoint::connect(addr(port), &opts)
                    .await
                    .unwrap_or_else(|e| panic!("client {c} connect: {e}"));
                barrier.wait().await;
                for r in 0..ROUNDS {
                    let m = message(c, r);
                    ep.send(&m).await.expect("client send");
                    let back = ep.recv().await.expect("client recv");
                    assert_eq!(back, m, "client {c} round {r}: wrong echo");
                }
                ep.send(b"bye").await.expect("send bye");
                assert_eq!(ep.recv().await.expect("recv bye"), b"bye");
                ep.close().await.expect("client close");
                ROUNDS
            }));
        }
        let mut verified = 0;
        for c in clients {
            verified += c.await.expect("client task");
        }
        let echoed = tokio::time::timeout(LIMIT, server)
            .await
            .expect("server done in time")
            .expect("server task");
        assert_eq!(verified, CLIENTS * ROUNDS);
        assert_eq!(echoed, CLIENTS * ROUNDS);
    });
}

/// One poll of `f`: true if it is still pending (then dropped by the caller).
async fn poll_once<F: Future>(mut f: Pin<&mut F>) -> bool {
    std::future::poll_fn(move |cx| Poll::Ready(f.as_mut().poll(cx).is_pending())).await
}

const REGION: usize = 8 << 20;
const CANARY_SEED: u64 = 0xc0ffee;

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn futures_dropped_mid_transfer_neither_lose_data_nor_free_buffers_early_nor_leak() {
    need_rxe0();
    let before = counts();
    let opts = EndpointOptions::default().msg_size(256).recv_depth(4);
    let canary = pseudo_random(REGION, CANARY_SEED);
    let port = common::port();
    runtime().block_on(async {
        let mut l = AsyncListener::bind(addr(port), &opts).expect("bind");
        let canary2 = canary.clone();
        let server = tokio::spawn(async move {
            let mut ep = l.accept().await.expect("accept");
            let region = ExposedRegion::new(ep.get_ref().pd(), REGION, RemoteAccess::ReadWrite)
                .expect("expose");
            ep.send(&region.descriptor().encode())
                .await
                .expect("send descriptor");
            // 1. A recv the client dropped before anything was sent: "go" then this must arrive.
            assert_eq!(ep.recv().await.expect("recv go"), b"go");
            ep.send(b"first").await.expect("send first");
            // 2. The client's SEND "written" comes after its dropped RDMA WRITE (RC order):
            // the whole canary must be in the region, not what the client wrote later.
            assert_eq!(ep.recv().await.expect("recv written"), b"written");
            let got = region.to_vec();
            let verdict: &[u8] = if got == canary2 {
                b"intact"
            } else {
                b"corrupt"
            };
            ep.send(verdict).await.expect("send verdict");
            assert_eq!(ep.recv().await.expect("recv bye"), b"bye");
            ep.close().await.expect("server close");
            drop(region);
            got == canary2
        });

        let mut ep = AsyncEndpoint::connect(addr(port), &opts)
            .await
            .expect("connect");
        let open = counts();
        assert!(
            open.iter().zip(before).all(|(o, b)| *o > b),
            "the leak check must see this test's QPs, CQs and MRs ({before:?} -> {open:?})"
        );
        let remote = RemoteRegion::decode(&ep.recv().await.expect("descriptor")).expect("decode");
        // 1. A recv future dropped while waiting: nothing can have come (the server waits for
        // "go"), and the message sent after it is not lost.
        {
            let r = pin!(ep.recv());
            assert!(
                poll_once(r).await,
                "nothing was sent yet: the recv must be pending"
            );
        }
        ep.send(b"go").await.expect("send go");
        assert_eq!(ep.recv().await.expect("recv first"), b"first");
        // 2. An RDMA WRITE future dropped after its post: the buffer must stay with the queue.
        // Once in a while the write completes within its first poll (it was then not dropped
        // in flight, and wrote the same bytes): try again, a few times.
        let mut pending = false;
        for _ in 0..5 {
            let mut buf = LocalBuf::new(ep.get_ref().pd(), REGION).expect("register");
            buf.copy_from_slice(&canary);
            let w = pin!(ep.write(buf, 0, &remote, 0, REGION as u64));
            pending = poll_once(w).await;
            if pending {
                break;
            }
        }
        assert!(
            pending,
            "an 8 MiB RDMA WRITE must still be in flight right after its post (5 tries)"
        );
        // Memory freed early would likely come back here: fill new buffers with another pattern.
        let mut decoys = Vec::new();
        for _ in 0..4 {
            let mut d = LocalBuf::new(ep.get_ref().pd(), REGION).expect("decoy");
            d.fill(0xee);
            decoys.push(d);
        }
        ep.send(b"written").await.expect("send written");
        assert_eq!(ep.recv().await.expect("verdict"), b"intact");
        // The next one-sided operation discards the abandoned one's completion and works.
        let head = ep
            .read_to_vec(&remote, 0, 4096)
            .await
            .expect("read after drop");
        assert_eq!(head, canary[..4096]);
        ep.write_from(&remote, 0, b"after")
            .await
            .expect("write after drop");
        ep.send(b"bye").await.expect("send bye");
        ep.close().await.expect("client close");
        drop(decoys);
        let intact = tokio::time::timeout(LIMIT, server)
            .await
            .expect("server done in time")
            .expect("server task");
        assert!(intact);
    });
    assert_eq!(
        counts(),
        before,
        "qp/cq/mr counts of this process must be back to where they were"
    );
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn async_file_send_and_receive_on_one_runtime_thread() {
    need_rxe0();
    use rdmaxfer::xfer::file::source;
    use rdmaxfer::xfer::file::{ReceiverOptions, SenderOptions};
    let src = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let data = pseudo_random(3 << 20, 42);
    std::fs::write(src.path().join("a.bin"), &data).unwrap();
    std::fs::write(src.path().join("b.txt"), b"small").unwrap();
    let base = EndpointOptions::default();
    let ropts = ReceiverOptions::new(out.path());
    let sopts = SenderOptions::default().chunk(1 << 20);
    let port = common::port();
    runtime().block_on(async {
        let mut l = AsyncListener::bind(addr(port), &ropts.endpoint_options(&base)).expect("bind");
        let receiver = tokio::spawn(async move {
            let ep = l.accept().await.expect("accept");
            // Each file's verdict, heard as it is recorded.
            let (tx, heard) = std::sync::mpsc::channel();
            let (ep, report) = ep
                .receive_files_with(ropts, move |p| {
                    if let rdmaxfer::xfer::file::Progress::FileDone(f) = p {
                        let _ = tx.send(f.name.clone());
                    }
                })
                .await
                .expect("receive");
            ep.close().await.expect("receiver close");
            let mut heard: Vec<String> = heard.try_iter().collect();
            heard.sort();
            assert_eq!(heard, ["a.bin", "b.txt"]);
            report
        });
        let entries =
            source::walk(&[src.path().join("a.bin"), src.path().join("b.txt")]).expect("walk");
        let ep = AsyncEndpoint::connect(addr(port), &sopts.endpoint_options(&base))
            .await
            .expect("connect");
        let (ep, sent) = ep.send_files(entries, sopts).await.expect("send");
        ep.close().await.expect("sender close");
        let got = tokio::time::timeout(LIMIT, receiver)
            .await
            .expect("receiver done in time")
            .expect("receiver task");
        assert_eq!((sent.file_count(), sent.failures()), (2, 0));
        assert_eq!((got.file_count(), got.failures()), (2, 0));
    });
    assert_eq!(std::fs::read(out.path().join("a.bin")).unwrap(), data);
    assert_eq!(std::fs::read(out.path().join("b.txt")).unwrap(), b"small");
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn async_file_send_over_two_streams_to_rdmaxfer_recv_tells_its_progress() {
    need_rxe0();
    use rdmaxfer::xfer::file::{source, Progress, SenderOptions};
    let (_tmp, src, out) = common::dirs();
    let big = pseudo_random(8 << 20, 43);
    std::fs::write(src.join("big.bin"), &big).unwrap();
    std::fs::write(src.join("small.txt"), b"small").unwrap();
    let port = common::port();
    let mut r = common::recv(port, &out, &[]);
    let sopts = SenderOptions::default().chunk(1 << 20).streams(2);
    let epo = sopts.endpoint_options(&EndpointOptions::default());
    let entries = source::walk(&[src.join("big.bin"), src.join("small.txt")]).expect("walk");
    // What progress said: streams granted, the last byte count, the verdicts.
    #[derive(Default)]
    struct Heard {
        granted: Option<u16>,
        bytes: u64,
        done: Vec<(String, String)>,
    }
    let heard = Arc::new(std::sync::Mutex::new(Heard::default()));
    let h = heard.clone();
    let sent = runtime().block_on(async {
        let ep = AsyncEndpoint::connect(addr(port), &epo)
            .await
            .expect("connect");
        let (ep, sent) = ep
            .send_files_streams(addr(port), &epo, entries, sopts, move |p| {
                let mut h = h.lock().unwrap();
                match p {
                    Progress::Streams { granted, .. } => h.granted = Some(granted),
                    Progress::Bytes { total_done, .. } => h.bytes = h.bytes.max(total_done),
                    Progress::FileDone(f) => h.done.push((f.name.clone(), f.result.clone())),
                    _ => {}
                }
            })
            .await
            .expect("send");
        ep.close().await.expect("sender close");
        sent
    });
    assert_eq!((sent.file_count(), sent.failures()), (2, 0));
    assert!(sent.lost.is_empty(), "{:?}", sent.lost);
    let h = heard.lock().unwrap();
    assert_eq!(h.granted, Some(2), "the receiver granted both streams");
    assert_eq!(h.bytes, (8 << 20) + 5);
    let mut done = h.done.clone();
    done.sort();
    assert_eq!(
        done,
        [
            ("big.bin".to_string(), "ok".to_string()),
            ("small.txt".to_string(), "ok".to_string())
        ]
    );
    assert!(std::fs::read(out.join("big.bin")).unwrap() == big);
    assert_eq!(std::fs::read(out.join("small.txt")).unwrap(), b"small");
    r.kill();
    drop(r.finish(LIMIT));
}

/// Message `i` of the side named `who`: its number, then bytes of its own.
fn numbered(who: u8, i: u32) -> Vec<u8> {
    let mut m = vec![who];
    m.extend(i.to_be_bytes());
    m.extend(pseudo_random(
        24 + (i % 40) as usize,
        u64::from(i) * 2 + u64::from(who),
    ));
    m
}

/// Sends `n` numbered messages on `tx` while receiving `n` of the peer's on `rx`, in two tasks;
/// every message received is checked; returns both halves.
async fn both_ways(
    mut tx: rdmaxfer::aio::SendHalf,
    mut rx: rdmaxfer::aio::RecvHalf,
    (me, peer): (u8, u8),
    n: u32,
) -> (rdmaxfer::aio::SendHalf, rdmaxfer::aio::RecvHalf) {
    let sending = tokio::spawn(async move {
        for i in 0..n {
            tx.send(&numbered(me, i)).await.expect("send");
        }
        tx.flush().await.expect("flush");
        tx
    });
    let receiving = tokio::spawn(async move {
        for i in 0..n {
            let m = rx.recv().await.expect("recv");
            assert!(m == numbered(peer, i), "message {i} of {peer}: {m:?}");
        }
        rx
    });
    let (tx, rx) = tokio::join!(sending, receiving);
    (tx.expect("sending task"), rx.expect("receiving task"))
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn a_split_endpoint_sends_and_receives_ten_thousand_messages_each_way_from_two_tasks() {
    need_rxe0();
    const N: u32 = 10_000;
    let opts = EndpointOptions::default()
        .msg_size(128)
        .recv_depth(16)
        .send_depth(8);
    let port = common::port();
    runtime().block_on(async {
        let mut l = AsyncListener::bind(addr(port), &opts).expect("bind");
        let server = tokio::spawn(async move {
            let ep = l
                .take()
                .await
                .expect("take")
                .finish()
                .await
                .expect("finish");
            let (tx, rx) = ep.split();
            let (tx, rx) = both_ways(tx, rx, (b's', b'c'), N).await;
            tx.reunite(rx).expect("the halves of one endpoint")
        });
        let ep = AsyncEndpoint::connect(addr(port), &opts)
            .await
            .expect("connect");
        let (tx, rx) = ep.split();
        let (tx, rx) = both_ways(tx, rx, (b'c', b's'), N).await;
        let ep = tx.reunite(rx).expect("the halves of one endpoint");
        let served = tokio::time::timeout(LIMIT, server)
            .await
            .expect("server done in time")
            .expect("server task");
        ep.close().await.expect("client close");
        served.close().await.expect("server close");
    });
}

/// Bytes in the files under `dir` (a transfer's temporary files among them).
fn bytes_in(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .sum()
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn an_async_receive_dropped_mid_file_commits_nothing_and_frees_its_device_resources() {
    need_rxe0();
    use rdmaxfer::xfer::file::ReceiverOptions;
    let src = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let file = src.path().join("big.bin");
    std::fs::write(&file, pseudo_random(64 << 20, 5)).unwrap();
    let ropts = ReceiverOptions::new(out.path());
    let port = common::port();
    let before = counts();
    let rt = runtime();
    let sender = rt.block_on(async {
        let opts = ropts.endpoint_options(&EndpointOptions::default());
        let mut l = AsyncListener::bind(addr(port), &opts).expect("bind");
        // The tool sends, slowed down (8 MiB/s) so that the file is half-way for seconds.
        let to = format!("{}:{port}", common::IP);
        let args = ["send", file.to_str().unwrap(), &to, "--bwlimit", "8M"];
        let sender = common::spawn("send", &args);
        let ep = l.accept().await.expect("accept");
        let mut receiving = pin!(ep.receive_files(ropts));
        // Driven until 4 MiB of the file are in its temporary file, then dropped.
        while bytes_in(out.path()) < 4 << 20 {
            tokio::select! {
                r = &mut receiving => panic!("the transfer ended first: {:?}", r.err()),
                () = tokio::time::sleep(Duration::from_millis(20)) => {}
            }
        }
        sender
    });
    // The transfer ended with its future (dropped at the end of the block above).
    drop(rt);
    let d = sender.finish(LIMIT);
    d.failed("send to a receiver whose future was dropped");
    let left: Vec<_> = std::fs::read_dir(out.path()).unwrap().flatten().collect();
    assert!(left.is_empty(), "nothing committed, nothing left: {left:?}");
    assert_eq!(counts(), before, "the receiver's QP, CQ and MRs are gone");
}
