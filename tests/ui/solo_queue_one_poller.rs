// A SoloQueue's CQ has no lock: it is polled through `&mut self`, so two threads cannot poll it
// at once. (A shared `CompletionQueue` is the type that allows that.)
use rdmaxfer::verbs::SoloQueue;

fn misuse(q: &mut SoloQueue) {
    std::thread::scope(|s| {
        s.spawn(|| q.poll_one());
        s.spawn(|| q.poll_one());
    });
}

fn shared_misuse(q: &SoloQueue) {
    std::thread::scope(|s| {
        s.spawn(|| q.poll_one());
    });
}

fn main() {}
