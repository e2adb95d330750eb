//! The immediate value of a data chunk's RDMA WRITE_WITH_IMM.

use super::malformed;
use crate::Result;

/// The immediate value of one data-chunk RDMA WRITE_WITH_IMM: which ring slot was written and
/// the chunk's sequence number modulo 2^16. Layout: `imm = seq << 16 | slot` (host-order `u32`;
/// the verbs layer converts to and from the network-order `imm_data`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Imm {
    /// Ring slot index (< slot count).
    pub slot: u16,
    /// Chunk sequence number, wrapping at 2^16.
    pub seq: u16,
}

/// Most ring slots the immediate can name.
pub const IMM_SLOTS: u32 = 1 << 16;

/// Packs `imm` into the 32-bit immediate.
pub fn encode_chunk_imm(imm: Imm) -> u32 {
    (u32::from(imm.seq) << 16) | u32::from(imm.slot)
}

/// Unpacks an immediate, refusing a slot outside a ring of `slot_count` slots.
pub fn decode_chunk_imm(value: u32, slot_count: u32) -> Result<Imm> {
    let imm = Imm {
        slot: (value & 0xffff) as u16,
        seq: (value >> 16) as u16,
    };
    if u32::from(imm.slot) >= slot_count {
        return Err(malformed(format!(
            "data chunk names slot {} of a {slot_count}-slot ring",
            imm.slot
        )));
    }
    Ok(imm)
}
