//! Whether a device (a rail of a multi-rail transfer) can reach an address at all: the kernel's
//! IPv4 routing table (`/proc/net/route`) names the interface the address is reached through,
//! and sysfs names the interfaces of each RDMA device
//! (`/sys/class/infiniband/DEV/ports/N/gid_attrs/ndevs/*`). A rail whose interfaces are not the
//! one the route takes, while another RDMA device's is, cannot carry a connection to it: its
//! connect request would go unanswered until the step deadline.

use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;

use crate::error::{Error, Result};

/// Why `device` cannot reach `addr`, if the routing table says another RDMA device's interface
/// reaches it; `None` when it can, or when nothing says (IPv6, a route through an interface of
/// no RDMA device, no sysfs).
pub fn rail_cannot_reach(device: &str, addr: IpAddr) -> Option<String> {
    let IpAddr::V4(v4) = addr else {
        return None;
    };
    let routes = std::fs::read_to_string("/proc/net/route").ok()?;
    let via = egress(&routes, v4)?;
    let root = Path::new("/sys/class/infiniband");
    let mine = netdevs_of(&root.join(device));
    if mine.is_empty() || mine.contains(&via) {
        return None;
    }
    let other = std::fs::read_dir(root)
        .ok()?
        .flatten()
        .find(|d| netdevs_of(&d.path()).contains(&via))?;
    Some(format!(
        "{addr} is reached through {via} (device {}), not through {device}'s {}",
        other.file_name().to_string_lossy(),
        mine.join(", ")
    ))
}

/// [`rail_cannot_reach`] as an error for a stream on `device` (if one is given) to `dst`:
/// [`Error::Connection`] naming both and why, so that the stream is dropped before its connect
/// request.
pub fn check_rail(device: Option<&str>, dst: std::net::SocketAddr) -> Result<()> {
    match device.and_then(|d| rail_cannot_reach(d, dst.ip()).map(|why| (d, why))) {
        Some((d, why)) => Err(Error::Connection(format!("{d} cannot reach {dst}: {why}"))),
        None => Ok(()),
    }
}

/// The interfaces of an RDMA device (its ports' GID table entries).
fn netdevs_of(dev: &Path) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let Ok(ports) = std::fs::read_dir(dev.join("ports")) else {
        return out;
    };
    for port in ports.flatten() {
        let Ok(ndevs) = std::fs::read_dir(port.path().join("gid_attrs/ndevs")) else {
            continue;
        };
        for n in ndevs.flatten() {
            // An unused GID entry reads as an error.
            if let Ok(name) = std::fs::read_to_string(n.path()) {
                let name = name.trim().to_string();
                if !name.is_empty() && !out.contains(&name) {
                    out.push(name);
                }
            }
        }
    }
    out
}

/// The interface of the most specific route to `addr` in `routes` (the text of
/// `/proc/net/route`: addresses and masks in hexadecimal, in the host's byte order).
fn egress(routes: &str, addr: Ipv4Addr) -> Option<String> {
    let a = u32::from_ne_bytes(addr.octets());
    let mut best: Option<(u32, String)> = None;
    for line in routes.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (Some(iface), Some(dst), Some(mask)) = (f.first(), f.get(1), f.get(7)) else {
            continue;
        };
        let (Ok(dst), Ok(mask)) = (u32::from_str_radix(dst, 16), u32::from_str_radix(mask, 16))
        else {
            continue;
        };
        let len = mask.count_ones();
        if a & mask == dst && best.as_ref().is_none_or(|(l, _)| len > *l) {
            best = Some((len, iface.to_string()));
        }
    }
    best.map(|(_, i)| i)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_most_specific_route_names_the_interface() {
        let hex = |a: [u8; 4]| format!("{:08X}", u32::from_ne_bytes(a));
        let routes = format!(
            "Iface\tDestination\tGateway\tFlags\tRefCnt\tUse\tMetric\tMask\n\
             eth0\t{}\t{}\t0003\t0\t0\t0\t{}\n\
             rx0\t{}\t00000000\t0001\t0\t0\t0\t{}\n\
             rx1\t{}\t00000000\t0001\t0\t0\t0\t{}\n",
            hex([0, 0, 0, 0]),
            hex([10, 0, 0, 1]),
            hex([0, 0, 0, 0]),
            hex([198, 18, 0, 0]),
            hex([255, 255, 255, 0]),
            hex([198, 18, 1, 0]),
            hex([255, 255, 255, 0]),
        );
        let via = |a: [u8; 4]| egress(&routes, Ipv4Addr::from(a));
        assert_eq!(via([198, 18, 0, 1]).as_deref(), Some("rx0"));
        assert_eq!(via([198, 18, 1, 7]).as_deref(), Some("rx1"));
        assert_eq!(
            via([8, 8, 8, 8]).as_deref(),
            Some("eth0"),
            "the default route"
        );
        assert_eq!(egress("Iface\n", Ipv4Addr::LOCALHOST), None);
    }
}
