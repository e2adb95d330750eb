//! Posting: `ibv_post_send(3)` and `ibv_post_recv(3)` with the buffers moved into the CQ's
//! in-flight table (see [`super`]).

use crate::error::{Error, Result};
use crate::sys;
use crate::verbs::cq::{Buf, Bufs, Table};
use crate::verbs::mr::LocalBuf;
use crate::verbs::wr::{context_mismatch, one_sge, BufRequest, SgList, SgeVec, WrHead};
use crate::verbs::TRACE_TARGET;

use super::{PostError, QpState, QueuePair, SendOp, SendRequest, Sge};

impl QueuePair {
    /// Checks the SGEs and turns them into `ibv_sge`s; `exclusive` demands LocalBufs. Every
    /// buffer must be registered in this QP's device context.
    fn build_sges(
        &self,
        op: &'static str,
        sges: &[Sge],
        exclusive: bool,
        max: u32,
    ) -> Result<(SgList, u64)> {
        if sges.len() > max as usize {
            return Err(Error::InvalidArgument(format!(
                "{} scatter/gather entries, the QP allows {max}",
                sges.len()
            )));
        }
        let mut out = SgList::with_capacity(sges.len());
        let mut total = 0u64;
        for s in sges {
            let sge = self.check_sge(op, s, exclusive)?;
            total += u64::from(sge.length);
            out.push(sge);
        }
        Ok((out, total))
    }

    /// One SGE checked (context, exclusivity, bounds, length) and turned into an `ibv_sge`.
    #[inline(always)]
    pub(super) fn check_sge(
        &self,
        op: &'static str,
        s: &Sge,
        exclusive: bool,
    ) -> Result<sys::ibv_sge> {
        if s.buf.ctx() != self.ctx.as_ptr() {
            return Err(context_mismatch(op));
        }
        if exclusive && matches!(s.buf, Buf::Shared(_)) {
            return Err(Error::InvalidArgument(
                "a shared (read-only) buffer cannot receive data: use a LocalBuf".into(),
            ));
        }
        let len = s.length();
        let end = s.off.checked_add(len);
        if end.is_none_or(|e| e > s.buf.as_slice().len()) {
            return Err(Error::InvalidArgument(format!(
                "SGE range {}+{len} is outside its {}-byte buffer",
                s.off,
                s.buf.as_slice().len()
            )));
        }
        let length = u32::try_from(len)
            .map_err(|_| Error::InvalidArgument(format!("SGE of {len} bytes is too large")))?;
        Ok(sys::ibv_sge {
            addr: s.buf.addr() + s.off as u64,
            length,
            lkey: s.buf.lkey(),
        })
    }

    /// Posts a send-queue work request (`ibv_post_send(3)`). The buffers move into the in-flight
    /// table and come back in the [`Completion`](crate::verbs::Completion) (or in the error).
    pub fn post_send(&self, wr: SendRequest) -> std::result::Result<(), PostError> {
        match self.send_cq.lock("ibv_post_send") {
            Ok(mut t) => self.post_send_into(&mut t, wr),
            Err(error) => Err(PostError {
                error,
                bufs: wr.sges.into_iter().map(|s| s.buf).collect(),
            }),
        }
    }

    /// [`post_send`](Self::post_send) recording into `t`, the send CQ's table.
    pub(crate) fn post_send_into(
        &self,
        t: &mut Table,
        wr: SendRequest,
    ) -> std::result::Result<(), PostError> {
        let SendRequest {
            wr_id,
            op,
            mut sges,
            signaled,
            inline,
        } = wr;
        let head = WrHead {
            wr_id,
            op,
            signaled,
            inline,
        };
        let exclusive = matches!(op, SendOp::Read(_));
        if sges.len() == 1 && self.caps.max_send_sge >= 1 {
            // The usual work request: no SGE list to build, no iterator to collect.
            let s = sges.pop().expect("one SGE");
            let sge = self.check_sge("ibv_post_send", &s, exclusive);
            let bufs: Bufs = smallvec::smallvec![s.buf];
            return match sge {
                Ok(mut sge) => {
                    let total = u64::from(sge.length);
                    let sg = std::slice::from_mut(&mut sge);
                    self.post_send_raw(t, head, sg, total, bufs)
                }
                Err(error) => Err(PostError { error, bufs }),
            };
        }
        let built = self.build_sges("ibv_post_send", &sges, exclusive, self.caps.max_send_sge);
        let bufs: Bufs = sges.into_iter().map(|s| s.buf).collect();
        match built {
            Ok((mut sg, total)) => self.post_send_raw(t, head, sg.as_mut_slice(), total, bufs),
            Err(error) => Err(PostError { error, bufs }),
        }
    }

    /// Posts a send-queue work request over one buffer range (`ibv_post_send(3)`): [`post_send`]
    /// with one [`Sge::range`], without building a [`SendRequest`] (the per-message path).
    ///
    /// [`post_send`]: Self::post_send
    /// [`Sge::range`]: super::Sge::range
    #[inline(always)]
    pub fn post_send_buf(&self, req: BufRequest) -> std::result::Result<(), PostError> {
        match self.send_cq.lock("ibv_post_send") {
            Ok(mut t) => self.post_send_buf_into(&mut t, req),
            Err(error) => Err(PostError {
                error,
                bufs: smallvec::smallvec![Buf::Local(req.buf)],
            }),
        }
    }

    /// [`post_send_buf`](Self::post_send_buf) recording into `t`, the send CQ's table.
    #[inline(always)]
    pub(crate) fn post_send_buf_into(
        &self,
        t: &mut Table,
        req: BufRequest,
    ) -> std::result::Result<(), PostError> {
        let BufRequest {
            head,
            buf,
            off,
            len,
        } = req;
        let sge = one_sge(self.ctx, "ibv_post_send", &buf, off, len);
        let bufs: Bufs = smallvec::smallvec![Buf::Local(buf)];
        match sge {
            Ok(mut sge) => {
                self.post_send_raw(t, head, std::slice::from_mut(&mut sge), len as u64, bufs)
            }
            Err(error) => Err(PostError { error, bufs }),
        }
    }

    /// The checks that need the whole work request, then `ibv_post_send` with `bufs` recorded
    /// in the in-flight table.
    #[inline(always)]
    fn post_send_raw(
        &self,
        t: &mut Table,
        head: WrHead,
        sg: &mut [sys::ibv_sge],
        total: u64,
        bufs: Bufs,
    ) -> std::result::Result<(), PostError> {
        let WrHead {
            wr_id,
            op,
            signaled,
            inline,
        } = head;
        if !self.is_rts() {
            return Err(PostError {
                error: not_rts(self.state()),
                bufs,
            });
        }
        let mut w = match self.send_wr(op, total, signaled, inline) {
            Ok(w) => w,
            Err(error) => return Err(PostError { error, bufs }),
        };
        w.sg_list = sg.as_mut_ptr();
        w.num_sge = sg.len() as i32;
        let id = match t.push(self.qpn, false, wr_id, bufs, op.name()) {
            Ok(id) => id,
            Err(bufs) => return Err(table_full(wr_id, bufs)),
        };
        w.wr_id = id;
        let mut bad: *mut sys::ibv_send_wr = std::ptr::null_mut();
        // The in-flight table now owns each SGE's buffer until its completion is polled or the
        // QP is destroyed.
        // SAFETY: `self.qp` is live until drop; `w` and `sg` live across the call; every SGE was
        // bounds-checked against a buffer registered in this QP's context (build_sges / one_sge).
        let rc = unsafe { sys::shim_ibv_post_send(self.qp.as_ptr(), &mut w, &mut bad) };
        if rc != 0 {
            let e = t.unpush(self.qpn, id).expect("just pushed");
            return Err(PostError {
                error: Error::verb("ibv_post_send", rc),
                bufs: e.bufs,
            });
        }
        tracing::trace!(
            target: TRACE_TARGET,
            "post_send qpn={} id={id:#x} wr_id={wr_id:#x} op={} imm={} len={total} \
             remote={} signaled={signaled}",
            self.qpn,
            op.name(),
            trace_imm(op),
            trace_remote(op),
        );
        Ok(())
    }

    /// The checks that need the whole work request (`total` bytes in its SGEs) and its
    /// `ibv_send_wr`, without SGEs, `wr_id` or `next` (the caller sets them).
    #[inline(always)]
    pub(super) fn send_wr(
        &self,
        op: SendOp,
        total: u64,
        signaled: bool,
        inline: bool,
    ) -> Result<sys::ibv_send_wr> {
        if total > u64::from(self.max_msg) {
            return Err(Error::InvalidArgument(format!(
                "message of {total} bytes exceeds the port's max message size of {} bytes",
                self.max_msg
            )));
        }
        if let SendOp::Write(r) | SendOp::WriteWithImm(r, _) | SendOp::Read(r) = op {
            if u64::from(r.len) != total {
                return Err(Error::InvalidArgument(format!(
                    "local length {total} differs from the remote slice's {}",
                    r.len
                )));
            }
        }
        let exclusive = matches!(op, SendOp::Read(_));
        if inline && (exclusive || total > u64::from(self.caps.max_inline_data)) {
            return Err(Error::InvalidArgument(format!(
                "{total} bytes cannot be sent inline (max {})",
                self.caps.max_inline_data
            )));
        }
        let mut w = sys::ibv_send_wr {
            send_flags: (if signaled {
                sys::IBV_SEND_SIGNALED.0
            } else {
                0
            }) | (if inline { sys::IBV_SEND_INLINE.0 } else { 0 }),
            ..Default::default()
        };
        let (opcode, imm, remote) = match op {
            SendOp::Send => (sys::IBV_WR_SEND, None, None),
            SendOp::SendWithImm(i) => (sys::IBV_WR_SEND_WITH_IMM, Some(i), None),
            SendOp::Write(r) => (sys::IBV_WR_RDMA_WRITE, None, Some(r)),
            SendOp::WriteWithImm(r, i) => (sys::IBV_WR_RDMA_WRITE_WITH_IMM, Some(i), Some(r)),
            SendOp::Read(r) => (sys::IBV_WR_RDMA_READ, None, Some(r)),
        };
        w.opcode = opcode;
        if let Some(i) = imm {
            w.__bindgen_anon_1.imm_data = i.to_be();
        }
        if let Some(r) = remote {
            w.wr.rdma = sys::ibv_send_wr__bindgen_ty_2__bindgen_ty_1 {
                remote_addr: r.addr,
                rkey: r.rkey,
            };
        }
        Ok(w)
    }

    /// The error [`send_wr`](Self::send_wr) gives for a work request it refuses.
    #[cold]
    #[inline(never)]
    fn send_wr_error(&self, op: SendOp, total: u64, signaled: bool, inline: bool) -> Error {
        match self.send_wr(op, total, signaled, inline) {
            Err(e) => e,
            Ok(_) => Error::InvalidArgument(format!("{} of {total} bytes refused", op.name())),
        }
    }

    /// Posts a receive (`ibv_post_recv(3)`) into exclusive buffers. Allowed from INIT on.
    pub fn post_recv(
        &self,
        wr_id: u64,
        sges: impl IntoIterator<Item = Sge>,
    ) -> std::result::Result<(), PostError> {
        match self.recv_cq.lock("ibv_post_recv") {
            Ok(mut t) => self.post_recv_into(&mut t, wr_id, sges),
            Err(error) => Err(PostError {
                error,
                bufs: sges.into_iter().map(|s| s.buf).collect(),
            }),
        }
    }

    /// [`post_recv`](Self::post_recv) recording into `t`, the receive CQ's table.
    pub(crate) fn post_recv_into(
        &self,
        t: &mut Table,
        wr_id: u64,
        sges: impl IntoIterator<Item = Sge>,
    ) -> std::result::Result<(), PostError> {
        let sges: SgeVec = sges.into_iter().collect();
        let built = self.build_sges("ibv_post_recv", &sges, true, self.caps.max_recv_sge);
        let bufs: Bufs = sges.into_iter().map(|s| s.buf).collect();
        match built {
            Ok((mut sg, _)) => self.post_recv_raw(t, wr_id, sg.as_mut_slice(), bufs),
            Err(error) => Err(PostError { error, bufs }),
        }
    }

    /// Posts a receive into the whole of `buf`: [`post_recv`](Self::post_recv) with one
    /// [`Sge::new`] (the per-message path).
    #[inline(always)]
    pub fn post_recv_buf(&self, wr_id: u64, buf: LocalBuf) -> std::result::Result<(), PostError> {
        match self.recv_cq.lock("ibv_post_recv") {
            Ok(mut t) => self.post_recv_buf_into(&mut t, wr_id, buf),
            Err(error) => Err(PostError {
                error,
                bufs: smallvec::smallvec![Buf::Local(buf)],
            }),
        }
    }

    /// [`post_recv_buf`](Self::post_recv_buf) recording into `t`, the receive CQ's table.
    #[inline(always)]
    pub(crate) fn post_recv_buf_into(
        &self,
        t: &mut Table,
        wr_id: u64,
        buf: LocalBuf,
    ) -> std::result::Result<(), PostError> {
        let sge = one_sge(self.ctx, "ibv_post_recv", &buf, 0, buf.len());
        let bufs: Bufs = smallvec::smallvec![Buf::Local(buf)];
        match sge {
            Ok(mut sge) => self.post_recv_raw(t, wr_id, std::slice::from_mut(&mut sge), bufs),
            Err(error) => Err(PostError { error, bufs }),
        }
    }

    #[inline(always)]
    fn post_recv_raw(
        &self,
        t: &mut Table,
        wr_id: u64,
        sg: &mut [sys::ibv_sge],
        bufs: Bufs,
    ) -> std::result::Result<(), PostError> {
        let state = self.state();
        if matches!(state, QpState::Reset | QpState::Error) {
            return Err(PostError {
                error: Error::InvalidState {
                    op: "ibv_post_recv",
                    object: "queue pair",
                    state: state.name(),
                    needs: "INIT, RTR or RTS",
                },
                bufs,
            });
        }
        let mut w = sys::ibv_recv_wr {
            sg_list: sg.as_mut_ptr(),
            num_sge: sg.len() as i32,
            ..Default::default()
        };
        let id = match t.push(self.qpn, true, wr_id, bufs, "RECV") {
            Ok(id) => id,
            Err(bufs) => return Err(table_full(wr_id, bufs)),
        };
        w.wr_id = id;
        let mut bad: *mut sys::ibv_recv_wr = std::ptr::null_mut();
        // SAFETY: as in post_send_raw: live QP, `w` and `sg` outlive the call, SGEs checked, and
        // the buffers are owned by the in-flight table from here on.
        let rc = unsafe { sys::shim_ibv_post_recv(self.qp.as_ptr(), &mut w, &mut bad) };
        if rc != 0 {
            let e = t.unpush(self.qpn, id).expect("just pushed");
            return Err(PostError {
                error: Error::verb("ibv_post_recv", rc),
                bufs: e.bufs,
            });
        }
        Ok(())
    }
}

impl QueuePair {
    /// Makes `bufs` the receive ring of this QP's single-owner CQ (`t`) and posts every slot;
    /// each buffer must be registered in this QP's context. Once only.
    pub(crate) fn set_recv_ring(
        &self,
        t: &mut Table,
        wr_id: u64,
        bufs: Vec<LocalBuf>,
    ) -> Result<()> {
        if t.ring.is_set() {
            return Err(Error::InvalidState {
                op: "set a receive ring",
                object: "receive queue",
                state: "given a ring already",
                needs: "one without a ring",
            });
        }
        if u32::try_from(bufs.len()).is_err() {
            return Err(Error::TooLarge {
                what: "receive ring",
                detail: format!("{} slots exceed u32::MAX", bufs.len()),
            });
        }
        let sges = bufs
            .iter()
            .map(|b| one_sge(self.ctx, "ibv_post_recv", b, 0, b.len()))
            .collect::<Result<Vec<_>>>()?;
        let n = bufs.len() as u32;
        t.ring.set(wr_id, bufs, sges);
        for slot in 0..n {
            if t.ring.release(slot).is_none() {
                return Err(ring_slot_busy(slot));
            }
        }
        self.post_ring_released(t).map(|_| ())
    }

    /// Posts the receives of the ring slots released with `RecvRing::release`, as one list (one
    /// `ibv_post_recv(3)`); returns how many. On an error, the ones not posted stay with the
    /// owner's ring but are lost to it (the QP is unusable then).
    #[inline(always)]
    pub(crate) fn post_ring_released(&self, t: &mut Table) -> Result<usize> {
        if !self.takes_recvs() {
            return Err(no_recvs(self.state()));
        }
        let Some(wr) = t.ring.take_list() else {
            return Ok(0);
        };
        let mut bad: *mut sys::ibv_recv_wr = std::ptr::null_mut();
        // The ring keeps each slot's buffer until the table is dropped (after the QP is
        // destroyed) or leaked with it, and lends a released slot out no more. `wr` heads the
        // list of the released slots' requests, each with its slot's SGE (set_recv_ring checked).
        // SAFETY: `self.qp` is live until drop; the list and its SGEs are unchanged since
        // take_list; the buffers are registered in this QP's context.
        let rc = unsafe { sys::shim_ibv_post_recv(self.qp.as_ptr(), wr, &mut bad) };
        // A provider that fails without naming where: none counts as posted.
        let bad = match (rc, bad.is_null()) {
            (0, _) => std::ptr::null(),
            (_, true) => wr.cast_const(),
            (_, false) => bad.cast_const(),
        };
        let n = t.ring.list_posted(bad);
        if rc != 0 {
            return Err(Error::verb("ibv_post_recv", rc));
        }
        tracing::trace!(target: TRACE_TARGET, "post_recv qpn={} ring slots={n}", self.qpn);
        Ok(n)
    }

    /// Posts the receive of ring slot `slot` (into its whole buffer), which must not be posted.
    #[inline(always)]
    pub(crate) fn post_ring_recv(&self, t: &mut Table, slot: u32) -> Result<()> {
        if !self.takes_recvs() {
            return Err(no_recvs(self.state()));
        }
        let Some(wr) = t.ring.take_for_post(slot) else {
            return Err(ring_slot_busy(slot));
        };
        let mut bad: *mut sys::ibv_recv_wr = std::ptr::null_mut();
        // The ring keeps the slot's buffer until the table is dropped (after the QP is
        // destroyed) or leaked with it, and lends it out only while it is not posted.
        // `wr` is the slot's request, its SGE the slot's whole buffer (checked by set_recv_ring).
        // SAFETY: `self.qp` is live until drop; `wr` and its SGE are in the ring, unchanged since
        // take_for_post; the buffer is registered in this QP's context.
        let rc = unsafe { sys::shim_ibv_post_recv(self.qp.as_ptr(), wr, &mut bad) };
        if rc != 0 {
            t.ring.unpost(slot);
            return Err(Error::verb("ibv_post_recv", rc));
        }
        tracing::trace!(target: TRACE_TARGET, "post_recv qpn={} ring slot={slot}", self.qpn);
        Ok(())
    }

    /// Makes `bufs` the send ring of this QP's single-owner CQ (`t`): each buffer must be
    /// registered in this QP's context. Once only; nothing is posted.
    pub(crate) fn set_send_ring(
        &self,
        t: &mut Table,
        wr_id: u64,
        bufs: Vec<LocalBuf>,
    ) -> Result<()> {
        if t.send_ring.is_set() {
            return Err(Error::InvalidState {
                op: "set a send ring",
                object: "send queue",
                state: "given a ring already",
                needs: "one without a ring",
            });
        }
        if u32::try_from(bufs.len()).is_err() {
            return Err(Error::TooLarge {
                what: "send ring",
                detail: format!("{} slots exceed u32::MAX", bufs.len()),
            });
        }
        // A slot takes at most the QP's largest message: a post within its slot needs no check
        // of that.
        let max = self.max_msg as usize;
        let sges = bufs
            .iter()
            .map(|b| one_sge(self.ctx, "ibv_post_send", b, 0, b.len().min(max)))
            .collect::<Result<Vec<_>>>()?;
        t.send_ring.set(wr_id, bufs, sges);
        Ok(())
    }

    /// Posts the first `len` bytes of the send ring's next free slot (filled through
    /// `SendRing::next_free`) as a SEND (`op`: SEND or SEND_WITH_IMM) (`ibv_post_send(3)`).
    /// Sent inline (`IBV_SEND_INLINE`) when the QP's `max_inline_data` takes `len`.
    #[inline(always)]
    pub(crate) fn post_ring_send(
        &self,
        t: &mut Table,
        op: SendOp,
        len: usize,
        signaled: bool,
    ) -> Result<()> {
        if !self.is_rts() {
            return Err(not_rts(self.state()));
        }
        // send_wr's checks that a SEND needs (no remote slice), in line; its errors if any fails.
        let (opcode, imm) = match op {
            SendOp::Send => (sys::IBV_WR_SEND, 0),
            SendOp::SendWithImm(i) => (sys::IBV_WR_SEND_WITH_IMM, i.to_be()),
            _ => {
                return Err(Error::InvalidArgument(
                    "a send ring slot is posted as a SEND".into(),
                ))
            }
        };
        // Inline whenever the QP takes it (the slots' caps are within the largest message: see
        // set_send_ring).
        let inline = len != 0 && len <= self.caps.max_inline_data as usize;
        let seq = t.next_seq();
        let flags = (if signaled {
            sys::IBV_SEND_SIGNALED.0
        } else {
            0
        }) | (if inline { sys::IBV_SEND_INLINE.0 } else { 0 });
        let Some((slot, wr)) = t.send_ring.take_for_post(seq, len, opcode, flags, imm) else {
            return Err(self.ring_send_refused(op, len, signaled));
        };
        let mut bad: *mut sys::ibv_send_wr = std::ptr::null_mut();
        // The ring keeps the slot's buffer until the table is dropped (after the QP is
        // destroyed) or leaked with it, and lends it out only while it is not posted.
        // `wr` is the slot's request, its SGE the slot's buffer cut to `len` (set_send_ring).
        // SAFETY: `self.qp` is live until drop; `wr` and its SGE are in the ring, unchanged since
        // take_for_post; the buffer is registered in this QP's context.
        let rc = unsafe { sys::shim_ibv_post_send(self.qp.as_ptr(), wr, &mut bad) };
        if rc != 0 {
            t.send_ring.unpost(slot);
            return Err(Error::verb("ibv_post_send", rc));
        }
        tracing::trace!(
            target: TRACE_TARGET,
            "post_send qpn={} send ring slot={slot} seq={seq} op={} imm={} len={len} \
             signaled={signaled}",
            self.qpn,
            op.name(),
            trace_imm(op),
        );
        Ok(())
    }
}

/// For the trace: the immediate of `op` (`-` if none), as posted (host order).
fn trace_imm(op: SendOp) -> String {
    match op {
        SendOp::SendWithImm(i) | SendOp::WriteWithImm(_, i) => format!("{i:#x}"),
        _ => "-".into(),
    }
}

/// For the trace: the remote address of `op` (`-` if none).
fn trace_remote(op: SendOp) -> String {
    match op {
        SendOp::Write(r) | SendOp::WriteWithImm(r, _) | SendOp::Read(r) => format!("{:#x}", r.addr),
        _ => "-".into(),
    }
}

/// A ring slot re-posted or released that is not the owner's (out of line: never on a real
/// path).
#[cold]
#[inline(never)]
pub(crate) fn ring_slot_busy(slot: u32) -> Error {
    Error::InvalidArgument(format!(
        "receive ring slot {slot} does not exist or is posted already"
    ))
}

/// No free send ring slot, or one too small (out of line: never on a real path).
#[cold]
#[inline(never)]
fn send_slot_missing(len: usize) -> Error {
    Error::InvalidArgument(format!("no free send ring slot of at least {len} bytes"))
}

impl QueuePair {
    /// Why the send ring refused `len` bytes: over the largest message, or no free slot that
    /// large (out of line: never on a real path).
    #[cold]
    #[inline(never)]
    fn ring_send_refused(&self, op: SendOp, len: usize, signaled: bool) -> Error {
        if len as u64 > u64::from(self.max_msg) {
            return self.send_wr_error(op, len as u64, signaled, false);
        }
        send_slot_missing(len)
    }
}

/// A receive posted on a QP in RESET or ERR (out of line: never on a real path).
#[cold]
#[inline(never)]
fn no_recvs(state: QpState) -> Error {
    Error::InvalidState {
        op: "ibv_post_recv",
        object: "queue pair",
        state: state.name(),
        needs: "INIT, RTR or RTS",
    }
}

/// A send posted on a QP that is not in RTS (out of line: never on a real path).
#[cold]
#[inline(never)]
pub(super) fn not_rts(state: QpState) -> Error {
    Error::InvalidState {
        op: "ibv_post_send",
        object: "queue pair",
        state: state.name(),
        needs: "RTS",
    }
}

/// The CQ's in-flight table cannot take another entry (out of line: never on a real path).
#[cold]
#[inline(never)]
pub(super) fn table_full(wr_id: u64, bufs: Bufs) -> PostError {
    PostError {
        error: Error::TooLarge {
            what: "in-flight table",
            detail: format!("work request {wr_id}: the CQ holds u32::MAX - 1 work requests"),
        },
        bufs,
    }
}
