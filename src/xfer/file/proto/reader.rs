//! Field helpers of the control-message codec: text and reason encoders, and [`Reader`], a
//! bounds-checked cursor that names the message in every error.

use super::{malformed, Digest, Reason, MAX_TEXT_LEN};
use crate::Result;

pub(super) fn put_text(b: &mut Vec<u8>, s: &str, max: usize) {
    assert!(
        s.len() <= max,
        "string of {} bytes over the {max}-byte limit",
        s.len()
    );
    b.extend_from_slice(&(s.len() as u16).to_be_bytes());
    b.extend_from_slice(s.as_bytes());
}

pub(super) fn put_reason_text(b: &mut Vec<u8>, reason: Reason, message: &str) {
    b.extend_from_slice(&reason.code().to_be_bytes());
    put_text(b, message, MAX_TEXT_LEN);
}

/// A bounds-checked cursor over a message.
pub(super) struct Reader<'a> {
    buf: &'a [u8],
    what: &'static str,
}

impl<'a> Reader<'a> {
    pub(super) fn new(buf: &'a [u8], what: &'static str) -> Self {
        Reader { buf, what }
    }

    pub(super) fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.buf.len() < n {
            return Err(malformed(format!(
                "truncated {}: needs {n} more bytes, {} left",
                self.what,
                self.buf.len()
            )));
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    pub(super) fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    pub(super) fn u16(&mut self) -> Result<u16> {
        self.array().map(u16::from_be_bytes)
    }

    pub(super) fn u32(&mut self) -> Result<u32> {
        self.array().map(u32::from_be_bytes)
    }

    pub(super) fn u64(&mut self) -> Result<u64> {
        self.array().map(u64::from_be_bytes)
    }

    pub(super) fn digest(&mut self) -> Result<Digest> {
        self.array()
    }

    pub(super) fn text(&mut self, max: usize, field: &str) -> Result<String> {
        let len = usize::from(self.u16()?);
        if len > max {
            return Err(malformed(format!(
                "{} {field} length {len} exceeds the maximum of {max} bytes",
                self.what
            )));
        }
        let bytes = self.take(len)?;
        let s = std::str::from_utf8(bytes)
            .map_err(|e| malformed(format!("{} {field} is not UTF-8: {e}", self.what)))?;
        Ok(s.to_string())
    }

    pub(super) fn reason_text(&mut self, ok_allowed: bool) -> Result<(Reason, String)> {
        let code = self.u16()?;
        let reason = Reason::from_code(code)
            .ok_or_else(|| malformed(format!("{} has unknown reason code {code}", self.what)))?;
        if reason == Reason::Ok && !ok_allowed {
            return Err(malformed(format!(
                "{} without a reason (code 0)",
                self.what
            )));
        }
        Ok((reason, self.text(MAX_TEXT_LEN, "message")?))
    }

    /// True when every byte was taken.
    pub(super) fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    pub(super) fn finish(self) -> Result<()> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(malformed(format!(
                "{} has {} trailing bytes",
                self.what,
                self.buf.len()
            )))
        }
    }
}
