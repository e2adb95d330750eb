//! REPAIR (version 3): after FIN, the receiver asks for the chunks whose digests did not match
//! the sender's DIGESTS, to be written again (see "Chunk repair" in `docs/file-protocol.md`).

use super::malformed;
use super::reader::Reader;
use crate::Result;

/// Most repair rounds per part. A transient corruption (a bit flipped on the way or in memory)
/// heals in one round; a chunk that fails three independent reads and writes is not transient
/// (a bad disk, a bad NIC), so the part fails as it did before repair existed.
pub const MAX_REPAIR_ROUNDS: u16 = 3;

/// Most chunks one REPAIR (one round) asks for. More bad chunks than that in one part is no
/// transient fault; the part fails. Bounds the chunks re-sent and what each side keeps
/// (the sender's digests of the bad chunks) to this many.
pub const MAX_REPAIR_CHUNKS: usize = 64;

/// REPAIR: send these chunks of the part again (into the ring, continuing the sequence
/// numbers), then FIN again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Repair {
    /// The round: 1 for the first REPAIR of a part, up to [`MAX_REPAIR_ROUNDS`].
    pub round: u16,
    /// Chunk indices of the part (counted as in DIGESTS), strictly increasing, 1 to
    /// [`MAX_REPAIR_CHUNKS`] of them.
    pub chunks: Vec<u64>,
}

pub(super) fn decode_repair(r: &mut Reader<'_>) -> Result<Repair> {
    let round = r.u16()?;
    if round == 0 || round > MAX_REPAIR_ROUNDS {
        return Err(malformed(format!(
            "REPAIR round {round} (1 to {MAX_REPAIR_ROUNDS})"
        )));
    }
    let count = usize::from(r.u16()?);
    if count == 0 || count > MAX_REPAIR_CHUNKS {
        return Err(malformed(format!(
            "REPAIR asks for {count} chunks (1 to {MAX_REPAIR_CHUNKS})"
        )));
    }
    let mut chunks: Vec<u64> = Vec::with_capacity(count);
    for _ in 0..count {
        let c = r.u64()?;
        if chunks.last().is_some_and(|&p| p >= c) {
            return Err(malformed(format!(
                "REPAIR chunk {c} after chunk {}: not strictly increasing",
                chunks[chunks.len() - 1]
            )));
        }
        chunks.push(c);
    }
    Ok(Repair { round, chunks })
}

/// Panics on a round or a list out of bounds, or a list not strictly increasing: the receiver
/// builds it from its own bounded set.
pub(super) fn encode_repair(b: &mut Vec<u8>, x: &Repair) {
    assert!((1..=MAX_REPAIR_ROUNDS).contains(&x.round));
    assert!((1..=MAX_REPAIR_CHUNKS).contains(&x.chunks.len()));
    assert!(x.chunks.windows(2).all(|w| w[0] < w[1]));
    b.extend_from_slice(&x.round.to_be_bytes());
    b.extend_from_slice(&(x.chunks.len() as u16).to_be_bytes());
    for c in &x.chunks {
        b.extend_from_slice(&c.to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::super::{decode, encode, Msg, HEADER_LEN, MAGIC, MAX_MSG_LEN, VERSION};
    use super::*;
    use proptest::prelude::*;

    fn framed(body: &[u8]) -> Vec<u8> {
        let mut v = MAGIC.to_be_bytes().to_vec();
        v.extend_from_slice(&VERSION.to_be_bytes());
        v.extend_from_slice(&22u16.to_be_bytes());
        v.extend_from_slice(&(body.len() as u32).to_be_bytes());
        v.extend_from_slice(body);
        v
    }

    #[test]
    fn repair_layout() {
        let m = Msg::Repair(Repair {
            round: 2,
            chunks: vec![5, 0x0102_0304_0506_0708],
        });
        let mut body = vec![0, 2, 0, 2, 0, 0, 0, 0, 0, 0, 0, 5];
        body.extend_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(encode(&m), framed(&body));
        assert_eq!(decode(&framed(&body)).unwrap(), m);
        // The largest fits a message with room to spare.
        let big = Repair {
            round: MAX_REPAIR_ROUNDS,
            chunks: (0..MAX_REPAIR_CHUNKS as u64).collect(),
        };
        let b = encode(&Msg::Repair(big));
        assert_eq!(b.len(), HEADER_LEN + 4 + 8 * MAX_REPAIR_CHUNKS);
        assert!(b.len() <= MAX_MSG_LEN);
    }

    #[test]
    fn repair_out_of_bounds_is_refused() {
        let err = |body: &[u8]| decode(&framed(body)).unwrap_err().to_string();
        let one = |round: u16, count: u16, chunks: &[u64]| {
            let mut b = round.to_be_bytes().to_vec();
            b.extend_from_slice(&count.to_be_bytes());
            for c in chunks {
                b.extend_from_slice(&c.to_be_bytes());
            }
            b
        };
        assert!(err(&one(0, 1, &[1])).contains("round 0"));
        assert!(err(&one(4, 1, &[1])).contains("round 4"));
        assert!(err(&one(1, 0, &[])).contains("0 chunks"));
        let many: Vec<u64> = (0..65).collect();
        assert!(err(&one(1, 65, &many)).contains("65 chunks"));
        assert!(err(&one(1, 2, &[3, 3])).contains("not strictly increasing"));
        assert!(err(&one(1, 2, &[4, 3])).contains("not strictly increasing"));
        assert!(err(&one(1, 2, &[4])).contains("truncated"));
        let mut long = one(1, 1, &[4]);
        long.push(0);
        assert!(err(&long).contains("trailing"));
    }

    fn repair() -> impl Strategy<Value = Repair> {
        (
            1..=MAX_REPAIR_ROUNDS,
            prop::collection::btree_set(any::<u64>(), 1..=MAX_REPAIR_CHUNKS),
        )
            .prop_map(|(round, set)| Repair {
                round,
                chunks: set.into_iter().collect(),
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2_000))]

        #[test]
        fn repair_round_trips_and_every_cut_is_refused(
            x in repair(),
            cut in any::<prop::sample::Index>(),
        ) {
            let m = Msg::Repair(x);
            let b = encode(&m);
            prop_assert_eq!(decode(&b).unwrap(), m);
            prop_assert!(decode(&b[..cut.index(b.len())]).is_err());
        }

        #[test]
        fn any_accepted_repair_is_in_bounds_and_canonical(
            body in prop::collection::vec(any::<u8>(), 0..80),
        ) {
            let b = framed(&body);
            if let Ok(m) = decode(&b) {
                let Msg::Repair(x) = &m else { panic!("type 22 is REPAIR") };
                prop_assert!((1..=MAX_REPAIR_ROUNDS).contains(&x.round));
                prop_assert!((1..=MAX_REPAIR_CHUNKS).contains(&x.chunks.len()));
                prop_assert!(x.chunks.windows(2).all(|w| w[0] < w[1]));
                prop_assert_eq!(encode(&m), b);
            }
        }
    }
}
