//! One entry of a session over one stream: a directory or symlink made, or a whole file
//! received, verified and committed.

use std::sync::Arc;

use super::answer::{
    admit, answer_refuse, answer_skip, file_failed, open_sink, receive_entry, tell_peer, Opened,
};
use super::core::PartReceiver;
use super::data::{ensure_ring, receive_data, receive_digests, settle, StagingRing};
use super::entry;
use super::joint::Joint;
use super::ring_budget::RingLease;
use super::sink::mismatch_error;
use crate::error::{Error, Result};
use crate::xfer::file::budget::{Budget, Stop, FILE_CREDIT};
use crate::xfer::file::ctl::{reason_of, send_msg};
use crate::xfer::file::fault;
use crate::xfer::file::link::Link;
use crate::xfer::file::options::ReceiverOptions;
use crate::xfer::file::proto::{self, Digest, EntryKind, Hello, Msg, Reason};
use crate::xfer::file::report::{FileReport, SessionReport};

/// A connection's state across its files.
pub(super) struct SessionState<'a, R> {
    pub(super) lease: &'a mut RingLease,
    pub(super) ring: &'a mut Option<StagingRing<R>>,
    pub(super) budget: &'a mut Budget,
    /// This connection's stream of a session with several (for errors).
    pub(super) stream: Option<u16>,
    /// Of a session with several streams: the session, and this stream's stop flag (raised
    /// when another stream takes over its part).
    pub(super) joint: Option<(Arc<Joint>, Stop)>,
}

/// One entry (a file, directory or symlink) announced by `h`.
pub(super) async fn receive_file<L: Link>(
    ep: &mut L,
    opts: &ReceiverOptions,
    st: &mut SessionState<'_, L::Ring>,
    report: &mut SessionReport,
    nonce: &Digest,
    h: Hello,
) -> Result<()> {
    let SessionState {
        lease,
        ring,
        budget,
        stream,
        joint,
    } = st;
    // Of a session with several streams: this file, taken over from a stream that has it.
    let _held = match (&*joint, h.kind) {
        (Some((j, stop)), EntryKind::File) => {
            match j
                .claims
                .take((h.name.clone(), None), stop, budget.step() * 2)
            {
                Ok(held) => Some(held),
                Err(e) => {
                    tell_peer(ep, &e).await;
                    return Err(e);
                }
            }
        }
        _ => None,
    };
    let several = joint.is_some();
    let file_failed = async |ep: &mut L, report: &mut SessionReport, name: &str, size, e| {
        file_failed(ep, report, name, size, e, several).await
    };
    let kind = h.kind;
    let opened = admit(opts, nonce, &h).and_then(|rel| {
        if kind == EntryKind::File {
            open_sink(opts, &rel, &h)
        } else {
            receive_entry(opts, &rel, &h).map(|o| match o {
                entry::Outcome::Made => Opened::Made,
                entry::Outcome::Skipped(why, m) => Opened::Skip(why, m),
            })
        }
    });
    let sink = match opened {
        Ok(Opened::Sink(s)) => *s,
        Ok(Opened::Made) => {
            send_msg(
                ep,
                &Msg::Ack {
                    status: Reason::Ok,
                    message: String::new(),
                },
            ).await?;
            report.push(FileReport::made(&h.name, kind));
            budget.progress(FILE_CREDIT);
            return Ok(());
        }
        Ok(Opened::Skip(why, message)) => {
            return answer_skip(ep, report, budget, &h, why, message).await
        }
        Err(e) => return answer_refuse(ep, report, budget, &h, e).await,
    };
    let r = match ensure_ring(ep, opts, lease, ring, h.chunk_size, h.size).await {
        Ok(r) => r,
        Err(e) => return Err(file_failed(ep, report, &h.name, h.size, e).await),
    };
    let mut sink = sink;
    let (held, held_hash) = match sink.start(r.slot_size, h.verify) {
        Ok(x) => x,
        Err(e) => return Err(file_failed(ep, report, &h.name, h.size, e).await),
    };
    let size = h.size;
    let mut part = match PartReceiver::new(r.slot_size, r.slot_count, held, size, h.verify) {
        Ok(p) => p,
        Err(e) => return Err(file_failed(ep, report, &h.name, size, e).await),
    };
    send_msg(ep, &r.offer(held, held_hash)).await?;

    let label = fault::part_label(*stream, None, &h.name);
    let (mut sink, write_failure) =
        match receive_data(ep, r, budget, sink, &mut part, (&label, None)).await {
            Ok(x) => x,
            Err(e) => return Err(file_failed(ep, report, &h.name, size, e).await),
        };
    report.bytes += size - held;

    let hash = match receive_digests(ep, budget, &mut sink, &mut part).await {
        Ok(hash) => hash,
        Err(e) => return Err(file_failed(ep, report, &h.name, size, e).await),
    };
    // Chunks that differ from the sender's digests are asked for again (REPAIR).
    let settled = settle(
        ep,
        r,
        budget,
        sink,
        &mut part,
        (&label, "HELLO"),
        write_failure,
    ).await;
    let (sink, write_failure, mismatch, again) = match settled {
        Ok(x) => x,
        Err(e) => return Err(file_failed(ep, report, &h.name, size, e).await),
    };
    report.bytes += again;
    let bytes = size;
    let failure = write_failure.or_else(|| {
        let m = mismatch?;
        let layout = sink.layout()?;
        Some(mismatch_error(
            &h.name, layout, m.chunk, m.ours, m.theirs, m.rounds,
        ))
    });
    let result = match failure {
        Some(e) => {
            if let Err(e2) = sink.abort() {
                tracing::warn!("removing the partial file: {e2}");
            }
            Err(e)
        }
        None => {
            let layout = sink.layout().copied();
            sink.commit(&hash).and_then(|got| {
                Ok((
                    got,
                    layout.ok_or_else(|| Error::refused(Reason::Internal, "no layout"))?,
                ))
            })
        }
    };
    let (status, message) = match &result {
        Ok(_) => (Reason::Ok, String::new()),
        Err(e) => (reason_of(e), proto::truncate_text(&e.to_string())),
    };
    send_msg(ep, &Msg::Ack { status, message }).await?;
    let ok = result.is_ok();
    report.push(match result {
        Ok((got, layout)) => {
            FileReport::ok(&h.name, bytes, &got, &layout).with_repaired(part.repaired())
        }
        Err(e) => FileReport::failed(&h.name, bytes, status, e.to_string()),
    });
    if ok {
        budget.progress(FILE_CREDIT);
        Ok(())
    } else {
        budget.refused()
    }
}
