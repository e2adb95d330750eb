//! The caller's own work requests posted as a list (one doorbell): [`Endpoint::post_batch`].

use crate::error::Error;
use crate::verbs::{PostListError, SendBatch, SendOp};

use super::conn::Endpoint;
use super::options::RESERVED_WR_ID;

impl Endpoint {
    /// Posts the caller's RDMA READ / WRITE work requests of `b` with one `ibv_post_send(3)`
    /// ([`SoloQueue::post_send_batch`](crate::verbs::SoloQueue::post_send_batch)); their
    /// completions come from [`poll_user`](Self::poll_user) as those of [`post`](Self::post). Every
    /// wr_id must be below [`RESERVED_WR_ID`]; SENDs (they carry credits) and WRITE_WITH_IMM (it
    /// spends one) go through [`send`](Self::send) and [`post`](Self::post). A refused batch is
    /// given back whole, nothing posted.
    pub fn post_batch(&mut self, b: &mut SendBatch) -> Result<usize, PostListError> {
        let refused = b.iter().find_map(|w| {
            if w.wr_id() >= RESERVED_WR_ID {
                Some(format!("wr_id must be below {RESERVED_WR_ID:#x}"))
            } else if !matches!(w.op(), SendOp::Write(_) | SendOp::Read(_)) {
                Some(format!(
                    "a post list takes RDMA WRITE and READ only, not {}: use Endpoint::send or \
                     Endpoint::post",
                    w.op().name()
                ))
            } else {
                None
            }
        });
        let refused = match refused {
            Some(why) => Some(Error::InvalidArgument(why)),
            None => self.check_usable().err(),
        };
        if let Some(error) = refused {
            return Err(PostListError {
                error,
                posted: 0,
                unposted: b.drain().map(|w| (w.wr_id(), w.into_bufs())).collect(),
            });
        }
        self.q.post_send_batch(b)
    }
}
