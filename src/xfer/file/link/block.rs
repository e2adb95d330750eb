//! Running the drivers' futures on a blocking link (for the [`Link`](super::Link)
//! implementations that block): [`block_on`] polls one on this thread,
//! parking it while the future waits on a worker (a channel of [`flume`]); [`on_threads`] runs
//! a session's streams on a thread each.

use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::{pin, Pin};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, Thread};
use std::time::Duration;

/// Wakes the thread that polls.
struct Unpark(Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// Runs `f` to its end on this thread. A blocking link's waits block inside `poll`; this
/// thread parks only while `f` waits on another thread (which wakes it).
pub fn block_on<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    let waker = Waker::from(Arc::new(Unpark(thread::current())));
    let mut cx = Context::from_waker(&waker);
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        // A wake before this park makes it return at once (thread::park's token).
        thread::park();
    }
}

/// Blocks until `woken` is notified, at most `d`.
pub fn wait_woken(woken: event_listener::EventListener, d: Duration) {
    use event_listener::Listener;
    let _ = woken.wait_timeout(d);
}

/// Runs each of `streams` on a thread of its own, and `relay` on this one, to their ends.
pub fn on_threads<F, G>(streams: Vec<F>, relay: G) -> Vec<thread::Result<F::Output>>
where
    F: Future + Send,
    F::Output: Send,
    G: Future<Output = ()>,
{
    thread::scope(|sc| {
        let running: Vec<_> = streams
            .into_iter()
            .map(|f| sc.spawn(move || block_on(f)))
            .collect();
        block_on(relay);
        running.into_iter().map(|t| t.join()).collect()
    })
}

/// Runs `streams` and `relay` to their ends on the task that awaits this, polled in turn (an
/// async link's [`run_streams`](super::Link::run_streams)). A stream that panics is `Err`;
/// the others go on.
pub async fn on_one_task<F, G>(streams: Vec<F>, relay: G) -> Vec<thread::Result<F::Output>>
where
    F: Future,
    G: Future<Output = ()>,
{
    let mut running: Vec<Option<Pin<Box<F>>>> =
        streams.into_iter().map(|f| Some(Box::pin(f))).collect();
    let mut ended: Vec<Option<thread::Result<F::Output>>> =
        running.iter().map(|_| None).collect();
    let mut relay = Some(Box::pin(relay));
    std::future::poll_fn(|cx| {
        for (slot, out) in running.iter_mut().zip(ended.iter_mut()) {
            let Some(f) = slot else { continue };
            match catch_unwind(AssertUnwindSafe(|| f.as_mut().poll(cx))) {
                Ok(Poll::Pending) => continue,
                Ok(Poll::Ready(v)) => *out = Some(Ok(v)),
                Err(panic) => *out = Some(Err(panic)),
            }
            // Ended: dropped now (what it holds, e.g. its sender of events, goes with it).
            *slot = None;
        }
        if let Some(r) = &mut relay {
            if r.as_mut().poll(cx).is_ready() {
                relay = None;
            }
        }
        match running.iter().all(Option::is_none) && relay.is_none() {
            true => Poll::Ready(()),
            false => Poll::Pending,
        }
    })
    .await;
    ended
        .into_iter()
        .map(|r| r.expect("every stream ended"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_future_waiting_on_another_thread_is_woken_and_streams_run_at_once() {
        let (tx, rx) = flume::bounded::<u32>(0);
        let sender = thread::spawn(move || tx.send(7));
        assert_eq!(block_on(rx.recv_async()), Ok(7));
        sender.join().unwrap().unwrap();
        // Two streams that each wait for the other: they only end if they run together.
        let (a_tx, a_rx) = flume::bounded::<u32>(0);
        let (b_tx, b_rx) = flume::bounded::<u32>(0);
        let one = async move {
            a_tx.send_async(1).await.unwrap();
            b_rx.recv_async().await.unwrap()
        };
        let two = async move {
            let got = a_rx.recv_async().await.unwrap();
            b_tx.send_async(got + 1).await.unwrap();
            got
        };
        let streams: Vec<std::pin::Pin<Box<dyn Future<Output = u32> + Send>>> =
            vec![Box::pin(one), Box::pin(two)];
        let got: Vec<u32> = on_threads(streams, async {})
            .into_iter()
            .map(|r| r.unwrap())
            .collect();
        assert_eq!(got, [2, 1]);
    }

    #[test]
    fn streams_on_one_task_wait_on_each_other_and_a_panic_is_an_error() {
        // Two streams that wait for each other end on one task (block_on polls one future);
        // the relay hears from both, and ends once both have dropped their senders.
        let (a_tx, a_rx) = flume::bounded::<u32>(0);
        let (b_tx, b_rx) = flume::bounded::<u32>(0);
        let (ev_tx, ev_rx) = flume::unbounded::<u32>();
        let ev2 = ev_tx.clone();
        let one = async move {
            a_tx.send_async(1).await.unwrap();
            let got = b_rx.recv_async().await.unwrap();
            ev_tx.send(got).unwrap();
            got
        };
        let two = async move {
            let got = a_rx.recv_async().await.unwrap();
            b_tx.send_async(got + 1).await.unwrap();
            ev2.send(got).unwrap();
            if got == 1 {
                panic!("test: a stream panics");
            }
            got
        };
        let mut heard = Vec::new();
        let relay = async {
            while let Ok(v) = ev_rx.recv_async().await {
                heard.push(v);
            }
        };
        let streams: Vec<std::pin::Pin<Box<dyn Future<Output = u32> + Send>>> =
            vec![Box::pin(one), Box::pin(two)];
        let got = block_on(on_one_task(streams, relay));
        assert_eq!(*got[0].as_ref().unwrap(), 2);
        assert!(got[1].is_err(), "the panic is the second stream's result");
        heard.sort();
        assert_eq!(heard, [1, 2]);
    }
}
