//! Device tests of [`Endpoint::send_shared_list`]: SENDs of one shared source posted as lists
//! (one doorbell each) within the peer's credits and the send queue, every message delivered
//! intact and in order, the credit accounting left consistent for ordinary messages after them,
//! and a refused list leaving the endpoint usable. They need rxe0 (198.18.0.1), so they are
//! `#[ignore]`d on the host; ci/test.sh runs them in the guest.

use std::thread;
use std::time::Duration;

use rdmaxfer::verbs::{LocalBuf, SharedList, WaitMode};
use rdmaxfer::xfer::endpoint::{Endpoint, EndpointOptions, Listener};
use rdmaxfer::Error;

use crate::common::{self, addr, need_rxe0, pattern};

const T: Duration = Duration::from_secs(10);
const LEN: usize = 4096;

/// A connected (server, client) pair of endpoints over RDMA CM on a port of its own, with
/// `recv_depth` receives a side.
fn endpoints(recv_depth: u32, send_depth: u32, wait: WaitMode) -> (Endpoint, Endpoint) {
    let port = common::port();
    let opts = EndpointOptions::default()
        .msg_size(LEN)
        .recv_depth(recv_depth)
        .send_depth(send_depth)
        .wait(wait)
        .timeout(T);
    let mut l = Listener::bind(addr(port), &opts).unwrap();
    let s = thread::spawn(move || l.accept(Some(T)).unwrap());
    let c = Endpoint::connect_cm(addr(port), &opts).unwrap();
    (s.join().unwrap(), c)
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn shared_source_lists_stay_within_credits_and_every_message_arrives() {
    need_rxe0();
    const N: usize = 300;
    const PEER_DEPTH: u32 = 3;
    for wait in [WaitMode::Poll, WaitMode::Event] {
        // Fewer receives at the server (3) than send-queue slots at the client (8): the lists
        // are cut by credits, and credits come back only in credit messages.
        let (mut s, mut c) = endpoints(PEER_DEPTH, 8, wait);
        let server = thread::spawn(move || {
            let want = pattern(LEN, 3);
            let mut lens = Vec::with_capacity(N);
            for i in 0..N {
                let (len, same) = s
                    .recv_with(|m| (m.data.len(), m.data == &want[..m.data.len()]))
                    .unwrap_or_else(|e| panic!("recv {i}: {e}"));
                assert!(same, "message {i}: wrong contents");
                lens.push(len);
            }
            s.send(b"all here").unwrap();
            assert_eq!(s.recv().unwrap(), b"bye");
            lens
        });
        let mut src = LocalBuf::new(c.pd(), LEN).unwrap();
        src.copy_from_slice(&pattern(LEN, 3));
        let src = src.freeze();
        let mut b = SharedList::with_capacity(16);
        let mut lens = Vec::with_capacity(N);
        let mut longest = 0;
        for list in 0.. {
            if lens.len() == N {
                break;
            }
            let len = LEN - list % 5; // one length per list, another for the next
            let want = (N - lens.len()).min(16);
            let before = c.credits();
            let more = lens.len() + want < N;
            let k = c
                .send_shared_list(&src, len, want, 2, more, &mut b)
                .unwrap_or_else(|e| panic!("list {list}: {e}"));
            let cap = if before > 0 { before } else { PEER_DEPTH };
            assert!(
                (1..=want.min(cap as usize)).contains(&k),
                "list {list}: posted {k} of {want} with {before} credits"
            );
            assert!(c.credits() <= PEER_DEPTH, "credits {}", c.credits());
            assert!(b.is_empty(), "the scratch list is empty after a post");
            lens.extend(std::iter::repeat_n(len, k));
            longest = longest.max(k);
        }
        assert!(longest > 1, "some list carried more than one message");
        c.flush().unwrap();
        assert_eq!(c.recv().unwrap(), b"all here");
        c.send(b"bye").unwrap();
        c.flush().unwrap();
        assert_eq!(
            server.join().unwrap(),
            lens,
            "every message, in order, at its length"
        );
        assert!(c.credits() <= PEER_DEPTH, "credits {}", c.credits());
    }
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn a_refused_list_posts_nothing_and_leaves_the_endpoint_usable() {
    need_rxe0();
    let (mut s, mut c) = endpoints(4, 4, WaitMode::Poll);
    let big = LocalBuf::new(c.pd(), 2 * LEN).unwrap().freeze();
    let mut b = SharedList::with_capacity(4);
    let credits = c.credits();
    match c.send_shared_list(&big, LEN + 1, 2, 1, false, &mut b) {
        Err(Error::InvalidArgument(why)) => assert!(why.contains("exceeds"), "{why}"),
        other => panic!("a message over the peer's size must be refused: {other:?}"),
    }
    assert_eq!(c.credits(), credits, "a refused list spends no credit");
    let small = LocalBuf::new(c.pd(), 16).unwrap().freeze();
    match c.send_shared_list(&small, 17, 1, 1, false, &mut b) {
        Err(Error::InvalidArgument(why)) => assert!(why.contains("source"), "{why}"),
        other => panic!("a message longer than its source must be refused: {other:?}"),
    }
    let k = c.send_shared_list(&big, LEN, 2, 1, false, &mut b).unwrap();
    assert_eq!(k, 2);
    c.flush().unwrap();
    for _ in 0..k {
        assert_eq!(s.recv().unwrap(), vec![0u8; LEN]);
    }
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn lists_wait_for_signal_every_slots_and_stay_long() {
    need_rxe0();
    const N: usize = 3000;
    const EVERY: u32 = 8;
    const WANT: usize = 32;
    for wait in [WaitMode::Poll, WaitMode::Event] {
        // 30 send-queue slots (28 + 2), not a multiple of EVERY, and credits to spare: once the
        // queue is full, each list must wait for EVERY free slots rather than post into each
        // slot as it frees (lists of 1-3 with their signals scattered).
        let (mut s, mut c) = endpoints(256, 28, wait);
        let server = thread::spawn(move || {
            for i in 0..N {
                s.recv_with(|m| assert_eq!(m.data.len(), 64, "message {i}"))
                    .unwrap_or_else(|e| panic!("recv {i}: {e}"));
            }
            s.send(b"all here").unwrap();
        });
        let src = LocalBuf::new(c.pd(), 64).unwrap().freeze();
        let mut b = SharedList::with_capacity(WANT);
        let (mut sent, mut short, mut lists) = (0, Vec::new(), 0);
        while sent < N {
            let want = (N - sent).min(WANT);
            let credits = c.credits() as usize;
            let k = c
                .send_shared_list(&src, 64, want, EVERY, sent + want < N, &mut b)
                .unwrap_or_else(|e| panic!("list {lists}: {e}"));
            assert!((1..=want).contains(&k), "list {lists}: {k} of {want}");
            // Credits only grow while it waits: with EVERY of them, only slots can cut a list.
            if k < want.min(EVERY as usize) && credits >= EVERY as usize {
                short.push((lists, k));
            }
            sent += k;
            lists += 1;
        }
        c.flush().unwrap();
        assert_eq!(c.recv().unwrap(), b"all here");
        server.join().unwrap();
        assert!(
            short.is_empty(),
            "{wait:?}: {} of {lists} lists shorter than {EVERY} with credits to spare: {:?}",
            short.len(),
            &short[..short.len().min(10)]
        );
        let mean = N as f64 / lists as f64;
        assert!(
            mean >= f64::from(EVERY),
            "{wait:?}: {mean:.1} messages per list"
        );
    }
}
