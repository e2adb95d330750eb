//! The [`Endpoint`] itself: its state (field order is teardown order), accessors, close and
//! drop.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::cm::CmId;
use crate::error::{Error, Result};
use crate::verbs::{
    Completion, CompletionQueue, Context, ProtectionDomain, QueuePair, Retired, SleepLeft,
    SoloQueue,
};

use super::options::{LocalInfo, PeerInfo, RESERVED_WR_ID};

pub(super) const WR_DATA: u64 = RESERVED_WR_ID | 1;
pub(super) const WR_CREDIT: u64 = RESERVED_WR_ID | 2;
pub(super) const WR_RECV: u64 = RESERVED_WR_ID | 3;
/// The table entry of part of a shared list of our SENDs ([`Endpoint::send_shared_list`]): its
/// low 32 bits say how many SENDs it stands for (see [`sends_of`]).
pub(super) const WR_LIST: u64 = RESERVED_WR_ID | (1 << 40);

/// True for the `wr_id` of a shared list's entry ([`WR_LIST`]).
#[inline(always)]
pub(super) fn is_list(wr_id: u64) -> bool {
    wr_id & !0xffff_ffff == WR_LIST
}

/// How many of our own SENDs the completion (or retired entry) of `wr_id` stands for.
#[inline(always)]
pub(super) fn sends_of(wr_id: u64) -> u32 {
    if is_list(wr_id) {
        wr_id as u32
    } else {
        1
    }
}

/// A received message waiting for the application: its slot in the queue's receive ring, which
/// keeps the buffer and what came ([`SoloQueue::ring_done`]) until the slot is re-posted. Only
/// the slot number moves.
pub(super) type Ready = u32;

pub(super) enum Flow {
    /// `credits`: messages we may still send; `owed`: receives re-posted but not yet announced.
    Credits {
        credits: u32,
        owed: u32,
        threshold: u32,
        credit_msg_pending: bool,
        /// Receives re-posted together (one list post): see [`credit_flow`].
        batch: u32,
    },
    /// One outstanding message, one more per message taken from the peer.
    Implicit { credits: u32 },
}

/// Receives re-posted together at most (see [`credit_flow`]).
pub(super) const REPOST_BATCH: u32 = 16;

/// Credit flow with a peer that grants `peer_depth` credits, our own window `own_depth`
/// receives.
///
/// Taken messages' receives are re-posted `batch` at a time, one list post each. That cannot
/// stall both sides: a peer out of credits has used every receive we announced, so with nothing
/// left in flight or unread the whole window is either released (`< batch`) or re-posted and
/// owed (`< threshold`, else a credit message goes), which `batch <= own_depth - threshold`
/// rules out. A batch stays below the threshold: its credits then ride on the next message
/// (not on a credit message of their own), as a single re-post's do. The threshold is half our
/// own window: what we owe never exceeds it, so a threshold above it (half of a larger peer
/// window) would never send the credit message a stalled peer waits for; and at most two credit
/// messages (each at least half our window) are unread at the peer, as its two spare receives
/// allow. "Nothing unread" is the protocol's part: a side that waits for a credit while the
/// peer's messages lie unread can wait for a peer that waits for it (`send::pipe` takes its
/// answers while it waits to send).
pub(super) fn credit_flow(peer_depth: u32, own_depth: u32) -> Flow {
    let threshold = own_depth.div_ceil(2);
    let batch = own_depth
        .saturating_sub(threshold)
        .min(threshold.saturating_sub(1))
        .clamp(1, REPOST_BATCH);
    Flow::Credits {
        credits: peer_depth,
        owed: 0,
        threshold,
        credit_msg_pending: false,
        batch,
    }
}

/// A connected RC queue pair with its resources, receive ring and flow control.
pub struct Endpoint {
    // Field order is drop order: the queue goes first (its QP: ERR, destroy; then its CQ, whose
    // table frees the buffers posted on it), the CM id last.
    pub(super) q: SoloQueue,
    pub(super) ready: VecDeque<Ready>,
    pub(super) user_done: VecDeque<Completion>,
    /// The caller's unsignaled work requests that one of our own completions retired: handed to
    /// the caller with its next completion.
    pub(super) user_retired: Vec<Retired>,
    /// The receive ring slot taken by [`recv_deferred`](Endpoint::recv_deferred) and not
    /// re-posted yet, with its payload length: [`settle`](Endpoint::settle) re-posts it (and
    /// returns its credit), as does the next `recv_deferred`.
    pub(super) deferred: Option<(u32, u32)>,
    pub(super) pd: ProtectionDomain,
    pub(super) ctx: Context,
    pub(super) flow: Flow,
    /// Our own SENDs (data and credit) not completed (or retired) yet.
    pub(super) sends_posted: u32,
    /// Our SENDs posted unsignaled since our last signaled work request (see
    /// [`send_then`](Endpoint::send_then)): they complete only with a later signaled one. While
    /// `sends_posted` exceeds it, a signaled one is outstanding and its completion will come.
    pub(super) unsignaled_run: u32,
    /// Send-queue slots for our own SENDs.
    pub(super) own_sq: u32,
    pub(super) msg_size: usize,
    /// Receives we keep posted.
    pub(super) recv_depth: u32,
    pub(super) peer_msg_size: usize,
    pub(super) timeout: Duration,
    pub(super) failed: Option<String>,
    pub(super) disconnected: bool,
    pub(super) local: LocalInfo,
    pub(super) peer: PeerInfo,
    pub(super) cm: Option<CmId>,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("local", &self.local)
            .field("peer", &self.peer)
            .finish_non_exhaustive()
    }
}

/// A deadline that reads no clock for what arrives soon: reading it can cost microseconds
/// (HPET in an emulated guest), which would show in every round trip. An event-mode wait's
/// first sleep is timed by the kernel (`left` is decreased by the time slept); from the second
/// sleep on (or, busy-polling, after the first spin) the clock runs: `at`.
pub(super) struct Deadline {
    pub(super) timeout: Duration,
    /// What is left before the clock started (as the sleeps take it: see [`SleepLeft`]).
    pub(super) left: SleepLeft,
    /// The clock's deadline, once it runs (set when a sleep ends without the completion
    /// waited for).
    pub(super) at: Option<Instant>,
}

impl Deadline {
    #[inline(always)]
    pub(super) fn new(timeout: Duration) -> Deadline {
        Deadline {
            timeout,
            left: SleepLeft::new(timeout),
            at: None,
        }
    }

    /// The clock's deadline, started now (with what is left) if it has not been.
    pub(super) fn at(&mut self) -> Instant {
        let left = self.left.duration();
        *self.at.get_or_insert_with(|| Instant::now() + left)
    }
}

impl Endpoint {
    /// The queue pair (attributes, state). It is the endpoint's single-owner queue's: its own
    /// posts refuse; post the caller's work requests with [`post`](Self::post).
    pub fn qp(&self) -> &QueuePair {
        self.q.qp()
    }

    /// The completion queue (send and receive; its wait mode). It is single-owner: its own polls
    /// refuse; the caller's completions come from [`poll_user`](Self::poll_user).
    pub fn cq(&self) -> &CompletionQueue {
        self.q.cq()
    }

    /// The protection domain (to register buffers and exposed regions for this connection).
    pub fn pd(&self) -> &ProtectionDomain {
        &self.pd
    }

    /// The device context.
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// The largest message [`send`](Self::send) takes: ours and the peer's limit.
    pub fn max_msg_size(&self) -> usize {
        self.peer_msg_size
    }

    /// The size of our receive buffers.
    pub fn msg_size(&self) -> usize {
        self.msg_size
    }

    /// What this side uses.
    pub fn local(&self) -> &LocalInfo {
        &self.local
    }

    /// What was negotiated about the peer.
    pub fn peer(&self) -> &PeerInfo {
        &self.peer
    }

    /// The deadline of each step.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Changes the deadline of each step.
    pub fn set_timeout(&mut self, t: Duration) {
        if !t.is_zero() {
            self.timeout = t;
        }
    }

    /// Send-queue slots left for the caller's own work requests ([`post`](Self::post)).
    pub fn user_send_depth(&self) -> u32 {
        self.q.qp().caps().max_send_wr.saturating_sub(self.own_sq)
    }

    /// Receives kept posted for the peer's messages: the credits granted to it.
    pub fn recv_depth(&self) -> u32 {
        self.recv_depth
    }

    /// Messages we may send now without waiting for the peer.
    pub fn credits(&self) -> u32 {
        match self.flow {
            Flow::Credits { credits, .. } | Flow::Implicit { credits } => credits,
        }
    }

    #[inline(always)]
    pub(super) fn check_usable(&self) -> Result<()> {
        match &self.failed {
            Some(e) => Err(Error::Connection(format!(
                "the endpoint failed earlier: {e}"
            ))),
            None => Ok(()),
        }
    }

    pub(super) fn fail(&mut self, e: Error) -> Error {
        if self.failed.is_none() {
            self.failed = Some(e.to_string());
        }
        e
    }

    #[inline(always)]
    pub(super) fn deadline(&self) -> Deadline {
        Deadline::new(self.timeout)
    }

    /// Ends the connection gracefully: waits for sent messages to complete (or for the peer's
    /// own disconnect, which ends that wait: see [`flush`](Self::flush)), then (CM)
    /// disconnects. Dropping the endpoint tears down without waiting.
    pub fn close(mut self) -> Result<()> {
        let r = if self.failed.is_none() {
            self.flush()
        } else {
            Ok(())
        };
        if let Some(id) = self.cm.take() {
            if let Err(e) = id.disconnect() {
                tracing::debug!("rdma_disconnect: {e}");
            }
            self.cm = Some(id);
        }
        r
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        if let Some(id) = &self.cm {
            // Moves the QP to ERR and tells the peer; the QP, CQ, PD and id are then torn down in
            // field order. A second disconnect after close() fails harmlessly.
            let _ = id.disconnect();
        }
    }
}
