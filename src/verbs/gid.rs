//! GIDs: parsing, formatting and picking the one a connection should use. Pure code.

use std::fmt;
use std::str::FromStr;

use serde::Serialize;

use crate::error::{Error, Result};

/// A 16-byte port GID, in network byte order.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    /// All zeroes: an empty GID table slot.
    pub fn is_zero(&self) -> bool {
        self.0 == [0; 16]
    }

    /// True for `::ffff:a.b.c.d`, the RoCE v2 GID of an IPv4 address.
    pub fn is_ipv4_mapped(&self) -> bool {
        self.0[..10] == [0; 10] && self.0[10..12] == [0xff, 0xff]
    }

    /// The IPv4 address of an IPv4-mapped GID.
    pub fn ipv4(&self) -> Option<std::net::Ipv4Addr> {
        self.is_ipv4_mapped()
            .then(|| std::net::Ipv4Addr::new(self.0[12], self.0[13], self.0[14], self.0[15]))
    }

    /// The low 64 bits (interface id); ibv_rc_pingpong sets `is_global` only when non-zero.
    pub fn interface_id(&self) -> u64 {
        u64::from_be_bytes(self.0[8..].try_into().expect("8 bytes"))
    }

    /// 32 lowercase hex digits, as in ibv_rc_pingpong's wire format.
    pub fn to_wire_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Parses 32 hex digits (ibv_rc_pingpong's wire format).
    pub fn from_wire_hex(s: &str) -> Result<Gid> {
        if s.len() != 32 || !s.bytes().all(|c| c.is_ascii_hexdigit()) {
            return Err(Error::Protocol(format!(
                "GID must be 32 hex digits, got {s:?}"
            )));
        }
        let mut g = [0u8; 16];
        for (i, b) in g.iter_mut().enumerate() {
            *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).expect("checked hex");
        }
        Ok(Gid(g))
    }
}

/// `0000:0000:0000:0000:0000:ffff:c612:0001`, the form sysfs and `ibv_devinfo -v` use.
impl fmt::Display for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, pair) in self.0.chunks(2).enumerate() {
            if i > 0 {
                f.write_str(":")?;
            }
            write!(f, "{:02x}{:02x}", pair[0], pair[1])?;
        }
        Ok(())
    }
}

impl fmt::Debug for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Gid({self})")
    }
}

/// Accepts the sysfs form, any IPv6 textual form, or 32 bare hex digits.
impl FromStr for Gid {
    type Err = Error;
    fn from_str(s: &str) -> Result<Gid> {
        let s = s.trim();
        if s.len() == 32 && !s.contains(':') {
            return Gid::from_wire_hex(s);
        }
        s.parse::<std::net::Ipv6Addr>()
            .map(|a| Gid(a.octets()))
            .map_err(|_| Error::InvalidArgument(format!("not a GID: {s:?}")))
    }
}

impl Serialize for Gid {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// Kind of a GID table entry (`ibv_gid_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum GidType {
    /// InfiniBand.
    #[serde(rename = "IB")]
    Ib,
    /// RoCE v1 (Ethernet L2).
    #[serde(rename = "RoCE v1")]
    RoceV1,
    /// RoCE v2 (UDP/IP).
    #[serde(rename = "RoCE v2")]
    RoceV2,
    /// A value this build does not know.
    #[serde(rename = "unknown")]
    Unknown(u32),
}

impl GidType {
    /// From `ibv_gid_entry.gid_type`.
    pub fn from_raw(v: u32) -> Self {
        match v {
            0 => GidType::Ib,
            1 => GidType::RoceV1,
            2 => GidType::RoceV2,
            x => GidType::Unknown(x),
        }
    }
}

impl fmt::Display for GidType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GidType::Ib => f.write_str("IB"),
            GidType::RoceV1 => f.write_str("RoCE v1"),
            GidType::RoceV2 => f.write_str("RoCE v2"),
            GidType::Unknown(x) => write!(f, "unknown({x})"),
        }
    }
}

/// One GID table slot of a port.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct GidEntry {
    /// Index in the port's GID table (perftest's `-x`, ibv_rc_pingpong's `-g`).
    pub index: u32,
    /// The GID.
    pub gid: Gid,
    /// IB, RoCE v1 or RoCE v2.
    #[serde(rename = "type")]
    pub gid_type: GidType,
    /// The network device it belongs to (RoCE), if any.
    pub netdev: Option<String>,
}

/// Picks the GID a connection should use, as perftest does: the IPv4-mapped RoCE v2 GID if there
/// is one, else any RoCE v2 GID, else the first non-zero GID. `wanted` forces an index.
pub fn select_gid(entries: &[GidEntry], wanted: Option<u32>) -> Result<&GidEntry> {
    if let Some(idx) = wanted {
        return entries
            .iter()
            .find(|e| e.index == idx && !e.gid.is_zero())
            .ok_or_else(|| {
                let valid: Vec<String> = entries.iter().map(|e| e.index.to_string()).collect();
                Error::InvalidArgument(format!(
                    "GID index {idx} is not populated on this port (populated: {})",
                    if valid.is_empty() {
                        "none".into()
                    } else {
                        valid.join(", ")
                    }
                ))
            });
    }
    let nz = || entries.iter().filter(|e| !e.gid.is_zero());
    nz().find(|e| e.gid_type == GidType::RoceV2 && e.gid.is_ipv4_mapped())
        .or_else(|| nz().find(|e| e.gid_type == GidType::RoceV2))
        .or_else(|| nz().next())
        .ok_or_else(|| {
            Error::InvalidArgument(
                "the port's GID table is empty (is the netdev up and addressed?)".into(),
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(index: u32, gid: &str, t: GidType) -> GidEntry {
        GidEntry {
            index,
            gid: gid.parse().unwrap(),
            gid_type: t,
            netdev: Some("rx0".into()),
        }
    }

    fn rxe_table() -> Vec<GidEntry> {
        vec![
            entry(0, "fe80::1", GidType::RoceV2),
            entry(1, "::ffff:198.18.0.1", GidType::RoceV2),
        ]
    }

    #[test]
    fn parses_and_formats_sysfs_form() {
        let g: Gid = "0000:0000:0000:0000:0000:ffff:c612:0001".parse().unwrap();
        assert!(g.is_ipv4_mapped());
        assert_eq!(g.ipv4(), Some(std::net::Ipv4Addr::new(198, 18, 0, 1)));
        assert_eq!(g.to_string(), "0000:0000:0000:0000:0000:ffff:c612:0001");
    }

    #[test]
    fn wire_hex_round_trips() {
        let g: Gid = "fe80::1234:5678:9abc:def0".parse().unwrap();
        let hex = g.to_wire_hex();
        assert_eq!(hex, "fe80000000000000123456789abcdef0");
        assert_eq!(Gid::from_wire_hex(&hex).unwrap(), g);
        assert!(Gid::from_wire_hex("xyz").is_err());
        assert!(Gid::from_wire_hex(&"g".repeat(32)).is_err());
    }

    #[test]
    fn rejects_garbage() {
        assert!("not-a-gid".parse::<Gid>().is_err());
        assert!("".parse::<Gid>().is_err());
    }

    #[test]
    fn interface_id_of_link_local_and_zero() {
        assert_ne!("fe80::1".parse::<Gid>().unwrap().interface_id(), 0);
        assert_eq!(Gid::default().interface_id(), 0);
        assert!(Gid::default().is_zero());
    }

    #[test]
    fn picks_ipv4_mapped_roce_v2() {
        let t = rxe_table();
        assert_eq!(select_gid(&t, None).unwrap().index, 1);
    }

    #[test]
    fn prefers_v2_over_v1_and_skips_zero() {
        let t = vec![
            GidEntry {
                index: 0,
                gid: Gid::default(),
                gid_type: GidType::RoceV2,
                netdev: None,
            },
            entry(1, "::ffff:10.0.0.1", GidType::RoceV1),
            entry(2, "fe80::2", GidType::RoceV2),
        ];
        assert_eq!(select_gid(&t, None).unwrap().index, 2);
    }

    #[test]
    fn falls_back_to_first_nonzero_ib() {
        let t = vec![entry(0, "fe80::5", GidType::Ib)];
        assert_eq!(select_gid(&t, None).unwrap().index, 0);
    }

    #[test]
    fn explicit_index_is_checked() {
        let t = rxe_table();
        assert_eq!(select_gid(&t, Some(0)).unwrap().index, 0);
        let e = select_gid(&t, Some(7)).unwrap_err().to_string();
        assert!(e.contains("GID index 7"), "{e}");
        assert!(e.contains("0, 1"), "{e}");
        assert!(select_gid(&[], None).is_err());
    }
}
