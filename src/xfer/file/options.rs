//! What each side of a file transfer is asked to do: the receiver's policy and the sender's
//! choices, with the protocol's size limits.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::budget::Budgets;
use super::digest::Algo;
use super::proto::HelloFlags;
use super::send::filter::Filter;
use crate::error::{Error, Result};
use crate::xfer::endpoint::EndpointOptions;

/// Default chunk (ring slot) size.
pub const DEFAULT_CHUNK: u32 = 1 << 20;
/// Default number of ring slots (and chunks in flight).
pub const DEFAULT_SLOTS: u32 = 16;
/// Largest chunk: one RDMA WRITE of Soft-RoCE's 8 MiB maximum message.
pub const MAX_CHUNK: u32 = 8 << 20;
/// Largest ring the receiver exposes; the slot size is lowered to fit.
pub const MAX_RING_BYTES: u64 = 64 << 20;
/// Most ring slots.
pub const MAX_SLOTS: u32 = 1024;
/// Smallest slot the receiver offers for a small file.
pub(crate) const MIN_SLOT: u64 = 4096;
/// Smallest chunk size a HELLO may ask for (the receiver refuses smaller ones: a 1-byte chunk
/// would cost a completion, a copy and a credit per byte).
pub const MIN_CHUNK: u32 = 4096;

#[cfg(feature = "test-hooks")]
pub use hooks::{RecvHooks, SendHooks};
#[cfg(not(feature = "test-hooks"))]
pub(crate) use hooks::{RecvHooks, SendHooks};
#[cfg(not(feature = "test-hooks"))]
static NO_SEND_HOOKS: SendHooks = SendHooks::NONE;
#[cfg(not(feature = "test-hooks"))]
static NO_RECV_HOOKS: RecvHooks = RecvHooks {
    hold_stripe: None,
    break_streams: Vec::new(),
};

/// Faults and holds that rdmaxfer's own tests put into a transfer: public only with the cargo
/// feature `test-hooks` (which a build for use never has), set by the `rdmaxfer` tool from
/// `RDMAXFER_TEST_*` variables in such a build.
mod hooks {
    /// A sender's.
    #[derive(Clone, Debug, Default)]
    pub struct SendHooks {
        /// Flip a byte of this chunk (0-based, per file) after hashing it.
        pub corrupt_chunk: Option<u64>,
        /// Flip a byte of this chunk (0-based, per file) after hashing it, in its first send
        /// only: the receiver asks for it again (REPAIR) and the repair sends it right.
        pub corrupt_once: Option<u64>,
        /// With `corrupt_chunk` or `corrupt_once`, only the file of this name (as sent).
        pub corrupt_name: Option<String>,
        /// After posting this chunk (0-based, per file), post a zero-length RDMA
        /// WRITE_WITH_IMM repeating its immediate, as a faulty transport's retransmission may
        /// deliver (the receiver must name it and commit nothing).
        pub replay_chunk: Option<u64>,
        /// The stripe of this index (of every striped file) sends its data only once every
        /// other stripe of its file has its verdict (its stream waits, MR in hand).
        pub hold_stripe: Option<u16>,
        /// The stream of this index takes its first job only once every job left is its own
        /// (at most a minute), and the cap on striped files unfinished at once is off, so that
        /// half-sent files pile up at the receiver as a greedy peer's would.
        pub lag_stream: Option<u16>,
        /// `(stream, k)` each: the stream of this index breaks its link (its queue pair to the
        /// error state, as a rail going down does) after posting chunk k (0-based) of a stripe.
        pub break_streams: Vec<(u16, u64)>,
    }

    impl SendHooks {
        /// No hook.
        #[cfg_attr(feature = "test-hooks", allow(dead_code))]
        pub(crate) const NONE: SendHooks = SendHooks {
            corrupt_chunk: None,
            corrupt_once: None,
            corrupt_name: None,
            replay_chunk: None,
            hold_stripe: None,
            lag_stream: None,
            break_streams: Vec::new(),
        };
    }

    /// A receiver's.
    #[derive(Clone, Debug, Default)]
    pub struct RecvHooks {
        /// The stripe of this index (of every striped file) is answered (MR) only once every
        /// other stripe of its file has ended (the sender's stream waits for it).
        pub hold_stripe: Option<u16>,
        /// `(stream, k)` each: the stream of this index breaks its link (its queue pair to the
        /// error state) once chunk k (0-based) of a stripe has arrived.
        pub break_streams: Vec<(u16, u64)>,
    }
}

/// The receiver's policy.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ReceiverOptions {
    /// Where files go (must exist).
    pub out_dir: PathBuf,
    /// Shared secret; when set, senders must answer the challenge.
    pub token: Option<Vec<u8>>,
    /// Refuse files larger than this.
    pub max_size: Option<u64>,
    /// Allow senders to replace existing entries that differ (`send --force`, `--update`);
    /// without it such a request is refused, naming `recv --force`.
    pub force: bool,
    /// Keep partial files on failure and continue them when a sender asks to resume.
    pub resume: bool,
    /// Ring slots (= receives posted for the sender).
    pub slots: u32,
    /// Per-session limits (idle time, rate floor, refusals).
    pub budgets: Budgets,
    /// The only chunk verification accepted (`recv --verify`); `None` accepts any.
    pub verify: Option<Algo>,
    /// Faults and holds for rdmaxfer's own tests (feature `test-hooks`).
    #[cfg(feature = "test-hooks")]
    pub hooks: RecvHooks,
    /// Allow a sender to list the directories it sent in the session and to delete what it
    /// does not have there (`recv --allow-delete`, for `send --delete`); without it LIST and
    /// DELETE are refused (`not allowed`).
    pub allow_delete: bool,
    /// Stops the session when raised (looked at every 250 ms while it waits): the receiver
    /// commits nothing it has not verified whole, tells the sender (ERR) and ends with
    /// [`Error::Cancelled`].
    pub cancel: Cancel,
}

impl ReceiverOptions {
    /// The test hooks asked for (none without feature `test-hooks`).
    pub(crate) fn hooks(&self) -> &RecvHooks {
        #[cfg(feature = "test-hooks")]
        return &self.hooks;
        #[cfg(not(feature = "test-hooks"))]
        return &NO_RECV_HOOKS;
    }

    setters! {
        out_dir: PathBuf,
        token: Option<Vec<u8>>,
        max_size: Option<u64>,
        force: bool,
        resume: bool,
        slots: u32,
        budgets: Budgets,
        verify: Option<Algo>,
        allow_delete: bool,
        cancel: Cancel,
    }

    /// Receives into `out_dir` with defaults.
    pub fn new(out_dir: impl Into<PathBuf>) -> ReceiverOptions {
        ReceiverOptions {
            out_dir: out_dir.into(),
            token: None,
            max_size: None,
            force: false,
            resume: false,
            slots: DEFAULT_SLOTS,
            budgets: Budgets::default(),
            verify: None,
            #[cfg(feature = "test-hooks")]
            hooks: RecvHooks::default(),
            allow_delete: false,
            cancel: Cancel::new(),
        }
    }

    /// `base` adjusted for a receiving endpoint: control-message size, and `slots` receives.
    pub fn endpoint_options(&self, base: &EndpointOptions) -> EndpointOptions {
        EndpointOptions {
            msg_size: FILE_MSG_LEN,
            recv_depth: self.slots.clamp(1, MAX_SLOTS),
            send_depth: 4,
            extra_send_wr: 0,
            ..base.clone()
        }
    }
}

/// The control-message size of file-transfer endpoints: a BATCH of this many bytes carries
/// three 4 KiB files' DATA where [`MAX_MSG_LEN`](super::proto::MAX_MSG_LEN) carries one (an older peer's
/// endpoint asks for that: the two agree on the smaller).
pub const FILE_MSG_LEN: usize = 16 * 1024;

/// Receives a sending endpoint keeps posted: a window of entries in flight one smaller
/// ([`MAX_IN_FLIGHT`](super::proto::MAX_IN_FLIGHT) at most).
pub const SENDER_RECV_DEPTH: u32 = 65;

/// Stops a file transfer from elsewhere (another thread, or a progress callback): the sender
/// looks at it before each entry and each chunk, tells the receiver (ERR) and ends with
/// [`Error::Cancelled`]. The receiver commits nothing it has not verified whole, as after any
/// failure; what was committed before stays. Clones share one flag.
#[derive(Clone, Debug, Default)]
pub struct Cancel(Arc<AtomicBool>);

impl Cancel {
    /// A flag not yet raised.
    pub fn new() -> Cancel {
        Cancel::default()
    }

    /// Raises the flag: the transfer stops at its next entry or chunk.
    pub fn cancel(&self) {
        self.0.store(true, Ordering::Release);
    }

    /// Whether [`cancel`](Self::cancel) was called.
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }

    /// The flag itself (for waits that look at it).
    pub(crate) fn flag(&self) -> Arc<AtomicBool> {
        self.0.clone()
    }

    /// [`Error::Cancelled`] once raised.
    pub(crate) fn check(&self) -> Result<()> {
        if self.is_cancelled() {
            Err(Error::Cancelled)
        } else {
            Ok(())
        }
    }
}

/// The sender's settings.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct SenderOptions {
    /// Shared secret answering the receiver's challenge.
    pub token: Option<Vec<u8>>,
    /// Chunk size asked for (the receiver may lower it).
    pub chunk: u32,
    /// Chunks in flight at most (also capped by the receiver's ring).
    pub slots: u32,
    /// Ask the receiver to continue partial files.
    pub resume: bool,
    /// Ask the receiver to replace entries that differ (it must allow it: `recv --force`).
    pub force: bool,
    /// Skip every entry that exists on the receiver, identical or not.
    pub ignore_existing: bool,
    /// Skip entries newer on the receiver, replace older ones (the receiver must allow it).
    pub update: bool,
    /// Compare existing files by BLAKE3 (hashed on both sides) instead of size and mtime.
    pub checksum: bool,
    /// How chunks are verified (`send --verify`; the receiver may refuse it).
    pub verify: Algo,
    /// Faults and holds for rdmaxfer's own tests (feature `test-hooks`).
    #[cfg(feature = "test-hooks")]
    pub hooks: SendHooks,
    /// Streams (connections) to ask the receiver for ([`send_streams`](super::send_streams)); 1: one connection.
    pub streams: u16,
    /// At most this many bytes of file data per second, over all streams together
    /// (`send --bwlimit`); `None`: as fast as the link goes.
    pub bwlimit: Option<u64>,
    /// `send --dry-run`: every entry is announced and the receiver answers what it would do
    /// (create, replace, skip, refuse); no data is sent and nothing changes on either side.
    /// One stream.
    pub dry_run: bool,
    /// `send --delete`: after every entry, remove on the receiver what is not in the sender's
    /// directories (each directory it sent; see `send::delete`). The receiver must allow it
    /// (`recv --allow-delete`). With `dry_run`, only says what would be deleted.
    pub delete: bool,
    /// The rules the entries were listed with (`--exclude`, `--include`): with `delete`, a
    /// name they exclude is never deleted (as rsync without `--delete-excluded`).
    pub filter: Filter,
    /// Send nothing to a receiver that does not prove, in its CHALLENGE, that it knows
    /// `token` (`cp` sets it: its remote sender listens, and the first to connect must not get
    /// the files). Without a token, no receiver can prove it.
    pub require_receiver_proof: bool,
    /// Stops the transfer when raised (see [`Cancel`]).
    pub cancel: Cancel,
}

impl Default for SenderOptions {
    fn default() -> Self {
        SenderOptions {
            token: None,
            chunk: DEFAULT_CHUNK,
            slots: DEFAULT_SLOTS,
            resume: false,
            force: false,
            ignore_existing: false,
            update: false,
            checksum: false,
            verify: Algo::DEFAULT,
            #[cfg(feature = "test-hooks")]
            hooks: SendHooks::default(),
            streams: 1,
            bwlimit: None,
            dry_run: false,
            delete: false,
            filter: Filter::new(),
            require_receiver_proof: false,
            cancel: Cancel::new(),
        }
    }
}

impl SenderOptions {
    setters! {
        token: Option<Vec<u8>>,
        chunk: u32,
        slots: u32,
        resume: bool,
        force: bool,
        ignore_existing: bool,
        update: bool,
        checksum: bool,
        verify: Algo,
        streams: u16,
        bwlimit: Option<u64>,
        dry_run: bool,
        delete: bool,
        filter: Filter,
        require_receiver_proof: bool,
        cancel: Cancel,
    }

    /// The test hooks asked for (none without feature `test-hooks`).
    pub(crate) fn hooks(&self) -> &SendHooks {
        #[cfg(feature = "test-hooks")]
        return &self.hooks;
        #[cfg(not(feature = "test-hooks"))]
        return &NO_SEND_HOOKS;
    }

    /// `base` adjusted for a sending endpoint: control-message size and send-queue room for
    /// `slots` RDMA WRITEs.
    pub fn endpoint_options(&self, base: &EndpointOptions) -> EndpointOptions {
        EndpointOptions {
            msg_size: FILE_MSG_LEN,
            // The answers of the entries in flight (send::pipe) never wait for a credit.
            recv_depth: SENDER_RECV_DEPTH,
            send_depth: 4,
            extra_send_wr: self.slots.clamp(1, MAX_SLOTS),
            ..base.clone()
        }
    }

    /// The HELLO flags these options ask for (`last` unset).
    pub(crate) fn hello_flags(&self) -> HelloFlags {
        HelloFlags {
            // No data follows a dry run: nothing to resume.
            resume: self.resume && !self.dry_run,
            force: self.force,
            last: false,
            ignore_existing: self.ignore_existing,
            update: self.update,
            inline: false,
            dry_run: self.dry_run,
        }
    }

    pub(crate) fn check(&self) -> Result<()> {
        if self.chunk < MIN_CHUNK || self.chunk > MAX_CHUNK {
            return Err(Error::InvalidArgument(format!(
                "chunk size {} is outside {MIN_CHUNK}..={MAX_CHUNK}",
                self.chunk
            )));
        }
        if self.slots == 0 || self.slots > MAX_SLOTS {
            return Err(Error::InvalidArgument(format!(
                "slots {} is outside 1..={MAX_SLOTS}",
                self.slots
            )));
        }
        Ok(())
    }
}
