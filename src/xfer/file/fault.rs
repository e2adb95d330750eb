//! Faults of the RDMA transport under a transfer: what each side says when the transport
//! delivers what the sender never posted (a data chunk twice or out of order, a chunk of the
//! wrong length, a packet the receiving device rejects as malformed), and the test hooks that
//! imitate such a fault. See "Transport faults" in `docs/file-protocol.md`.

use crate::error::Error;
use crate::xfer::file::names;
use crate::xfer::file::proto;

/// `IBV_WC_REM_INV_REQ_ERR`: the receiving device rejected a packet as malformed.
pub(crate) const REM_INV_REQ: u32 = 9;

/// What such a fault means and what to do, after what was seen.
const HINT: &str = "rdmaxfer posts each chunk once, in order, into the slot the receiver \
granted, so this is a fault of the RDMA transport (seen with Soft-RoCE, rdma_rxe, \
retransmitting on hosts starved of CPU); nothing of this file is committed: send it again \
(with --resume on both sides its verified part is kept), with fewer --streams if it recurs";

/// Test-only faults a sender injects (feature `test-hooks`; see `SendHooks`).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Faults {
    /// Flip a byte of this chunk (of the part being sent) after hashing it, every time it is
    /// sent.
    pub(crate) corrupt: Option<u64>,
    /// The same, the first time only (a repair round sends it right).
    pub(crate) corrupt_once: Option<u64>,
    /// After posting this chunk (of the part being sent), post a zero-length RDMA
    /// WRITE_WITH_IMM repeating its immediate: what a faulty transport's retransmission may
    /// deliver (a chunk's completion twice).
    pub(crate) replay: Option<u64>,
    /// After posting this chunk (of the part being sent), break the link (the queue pair to
    /// the error state), as a transport fault or a rail going down would.
    pub(crate) brk: Option<u64>,
}

impl Faults {
    /// The hooks of `corrupt`, `corrupt_once` and `replay` (chunks of the file) for the part
    /// that starts at chunk `first` of the file.
    pub(crate) fn for_part(
        [corrupt, corrupt_once, replay]: [Option<u64>; 3],
        first: u64,
    ) -> Faults {
        let own = |c: Option<u64>| c.and_then(|c| c.checked_sub(first));
        Faults {
            corrupt: own(corrupt),
            corrupt_once: own(corrupt_once),
            replay: own(replay),
            brk: None,
        }
    }

    /// Whether chunk `k` of the part is corrupted when sent (`again`: in a repair round).
    pub(crate) fn corrupts(&self, k: u64, again: bool) -> bool {
        self.corrupt == Some(k) || (!again && self.corrupt_once == Some(k))
    }
}

/// Names the part of a file a stream moves, for errors: "stream 2, stripe 2 of 4 of NAME" or
/// "NAME" (printable, shortened as on the wire).
pub(crate) fn part_label(stream: Option<u16>, stripe: Option<(u16, u16)>, name: &str) -> String {
    let name = proto::truncate_text(&names::printable(name));
    let mut s = String::new();
    if let Some(i) = stream {
        s.push_str(&format!("stream {i}, "));
    }
    if let Some((i, n)) = stripe {
        s.push_str(&format!("stripe {i} of {n} of "));
    }
    s + &name
}

/// Receiver: a data chunk whose sequence number is not the next one.
pub(crate) fn out_of_sequence(label: &str, got: u16, len: u32, slot: u16, want: u16) -> Error {
    Error::Protocol(format!(
        "{label}: the RDMA transport delivered data chunk {got} ({len} bytes, into slot {slot}) \
         where chunk {want} (mod 65536) was expected, a chunk repeated or out of order; {HINT}"
    ))
}

/// Receiver: a data chunk of another length than the sender's.
pub(crate) fn wrong_length(label: &str, seq: u16, len: u32, want: usize) -> Error {
    Error::Protocol(format!(
        "{label}: the RDMA transport delivered data chunk {seq} with {len} bytes where the \
         sender wrote {want}; {HINT}"
    ))
}

/// Either side: `e`, unless it is a completion with status "remote invalid request" while the
/// data of `label` moved: then what it means. `chunk`: the chunk being received; `None` on the
/// sender, whose work request ids are the chunks' numbers.
pub(crate) fn invalid_request(label: &str, chunk: Option<u64>, e: Error) -> Error {
    let wr_id = match &e {
        Error::Completion { wr_id, status, .. } if *status == REM_INV_REQ => *wr_id,
        _ => return e,
    };
    let what = match chunk {
        None => format!(
            "the receiver's RDMA device rejected a packet of data chunk {wr_id} as malformed"
        ),
        Some(c) => format!("this RDMA device rejected a packet of data chunk {c} as malformed"),
    };
    Error::Connection(format!(
        "{label}: {what} (completion status {REM_INV_REQ}, remote invalid request). Unless the \
         two hosts use different path MTUs (with --oob, -m must be the same on both sides), \
         {HINT}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transport_faults_name_the_stream_and_what_to_do() {
        let label = part_label(Some(2), Some((2, 4)), "f\n.bin");
        assert_eq!(label, "stream 2, stripe 2 of 4 of f\\u{a}.bin");
        assert_eq!(part_label(None, None, "a"), "a");
        let e = out_of_sequence(&label, 2, 0, 2, 3).to_string();
        for want in [
            "stream 2, stripe 2 of 4",
            "chunk 2 (0 bytes, into slot 2) where chunk 3",
            "fault of the RDMA transport",
            "nothing of this file is committed",
            "send it again",
        ] {
            assert!(e.contains(want), "{want:?} in {e}");
        }
        let c = Error::Completion {
            op: "RDMA WRITE_WITH_IMM",
            wr_id: 5,
            status: REM_INV_REQ,
            status_str: "remote invalid request error".into(),
            vendor_err: 0,
        };
        let e = invalid_request(&label, None, c).to_string();
        assert!(e.contains("stream 2, stripe 2 of 4"), "{e}");
        assert!(e.contains("rejected a packet of data chunk 5"), "{e}");
        assert!(e.contains("send it again"), "{e}");
        assert!(e.contains("-m must be the same on both sides"), "{e}");
        // Other errors pass unchanged.
        let t = Error::Protocol("x".into());
        assert_eq!(
            invalid_request(&label, Some(5), t).to_string(),
            "protocol error: x"
        );
        let f = Faults::for_part([Some(70), Some(65), Some(64)], 64);
        assert_eq!(
            (f.corrupt, f.corrupt_once, f.replay),
            (Some(6), Some(1), Some(0))
        );
        assert_eq!(Faults::for_part([Some(3), None, None], 64).corrupt, None);
        assert!(f.corrupts(6, false) && f.corrupts(6, true));
        assert!(f.corrupts(1, false) && !f.corrupts(1, true));
    }
}
