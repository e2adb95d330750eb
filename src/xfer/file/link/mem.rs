//! A [`Link`] in memory: two ends in one process, with the credits, the message size limit and
//! the ring a peer writes into that an [`Endpoint`](crate::xfer::endpoint::Endpoint) has, so
//! whole file sessions (both sides, or one side and a scripted peer) run on a host without a
//! device. A write lands in the ring when it is posted and completes at once; a credit goes back
//! as soon as the receiver has taken the message.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::{withdrawn, Link, Registrar, StagingMem};
use crate::error::{Error, Result};
use crate::verbs::{RemoteRegion, RemoteSlice};
use crate::xfer::endpoint::Message;
use crate::xfer::file::options::FILE_MSG_LEN;

/// What arrives at one end.
enum Arrival {
    Msg(Vec<u8>),
    Write { imm: u32, len: u32 },
}

/// One end's view of the link.
#[derive(Default)]
struct End {
    inbox: VecDeque<Arrival>,
    /// Messages (SEND or WRITE_WITH_IMM) this end may still send before the peer takes one.
    credits: u32,
    /// Completed writes of this end not polled yet, and their buffers.
    writes_done: usize,
    done_bufs: Vec<Vec<u8>>,
    gone: bool,
    /// Broken by [`Link::break_link`]: its own calls fail; the peer hears nothing more.
    broken: bool,
}

/// A staging ring's memory, named by its rkey.
type RingMem = Arc<Mutex<Vec<u8>>>;

#[derive(Default)]
struct State {
    ends: [End; 2],
    rings: HashMap<u32, (u64, RingMem)>,
    next_rkey: u32,
}

struct Shared {
    state: Mutex<State>,
    cv: Condvar,
    /// Notified with `cv`, for the ends that wait as futures ([`MemLink::yielding`]).
    #[cfg(test)]
    event: event_listener::Event,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Wakes every waiting end.
    fn notify(&self) {
        self.cv.notify_all();
        #[cfg(test)]
        self.event.notify(usize::MAX);
    }
}

/// One end of a link in memory (see the module docs). Dropping it is the peer's disconnect.
pub struct MemLink {
    shared: Arc<Shared>,
    /// Waits as a future on tokio's clock instead of blocking (tests only).
    #[cfg(test)]
    yields: bool,
    side: usize,
    depth: u32,
    timeout: Duration,
    max_msg: usize,
}

impl std::fmt::Debug for MemLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MemLink(end {}, {} receives)", self.side, self.depth)
    }
}

impl MemLink {
    /// Two connected ends keeping `depth_a` and `depth_b` receives posted (each the other's
    /// credits), with the file protocol's message size limit and a 10 s step deadline.
    pub fn pair(depth_a: u32, depth_b: u32) -> (MemLink, MemLink) {
        let mut state = State {
            next_rkey: 1,
            ..State::default()
        };
        state.ends[0].credits = depth_b.max(1);
        state.ends[1].credits = depth_a.max(1);
        let shared = Arc::new(Shared {
            state: Mutex::new(state),
            cv: Condvar::new(),
            #[cfg(test)]
            event: event_listener::Event::new(),
        });
        let end = |side, depth: u32| MemLink {
            shared: shared.clone(),
            side,
            depth: depth.max(1),
            timeout: Duration::from_secs(10),
            // As two rdmaxfer endpoints agree (`options::FILE_MSG_LEN`).
            max_msg: FILE_MSG_LEN,
            #[cfg(test)]
            yields: false,
        };
        (end(0, depth_a), end(1, depth_b))
    }

    /// This end, waiting as a future on tokio's clock (an async link's behaviour; tests only:
    /// see [`TaskLink`](super::task::TaskLink)).
    #[cfg(test)]
    pub(crate) fn yielding(mut self) -> MemLink {
        self.yields = true;
        self
    }

    fn peer(&self) -> usize {
        1 - self.side
    }

    /// Waits, at most the timeout, until `ready` says what to return: on the condition
    /// variable, or as a future ([`yielding`](Self::yielding)).
    async fn wait<T>(
        &self,
        what: &'static str,
        ready: impl FnMut(&mut State, usize) -> Option<Result<T>>,
    ) -> Result<T> {
        #[cfg(test)]
        if self.yields {
            return self.wait_yielding(what, ready).await;
        }
        self.wait_blocking(what, ready)
    }

    /// [`wait`](Self::wait) on the condition variable.
    fn wait_blocking<T>(
        &self,
        what: &'static str,
        mut ready: impl FnMut(&mut State, usize) -> Option<Result<T>>,
    ) -> Result<T> {
        let deadline = Instant::now() + self.timeout;
        let mut st = self.shared.lock();
        loop {
            if st.ends[self.side].broken {
                return Err(broken());
            }
            if let Some(r) = ready(&mut st, self.side) {
                return r;
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(Error::Timeout {
                    what,
                    after: self.timeout,
                });
            }
            st = self
                .shared
                .cv
                .wait_timeout(st, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// [`wait`](Self::wait) as a future, on tokio's clock (tests only).
    #[cfg(test)]
    async fn wait_yielding<T>(
        &self,
        what: &'static str,
        mut ready: impl FnMut(&mut State, usize) -> Option<Result<T>>,
    ) -> Result<T> {
        let deadline = tokio::time::Instant::now() + self.timeout;
        loop {
            let woken = self.shared.event.listen();
            {
                let mut st = self.shared.lock();
                if st.ends[self.side].broken {
                    return Err(broken());
                }
                if let Some(r) = ready(&mut st, self.side) {
                    return r;
                }
            }
            if tokio::time::timeout_at(deadline, woken).await.is_err() {
                return Err(Error::Timeout {
                    what,
                    after: self.timeout,
                });
            }
        }
    }

    /// Spends a credit and queues `a` at the peer; fails when the peer has gone.
    async fn push(
        &self,
        what: &'static str,
        a: impl FnOnce(&mut State) -> Result<Arrival>,
    ) -> Result<()> {
        let peer = self.peer();
        let mut a = Some(a);
        let r = self.wait(what, |st, me| {
            if st.ends[peer].gone {
                return Some(Err(disconnected()));
            }
            if st.ends[me].credits == 0 {
                return None;
            }
            let a = a.take().expect("called once: it ends the wait");
            Some(a(st).map(|arrival| {
                st.ends[me].credits -= 1;
                st.ends[peer].inbox.push_back(arrival);
            }))
        }).await;
        self.shared.notify();
        r
    }
}

fn disconnected() -> Error {
    Error::Connection("the peer disconnected".into())
}

fn broken() -> Error {
    Error::Connection("the link broke (test hook)".into())
}

impl Drop for MemLink {
    fn drop(&mut self) {
        let mut st = self.shared.lock();
        // A broken end goes silently, as over a dead rail: the peer hears nothing more.
        if !st.ends[self.side].broken {
            st.ends[self.side].gone = true;
        }
        drop(st);
        self.shared.notify();
    }
}

impl Link for MemLink {
    type Buf = Vec<u8>;
    type Ring = MemRing;

    async fn send(&mut self, data: &[u8]) -> Result<()> {
        if data.len() > self.max_msg {
            return Err(Error::InvalidArgument(format!(
                "message of {} bytes exceeds the limit of {}",
                data.len(),
                self.max_msg
            )));
        }
        self.push("send credit from the peer", |_| {
            Ok(Arrival::Msg(data.to_vec()))
        }).await
    }

    async fn recv_with<R: Send>(&mut self, f: impl FnOnce(Message<'_>) -> R + Send) -> Result<R> {
        let peer = self.peer();
        let got = self.wait("a message from the peer", |st, me| {
            match st.ends[me].inbox.pop_front() {
                Some(a) => Some(Ok(a)),
                None if st.ends[peer].gone => Some(Err(disconnected())),
                None => None,
            }
        }).await?;
        let r = match &got {
            Arrival::Msg(data) => f(Message {
                data,
                imm: None,
                rdma_write_len: None,
            }),
            Arrival::Write { imm, len } => f(Message {
                data: &[],
                imm: Some(*imm),
                rdma_write_len: Some(*len),
            }),
        };
        // Taken: the receive is posted again, and its credit goes back.
        self.shared.lock().ends[peer].credits += 1;
        self.shared.notify();
        Ok(r)
    }

    fn has_message(&mut self) -> Result<bool> {
        Ok(!self.shared.lock().ends[self.side].inbox.is_empty())
    }

    async fn wait_send_or_message(&mut self) -> Result<bool> {
        let peer = self.peer();
        self.wait("send credit from the peer or a message", |st, me| {
            if st.ends[me].credits > 0 {
                Some(Ok(true))
            } else if !st.ends[me].inbox.is_empty() {
                Some(Ok(false))
            } else if st.ends[peer].gone {
                Some(Err(disconnected()))
            } else {
                None
            }
        }).await
    }

    async fn flush(&mut self) -> Result<()> {
        let peer = self.peer();
        self.wait("the last sends to complete", |st, _| {
            (st.ends[peer].inbox.is_empty() || st.ends[peer].gone).then_some(Ok(()))
        }).await
    }

    fn last_words(&mut self) -> Option<Vec<u8>> {
        let mut st = self.shared.lock();
        let inbox = &mut st.ends[self.side].inbox;
        while let Some(a) = inbox.pop_front() {
            if let Arrival::Msg(m) = a {
                return Some(m);
            }
        }
        None
    }

    fn timeout(&self) -> Duration {
        self.timeout
    }

    fn set_timeout(&mut self, t: Duration) {
        self.timeout = t;
    }

    fn recv_depth(&self) -> u32 {
        self.depth
    }
    fn max_msg_size(&self) -> usize {
        self.max_msg
    }

    fn trace_id(&self) -> u32 {
        self.side as u32
    }

    fn peer_name(&self) -> String {
        format!("end {} in memory", self.peer())
    }

    fn device_name(&self) -> String {
        "memory".into()
    }

    fn rail_down(&self) -> bool {
        false
    }

    fn break_link(&mut self) -> Result<()> {
        self.shared.lock().ends[self.side].broken = true;
        self.shared.notify();
        Ok(())
    }

    async fn close(mut self) -> Result<()> {
        self.flush().await
    }

    fn expose_ring(&mut self, len: usize) -> Result<MemRing> {
        if len == 0 {
            return Err(Error::InvalidArgument(
                "cannot expose an empty region".into(),
            ));
        }
        let mut st = self.shared.lock();
        let rkey = st.next_rkey;
        st.next_rkey = rkey.wrapping_add(1);
        // Rings far apart, none at address 0.
        let addr = u64::from(rkey) << 40;
        let mem = Arc::new(Mutex::new(vec![0u8; len]));
        st.rings.insert(rkey, (addr, mem.clone()));
        Ok(MemRing {
            shared: self.shared.clone(),
            region: RemoteRegion {
                addr,
                rkey,
                len: len as u64,
            },
            mem,
        })
    }

    fn registrar(&self) -> Registrar<Vec<u8>> {
        Box::new(|len, count| Ok((0..count).map(|_| vec![0u8; len]).collect()))
    }

    async fn wait_credit(&mut self) -> Result<()> {
        let peer = self.peer();
        self.wait("send credit from the peer", |st, me| {
            if st.ends[me].credits > 0 {
                Some(Ok(()))
            } else if st.ends[peer].gone {
                Some(Err(disconnected()))
            } else {
                None
            }
        }).await
    }

    fn write_imm(
        &mut self,
        _wr_id: u64,
        to: RemoteSlice,
        imm: u32,
        buf: Option<(Vec<u8>, usize)>,
    ) -> std::result::Result<(), (Error, Vec<Vec<u8>>)> {
        let side = self.side;
        let (buf, n) = match buf {
            Some((b, n)) if n <= b.len() => (Some(b), n),
            Some((b, n)) => {
                let e = Error::InvalidArgument(format!("{n} bytes of a {}-byte buffer", b.len()));
                return Err((e, vec![b]));
            }
            None => (None, 0),
        };
        if n as u64 != u64::from(to.len) {
            let e = Error::InvalidArgument(format!("{n} bytes into a {}-byte slice", to.len));
            return Err((e, buf.into_iter().collect()));
        }
        // A credit is free (`wait_credit` came first): the push does not wait.
        let r = super::block::block_on(self.push("send credit from the peer", |st| {
            let data = buf.as_deref().map_or(&[][..], |b| &b[..n]);
            // A target outside every ring the peer exposes fails (as a remote access error
            // would), and nothing arrives.
            let landed = st.rings.get(&to.rkey).and_then(|(base, mem)| {
                let off = usize::try_from(to.addr.checked_sub(*base)?).ok()?;
                let mut mem = mem.lock().unwrap_or_else(|p| p.into_inner());
                mem.get_mut(off..off.checked_add(n)?)?.copy_from_slice(data);
                Some(())
            });
            if landed.is_none() {
                return Err(withdrawn(Error::OutOfBounds {
                    offset: to.addr,
                    len: n as u64,
                    region_len: 0,
                }));
            }
            st.ends[side].writes_done += 1;
            st.ends[side].done_bufs.extend(buf);
            Ok(Arrival::Write { imm, len: n as u32 })
        }));
        r.map_err(|e| (e, Vec::new()))
    }

    async fn poll_writes(
        &mut self,
        max: usize,
        timeout: Duration,
    ) -> Result<(usize, Vec<Vec<u8>>)> {
        let saved = std::mem::replace(&mut self.timeout, timeout);
        let r = self.wait("a work completion", |st, me| {
            let end = &mut st.ends[me];
            if end.writes_done == 0 {
                return None;
            }
            let n = end.writes_done.min(max.max(1));
            end.writes_done -= n;
            let keep = end.done_bufs.len().saturating_sub(n);
            Some(Ok((n, end.done_bufs.split_off(keep))))
        }).await;
        self.timeout = saved;
        r
    }
    async fn sleep(d: Duration) {
        std::thread::sleep(d);
    }
    async fn wait_woken(woken: super::EventListener, d: Duration) {
        super::block::wait_woken(woken, d);
    }
    async fn run_streams<F, G>(streams: Vec<F>, relay: G) -> Vec<std::thread::Result<F::Output>>
    where
        F: std::future::Future + Send,
        F::Output: Send,
        G: std::future::Future<Output = ()>,
    {
        super::block::on_threads(streams, relay)
    }
}

/// A staging ring in memory ([`MemLink::expose_ring`]).
pub struct MemRing {
    shared: Arc<Shared>,
    region: RemoteRegion,
    mem: RingMem,
}

impl std::fmt::Debug for MemRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MemRing({:?})", self.region)
    }
}

impl StagingMem for MemRing {
    fn descriptor(&self) -> RemoteRegion {
        self.region
    }

    fn read_at(&self, off: usize, dst: &mut [u8]) -> Result<()> {
        let mem = self.mem.lock().unwrap_or_else(|p| p.into_inner());
        let src = off
            .checked_add(dst.len())
            .and_then(|end| mem.get(off..end))
            .ok_or(Error::OutOfBounds {
                offset: off as u64,
                len: dst.len() as u64,
                region_len: mem.len() as u64,
            })?;
        dst.copy_from_slice(src);
        Ok(())
    }

    fn revoke(self) -> Result<()> {
        self.shared.lock().rings.remove(&self.region.rkey);
        Ok(())
    }
}

impl Drop for MemRing {
    fn drop(&mut self) {
        self.shared.lock().rings.remove(&self.region.rkey);
    }
}
