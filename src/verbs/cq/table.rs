//! The in-flight table: a slab of posted work requests indexed by the internal `wr_id`, and
//! completions polled for someone else (see [`super`]).

use std::collections::VecDeque;

use crate::sys;
use crate::verbs::cq::{Buf, Bufs, Completion, Retired, WcOpcode};
use crate::verbs::mr::LocalBuf;
use crate::verbs::TRACE_TARGET;

use super::recv_ring::RecvRing;
pub(crate) use super::recv_ring::RECV_BIT;
use super::send_ring::{is_send_ring_id, SendRing};

pub(crate) struct Entry {
    pub(crate) wr_id: u64,
    pub(crate) bufs: Bufs,
    pub(crate) op: &'static str,
}

/// A successful completion of a work request that held exactly one exclusive buffer and retired
/// nothing: the per-message case, small enough to move cheaply (no buffer list, no retired list).
pub(crate) struct Done {
    pub(crate) wr_id: u64,
    pub(crate) opcode: WcOpcode,
    pub(crate) byte_len: u32,
    pub(crate) imm: Option<u32>,
    pub(crate) qp_num: u32,
    pub(crate) buf: LocalBuf,
    op: &'static str,
}

impl Done {
    /// The same as a [`Completion`].
    pub(crate) fn into_completion(self) -> Completion {
        Completion {
            wr_id: self.wr_id,
            status: sys::IBV_WC_SUCCESS,
            vendor_err: 0,
            opcode: self.opcode,
            byte_len: self.byte_len,
            imm: self.imm,
            qp_num: self.qp_num,
            bufs: smallvec::smallvec![Buf::Local(self.buf)],
            retired: Vec::new(),
            op: self.op,
        }
    }
}

/// A completion as the per-message path takes it: a ring receive, a ring send or [`Done`] when
/// it can, else in full (boxed: the usual case stays small to move).
pub(crate) enum Polled {
    /// A [`Done`], kept in the table until [`into_completion`](Self::into_completion) takes it
    /// (so that the usual cases, a few words each, are what moves).
    Done,
    /// A ring slot's successful receive: the slot (what came: `RecvRing::done`).
    Ring(u32),
    /// A send ring slot's successful completion that retired no table entry: the ring's sends
    /// up to it are free again (how many: `SoloQueue::take_retired`).
    Sent {
        wr_id: u64,
        qp_num: u32,
    },
    Full(Box<Completion>),
}

impl Polled {
    /// As a [`Completion`]. A ring receive's buffer stays in the ring: its completion has none,
    /// and its `wr_id` is the slot's internal id (the owner of a ring takes [`Polled`]s).
    /// `t` is the table that gave it.
    #[inline(always)]
    pub(crate) fn into_completion(self, t: &mut Table) -> Completion {
        match self {
            Polled::Done => t.take_done(),
            Polled::Ring(slot) => t.ring.completion(slot),
            Polled::Sent { wr_id, qp_num } => Completion {
                wr_id,
                status: sys::IBV_WC_SUCCESS,
                vendor_err: 0,
                opcode: WcOpcode::Send,
                byte_len: 0,
                imm: None,
                qp_num,
                bufs: Bufs::new(),
                retired: Vec::new(),
                op: "SEND",
            },
            Polled::Full(c) => *c,
        }
    }
}

/// Work queues by QP number: a short list scanned linearly (a CQ serves few QPs; hashing, and
/// hashbrown's SIMD probing, cost more than the scan, most of all in an emulated guest).
pub(crate) struct QpMap<V>(Vec<(u32, V)>);

impl<V> Default for QpMap<V> {
    fn default() -> Self {
        QpMap(Vec::new())
    }
}

impl<V: Default> QpMap<V> {
    #[cfg(test)]
    fn get(&self, qpn: u32) -> Option<&V> {
        self.0.iter().find(|(k, _)| *k == qpn).map(|(_, v)| v)
    }

    #[inline(always)]
    fn get_mut(&mut self, qpn: u32) -> Option<&mut V> {
        self.0.iter_mut().find(|(k, _)| *k == qpn).map(|(_, v)| v)
    }

    #[inline(always)]
    fn get_or_default(&mut self, qpn: u32) -> &mut V {
        let i = match self.0.iter().position(|(k, _)| *k == qpn) {
            Some(i) => i,
            None => {
                self.0.push((qpn, V::default()));
                self.0.len() - 1
            }
        };
        &mut self.0[i].1
    }

    fn remove(&mut self, qpn: u32) -> Option<V> {
        let i = self.0.iter().position(|(k, _)| *k == qpn)?;
        Some(self.0.swap_remove(i).1)
    }
}

/// No slot (end of a list).
const NIL: u32 = u32::MAX;
/// The low 32 bits of an internal work request id are its slot index.
const INDEX_MASK: u64 = 0xffff_ffff;
/// Bits 32..62 of an internal id: its slot's generation, 1 to `GEN_MASK`, one more each time
/// the slot is used. A slot that has used its last generation is never used again
/// ([`release`]), so a stale id (a destroyed QP's late completion) never matches a reused
/// slot: no generation of a slot comes twice.
const GEN_MASK: u64 = 0x7fff_ffff;

/// One slot of the in-flight slab: a posted work request, or a free slot.
struct Slot {
    /// The internal id posted as `wr_id` (0: free).
    id: u64,
    /// The generation of the slot's last use (0: never used).
    gen: u32,
    qpn: u32,
    /// Used: the next (newer) outstanding send of the same QP; free: the next free slot.
    next: u32,
    /// A send's number in the table's send-queue sequence (see [`super::send_ring`]).
    seq: u64,
    entry: Option<Entry>,
}

/// A QP's outstanding sends, oldest to newest, linked through [`Slot::next`]: a signaled
/// completion retires every older (unsignaled) one.
struct SendChain {
    head: u32,
    tail: u32,
}

impl Default for SendChain {
    fn default() -> Self {
        SendChain {
            head: NIL,
            tail: NIL,
        }
    }
}

/// The in-flight table: a slab indexed by the internal `wr_id` (no hashing; no allocation once
/// it has grown to the queues' depth), plus completions polled for someone else.
pub(crate) struct Table {
    slots: Vec<Slot>,
    free: u32,
    sq: QpMap<SendChain>,
    pub(super) pending: VecDeque<Completion>,
    /// Raw completions polled in one `ibv_poll_cq` call and not matched yet
    /// (`stash[stash_at..stash_len]`): a busy-poll takes up to [`STASH`] at once.
    pub(super) stash: [sys::ibv_wc; STASH],
    pub(super) stash_at: usize,
    pub(super) stash_len: usize,
    /// An empty retired list with room, handed back by [`recycle`](Self::recycle): the next
    /// completion that retires unsignaled sends fills it instead of allocating.
    spare: Vec<Retired>,
    /// The last send-queue number given to a send (table entry or send ring slot).
    sq_seq: u64,
    /// A single-owner queue's receive ring (empty otherwise).
    pub(crate) ring: RecvRing,
    /// A single-owner queue's send ring (empty otherwise).
    pub(crate) send_ring: SendRing,
    /// The completion of the last [`Polled::Done`] handed out, until it is taken.
    done: Option<Done>,
    /// A poll since the CQ was last armed came back short: every completion that landed before
    /// that arm has been taken, so an armed CQ may be slept on without looking first.
    pub(crate) drained: bool,
}

/// Logs a raw completion as polled, before it is matched (see [`TRACE_TARGET`]).
#[inline(always)]
pub(crate) fn trace_wc(wc: &sys::ibv_wc) {
    tracing::trace!(
        target: TRACE_TARGET,
        "wc qpn={} id={:#x} status={} opcode={} byte_len={} imm={}",
        wc.qp_num,
        wc.wr_id,
        wc.status,
        wc.opcode,
        wc.byte_len,
        if wc.wc_flags & sys::IBV_WC_WITH_IMM.0 != 0 {
            // SAFETY: `imm_data` is the active union member when IBV_WC_WITH_IMM is set.
            format!("{:#x}", u32::from_be(unsafe { wc.__bindgen_anon_1.imm_data }))
        } else {
            "-".into()
        },
    );
}

/// Completions a busy-poll asks `ibv_poll_cq(3)` for at once.
pub(super) const STASH: usize = 4;

/// Frees slot `i` (in use) and returns its entry. A slot whose generation is the last
/// (`GEN_MASK`) is not put back on the free list: it stays unused for good (after 2^31 uses,
/// one slot's worth of memory), so that its generations never start over.
#[inline(always)]
fn release(slots: &mut [Slot], free: &mut u32, i: u32) -> Option<Entry> {
    let s = &mut slots[i as usize];
    s.id = 0;
    if u64::from(s.gen) < GEN_MASK {
        s.next = *free;
        *free = i;
    } else {
        s.next = NIL;
    }
    s.entry.take()
}

/// Releases the send chain's slots from `p` on while `retire` holds for them (oldest first),
/// their entries into `out`; returns the first slot kept (or [`NIL`]).
#[inline(always)]
fn retire_while(
    slots: &mut [Slot],
    free: &mut u32,
    mut p: u32,
    out: &mut Vec<Retired>,
    retire: impl Fn(u32, &Slot) -> bool,
) -> u32 {
    while p != NIL && retire(p, &slots[p as usize]) {
        let next = slots[p as usize].next;
        if let Some(e) = release(slots, free, p) {
            out.push(Retired {
                wr_id: e.wr_id,
                bufs: e.bufs,
            });
        }
        p = next;
    }
    p
}

/// The full completion of `wc` for the owner's `wr_id`, with `bufs` and the `retired` before it.
fn full(
    wc: &sys::ibv_wc,
    wr_id: u64,
    bufs: Bufs,
    retired: Vec<Retired>,
    op: &'static str,
) -> Completion {
    let ok = wc.status == sys::IBV_WC_SUCCESS;
    let with_imm = ok && wc.wc_flags & sys::IBV_WC_WITH_IMM.0 != 0;
    Completion {
        wr_id,
        status: wc.status,
        vendor_err: wc.vendor_err,
        opcode: if ok {
            WcOpcode::from_raw(wc.opcode)
        } else {
            WcOpcode::Other(wc.opcode)
        },
        byte_len: wc.byte_len,
        // SAFETY: `imm_data` is the active union member when IBV_WC_WITH_IMM is set.
        imm: with_imm.then(|| u32::from_be(unsafe { wc.__bindgen_anon_1.imm_data })),
        qp_num: wc.qp_num,
        bufs,
        retired,
        op,
    }
}

impl Default for Table {
    fn default() -> Self {
        Table::with_capacity(0)
    }
}

impl Table {
    /// A table with room for `n` work requests in flight before it grows.
    pub(crate) fn with_capacity(n: usize) -> Table {
        Table {
            slots: Vec::with_capacity(n),
            free: NIL,
            sq: QpMap::default(),
            pending: VecDeque::new(),
            stash: Default::default(),
            stash_at: 0,
            stash_len: 0,
            spare: Vec::new(),
            sq_seq: 0,
            ring: RecvRing::default(),
            send_ring: SendRing::default(),
            done: None,
            drained: false,
        }
    }

    /// The completion of the [`Polled::Done`] just handed out (see [`Polled::into_completion`]).
    #[cold]
    fn take_done(&mut self) -> Completion {
        match self.done.take() {
            Some(d) => d.into_completion(),
            None => unreachable!("a Polled::Done's completion is taken once, by its owner"),
        }
    }

    /// Records a posted work request; returns the internal id to post with, or the buffers
    /// back when the table holds `u32::MAX - 1` entries already.
    #[inline(always)]
    pub(crate) fn push(
        &mut self,
        qpn: u32,
        recv: bool,
        wr_id: u64,
        bufs: Bufs,
        op: &'static str,
    ) -> std::result::Result<u64, Bufs> {
        let i = if self.free != NIL {
            let i = self.free;
            self.free = self.slots[i as usize].next;
            i
        } else {
            let Some(i) = u32::try_from(self.slots.len()).ok().filter(|&i| i != NIL) else {
                return Err(bufs);
            };
            self.slots.push(Slot {
                id: 0,
                gen: 0,
                qpn: 0,
                next: NIL,
                seq: 0,
                entry: None,
            });
            i
        };
        // Generations 1..=GEN_MASK: an id is never 0 (a free slot's). A free slot's generation
        // is below GEN_MASK (`release`), so this one is new for the slot.
        let gen = self.slots[i as usize].gen + 1;
        let id = u64::from(i) | (u64::from(gen) << 32) | if recv { RECV_BIT } else { 0 };
        let seq = if recv { 0 } else { self.next_seq() };
        self.slots[i as usize] = Slot {
            id,
            gen,
            qpn,
            next: NIL,
            seq,
            entry: Some(Entry { wr_id, bufs, op }),
        };
        if !recv {
            let c = self.sq.get_or_default(qpn);
            if c.tail == NIL {
                c.head = i;
            } else {
                self.slots[c.tail as usize].next = i;
            }
            c.tail = i;
        }
        Ok(id)
    }

    /// The next number of the send-queue sequence, for a send about to be posted.
    #[inline(always)]
    pub(crate) fn next_seq(&mut self) -> u64 {
        self.sq_seq += 1;
        self.sq_seq
    }

    /// Takes back the entry just pushed with `id` (the post failed).
    pub(crate) fn unpush(&mut self, qpn: u32, id: u64) -> Option<Entry> {
        let i = (id & INDEX_MASK) as u32;
        if self.slots.get(i as usize).is_none_or(|s| s.id != id) {
            return None;
        }
        if id & RECV_BIT == 0 {
            // The newest send of its QP: unlink it from the chain's tail.
            let c = self.sq.get_mut(qpn)?;
            if c.head == i {
                c.head = NIL;
                c.tail = NIL;
            } else {
                let mut p = c.head;
                while p != NIL && self.slots[p as usize].next != i {
                    p = self.slots[p as usize].next;
                }
                if p != NIL {
                    self.slots[p as usize].next = NIL;
                    c.tail = p;
                }
            }
        }
        release(&mut self.slots, &mut self.free, i)
    }

    /// Work requests of QP `qpn` still in flight.
    #[cfg(test)]
    fn outstanding(&self, qpn: u32) -> usize {
        self.slots
            .iter()
            .filter(|s| s.id != 0 && s.qpn == qpn)
            .count()
    }

    pub(super) fn has_entries(&self, qpn: u32) -> bool {
        self.slots.iter().any(|s| s.id != 0 && s.qpn == qpn)
    }

    /// Removes every entry of a destroyed QP.
    pub(super) fn purge(&mut self, qpn: u32) -> Vec<Entry> {
        let mut out = Vec::new();
        for i in 0..self.slots.len() {
            let s = &self.slots[i];
            if s.id != 0 && s.qpn == qpn {
                out.extend(release(&mut self.slots, &mut self.free, i as u32));
            }
        }
        self.sq.remove(qpn);
        self.pending.retain(|c| c.qp_num != qpn);
        // Stashed completions of this QP would find no entry: nothing to drop there.
        out
    }

    /// The next completion already taken from the CQ: polled for someone else, or stashed.
    #[inline(always)]
    pub(crate) fn take_polled(&mut self) -> Option<Polled> {
        if let Some(c) = self.pending.pop_front() {
            return Some(Polled::Full(Box::new(c)));
        }
        self.take_stashed()
    }

    /// [`take_polled`](Self::take_polled) from the stash only, for a caller that found nothing
    /// pending and holds the table since (nothing can have been added there).
    #[inline(always)]
    pub(crate) fn take_stashed(&mut self) -> Option<Polled> {
        while self.stash_at < self.stash_len {
            let at = self.stash_at;
            self.stash_at += 1;
            // The usual one, a ring receive, is matched in place (no copy of the raw completion).
            if RecvRing::is_ring_id(self.stash[at].wr_id) {
                if let Some(r) = self.ring.complete(&self.stash[at]) {
                    return Some(match r {
                        Ok(d) => Polled::Ring(d),
                        Err(c) => Polled::Full(c),
                    });
                }
                continue;
            }
            let wc = self.stash[at];
            if is_send_ring_id(wc.wr_id) {
                if let Some(c) = self.complete_send_ring(&wc) {
                    return Some(c);
                }
                continue;
            }
            if let Some(c) = self.complete_lean(&wc) {
                return Some(c);
            }
        }
        None
    }

    /// The slot a raw completion names, if it is in use by that work request of that QP.
    #[inline(always)]
    fn slot_of(&self, wc: &sys::ibv_wc) -> Option<(u32, &Slot)> {
        let i = (wc.wr_id & INDEX_MASK) as u32;
        let s = self.slots.get(i as usize)?;
        (wc.wr_id != 0 && s.id == wc.wr_id && s.qpn == wc.qp_num).then_some((i, s))
    }

    /// [`complete`](Self::complete), as a [`Done`] when the work request held one exclusive
    /// buffer, succeeded and retires nothing (or as a send ring's [`Polled::Sent`]).
    #[inline(always)]
    pub(super) fn complete_lean(&mut self, wc: &sys::ibv_wc) -> Option<Polled> {
        if RecvRing::is_ring_id(wc.wr_id) {
            return self.ring.complete(wc).map(|r| match r {
                Ok(d) => Polled::Ring(d),
                Err(c) => Polled::Full(c),
            });
        }
        if is_send_ring_id(wc.wr_id) {
            return self.complete_send_ring(wc);
        }
        let (i, s) = self.slot_of(wc)?;
        let one_local = matches!(
            s.entry.as_ref().map(|e| e.bufs.as_slice()),
            Some([Buf::Local(_)])
        );
        if wc.status != sys::IBV_WC_SUCCESS || !one_local {
            return self.complete(wc).map(|c| Polled::Full(Box::new(c)));
        }
        if wc.wr_id & RECV_BIT == 0 {
            let seq = s.seq;
            let c = self.sq.get_mut(wc.qp_num)?;
            if c.head != i {
                // Earlier unsignaled sends retire with it: in a full completion's list.
                return self.complete(wc).map(|c| Polled::Full(Box::new(c)));
            }
            c.head = self.slots[i as usize].next;
            if c.head == NIL {
                c.tail = NIL;
            }
            self.send_ring.retire_before(seq);
        }
        let mut e = release(&mut self.slots, &mut self.free, i)?;
        let Some(Buf::Local(buf)) = e.bufs.pop() else {
            unreachable!("checked above: one exclusive buffer");
        };
        let with_imm = wc.wc_flags & sys::IBV_WC_WITH_IMM.0 != 0;
        self.done = Some(Done {
            wr_id: e.wr_id,
            opcode: WcOpcode::from_raw(wc.opcode),
            byte_len: wc.byte_len,
            // SAFETY: `imm_data` is the active union member when IBV_WC_WITH_IMM is set.
            imm: with_imm.then(|| u32::from_be(unsafe { wc.__bindgen_anon_1.imm_data })),
            qp_num: wc.qp_num,
            buf,
            op: e.op,
        });
        Some(Polled::Done)
    }

    /// Matches a send ring slot's raw completion: the ring's sends up to it are free again, and
    /// so are the table's older sends of its QP (unsignaled ones, retired with it: then, or on
    /// an error, the completion is a full one with them in its retired list). `None` for a
    /// slot that is not posted (not ours).
    #[inline(always)]
    pub(super) fn complete_send_ring(&mut self, wc: &sys::ibv_wc) -> Option<Polled> {
        let seq = self.send_ring.complete(wc.wr_id as u32)?;
        let head = self.sq.get_mut(wc.qp_num).map_or(NIL, |c| c.head);
        let older = head != NIL && self.slots[head as usize].seq < seq;
        if wc.status == sys::IBV_WC_SUCCESS && !older {
            return Some(Polled::Sent {
                wr_id: self.send_ring.wr_id,
                qp_num: wc.qp_num,
            });
        }
        let mut retired = Vec::new();
        if older {
            retired = std::mem::take(&mut self.spare);
            let p = retire_while(
                &mut self.slots,
                &mut self.free,
                head,
                &mut retired,
                |_, s| s.seq < seq,
            );
            if let Some(c) = self.sq.get_mut(wc.qp_num) {
                c.head = p;
                if p == NIL {
                    c.tail = NIL;
                }
            }
        }
        let c = full(wc, self.send_ring.wr_id, Bufs::new(), retired, "SEND");
        Some(Polled::Full(Box::new(c)))
    }

    /// How many of the send ring's sends completed (signaled or retired) since the last call.
    #[inline(always)]
    pub(crate) fn take_retired(&mut self) -> usize {
        self.send_ring.take_retired()
    }

    /// Keeps an emptied retired list (its capacity) for the next completion that retires sends.
    #[inline(always)]
    pub(crate) fn recycle(&mut self, v: Vec<Retired>) {
        if v.is_empty() && v.capacity() > self.spare.capacity() {
            self.spare = v;
        }
    }

    /// Moves the stashed completions to `pending` (matched, in order).
    pub(super) fn unstash(&mut self) {
        while self.stash_at < self.stash_len {
            let wc = self.stash[self.stash_at];
            self.stash_at += 1;
            if let Some(c) = self.complete(&wc) {
                self.pending.push_back(c);
            }
        }
    }

    /// Matches a raw completion to its entry; work queues complete in order, so entries before
    /// it (unsignaled sends) are retired with it. Unknown ids (a destroyed QP's) give None.
    #[inline(always)]
    pub(super) fn complete(&mut self, wc: &sys::ibv_wc) -> Option<Completion> {
        if RecvRing::is_ring_id(wc.wr_id) {
            return self.ring.complete(wc).map(|r| match r {
                Ok(d) => Polled::Ring(d).into_completion(self),
                Err(c) => *c,
            });
        }
        if is_send_ring_id(wc.wr_id) {
            return self.complete_send_ring(wc).map(|p| p.into_completion(self));
        }
        let (i, s) = self.slot_of(wc)?;
        let seq = s.seq;
        let mut retired = Vec::new();
        if wc.wr_id & RECV_BIT == 0 {
            // The send ring's older sends finished with it too.
            self.send_ring.retire_before(seq);
            let c = self.sq.get_mut(wc.qp_num)?;
            // Sends complete in order: the ones before this (unsignaled) finished with it.
            if c.head != i {
                let (mut n, mut p) = (0, c.head);
                while p != i && p != NIL {
                    n += 1;
                    p = self.slots[p as usize].next;
                }
                // The list of an earlier completion, if its owner handed it back: no allocation.
                retired = std::mem::take(&mut self.spare);
                retired.reserve_exact(n);
            }
            retire_while(
                &mut self.slots,
                &mut self.free,
                c.head,
                &mut retired,
                |p, _| p != i,
            );
            c.head = self.slots[i as usize].next;
            if c.head == NIL {
                c.tail = NIL;
            }
        }
        let mine = release(&mut self.slots, &mut self.free, i)?;
        Some(full(wc, mine.wr_id, mine.bufs, retired, mine.op))
    }
}

#[cfg(test)]
pub(super) mod tests;
