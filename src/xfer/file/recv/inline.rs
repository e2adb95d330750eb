//! Small files inline at the receiver: a HELLO flagged `inline` is answered at once (WANT,
//! SKIP or REFUSE) without a ring, and the sender's next entries may follow before its data.
//! The files answered WANT wait in order, at most [`proto::MAX_IN_FLIGHT`] of them (a sender
//! that announces more is ended: a flood of announcements costs a bounded queue); DATA pieces
//! fill the oldest, which is written, verified and committed when its last piece comes, then
//! answered ACK. See "Small files inline" in `docs/file-protocol.md`.

use std::collections::VecDeque;

use super::answer::{admit, answer_refuse, answer_skip, make_sink, plan_file, Planned, Reply};
use super::file::SessionState;
use super::replies::Gathered;
use crate::error::{Error, Result};
use crate::xfer::file::budget::FILE_CREDIT;
use crate::xfer::file::ctl::reason_of;
use crate::xfer::file::link::Link;
use crate::xfer::file::names::{DirCache, RelPath};
use crate::xfer::file::options::ReceiverOptions;
use crate::xfer::file::proto::{self, Data, Digest, Hello, Msg, Reason};
use crate::xfer::file::report::{FileReport, SessionReport};

/// A file answered WANT, its data not yet whole.
struct Wanted {
    hello: Hello,
    rel: RelPath,
    replace: bool,
}

/// One connection's inline files in flight.
#[derive(Default)]
pub(super) struct Inline {
    wanted: VecDeque<Wanted>,
    /// The data of the oldest wanted file so far.
    buf: Vec<u8>,
    /// The directory of the last file checked or made.
    dirs: DirCache,
}

impl Inline {
    /// Whether no file awaits its data.
    pub(super) fn is_idle(&self) -> bool {
        self.wanted.is_empty()
    }

    /// Files answered WANT whose data has not come.
    pub(super) fn waiting(&self) -> usize {
        self.wanted.len()
    }

    /// An inline file's HELLO: WANT (queued), SKIP or REFUSE (gathered in `ep`).
    pub(super) async fn on_hello<L: Link>(
        &mut self,
        ep: &mut Gathered<'_, L>,
        opts: &ReceiverOptions,
        st: &mut SessionState<'_, L::Ring>,
        report: &mut SessionReport,
        nonce: &Digest,
        h: Hello,
    ) -> Result<()> {
        if self.wanted.len() >= proto::MAX_IN_FLIGHT {
            return Err(Error::Protocol(format!(
                "the sender announced more than {} inline files without sending their data",
                proto::MAX_IN_FLIGHT
            )));
        }
        let planned = admit(opts, nonce, &h).and_then(|rel| {
            if h.size > u64::from(h.chunk_size) {
                return Err(Error::Protocol(format!(
                    "inline file of {} bytes, over its chunk size of {}",
                    h.size, h.chunk_size
                )));
            }
            plan_file(opts, &mut self.dirs, &rel, &h).map(|p| (rel, p))
        });
        match planned {
            Ok((rel, Planned::Write { replace })) => {
                ep.reply(&Msg::Want).await?;
                self.wanted.push_back(Wanted {
                    hello: h,
                    rel,
                    replace,
                });
                Ok(())
            }
            Ok((_, Planned::Skip(why, message))) => {
                answer_skip(ep, report, st.budget, &h, why, message).await
            }
            Err(e) => answer_refuse(ep, report, st.budget, &h, e).await,
        }
    }

    /// A DATA piece of the oldest wanted file; its last piece commits the file and answers
    /// ACK (gathered in `ep`, sent after the directory's fsync).
    pub(super) async fn on_data<L: Link>(
        &mut self,
        ep: &mut Gathered<'_, L>,
        opts: &ReceiverOptions,
        st: &mut SessionState<'_, L::Ring>,
        report: &mut SessionReport,
        d: Data,
    ) -> Result<()> {
        let Some(w) = self.wanted.front() else {
            return Err(Error::Protocol(
                "DATA with no inline file answered WANT".into(),
            ));
        };
        let size = w.hello.size;
        if d.offset != self.buf.len() as u64 {
            return Err(Error::Protocol(format!(
                "DATA at offset {} of {}, where {} was expected",
                d.offset,
                w.rel,
                self.buf.len()
            )));
        }
        if d.abandon {
            let w = self.wanted.pop_front().expect("looked at above");
            self.buf.clear();
            let why = match d.vanished {
                true => "vanished from the sender's source after it was listed",
                false => "the sender could not read it as announced",
            };
            ep.reply(&Msg::Ack {
                status: Reason::ReadError,
                message: why.into(),
            }).await?;
            let name = &w.hello.name;
            if d.vanished {
                // Removed from the sender's source after its listing: not this side's failure.
                report.push(FileReport::skipped(name, "file", size, why));
                return Ok(());
            }
            report.push(FileReport::failed(
                name,
                size,
                Reason::ReadError,
                why.into(),
            ));
            return st.budget.refused();
        }
        let end = self.buf.len() as u64 + d.bytes.len() as u64;
        if end > size || (d.hash.is_none() && end == size && size > 0) {
            return Err(Error::Protocol(format!(
                "DATA up to byte {end} of {}, a file of {size} bytes",
                w.rel
            )));
        }
        self.buf.extend_from_slice(&d.bytes);
        let Some(hash) = d.hash else {
            return Ok(());
        };
        if end != size {
            return Err(Error::Protocol(format!(
                "the last DATA of {} ends at byte {end} of {size}",
                w.rel
            )));
        }
        let w = self.wanted.pop_front().expect("looked at above");
        let data = std::mem::take(&mut self.buf);
        let whole = Whole {
            w,
            data: &data,
            hash,
        };
        commit(ep, opts, &mut self.dirs, st, report, whole).await
    }
}

/// Writes, verifies and commits a whole inline file, then answers ACK.
/// An inline file whose data came whole, with the sender's file digest.
struct Whole<'a> {
    w: Wanted,
    data: &'a [u8],
    hash: Digest,
}

async fn commit<L: Link>(
    ep: &mut Gathered<'_, L>,
    opts: &ReceiverOptions,
    dirs: &mut DirCache,
    st: &mut SessionState<'_, L::Ring>,
    report: &mut SessionReport,
    whole: Whole<'_>,
) -> Result<()> {
    let Whole { w, data, hash } = whole;
    let h = &w.hello;
    let result = make_sink(opts, dirs, &w.rel, h, w.replace, false, true).and_then(|mut sink| {
        sink.start(h.chunk_size, h.verify)?;
        if !data.is_empty() {
            sink.write_chunk_at(0, data)?;
        }
        let layout = *sink.layout().expect("started above");
        // The ACK below goes out after this directory's fsync (`Replies::flush`).
        ep.replies.dirty(sink.dir())?;
        sink.commit_small(&hash).map(|got| (got, layout))
    });
    let (status, message) = match &result {
        Ok(_) => (Reason::Ok, String::new()),
        Err(e) => (reason_of(e), proto::truncate_text(&e.to_string())),
    };
    ep.reply(&Msg::Ack { status, message }).await?;
    report.bytes += h.size;
    match result {
        Ok((got, layout)) => {
            report.push(FileReport::ok(&h.name, h.size, &got, &layout));
            st.budget.progress(FILE_CREDIT + h.size);
            Ok(())
        }
        Err(e) => {
            report.push(FileReport::failed(&h.name, h.size, status, e.to_string()));
            st.budget.refused()
        }
    }
}
