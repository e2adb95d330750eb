//! Devices and device contexts: `ibv_get_device_list(3)`, `ibv_open_device(3)`,
//! `ibv_query_device(3)`, `ibv_query_port(3)`, `ibv_query_gid_table(3)`.

use std::ffi::CStr;
use std::ptr::NonNull;
use std::sync::Arc;

use serde::Serialize;

use crate::error::{last_errno, Error, Result};
use crate::sys;
use crate::verbs::gid::{select_gid, Gid, GidEntry, GidType};

/// Path MTU (`enum ibv_mtu`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum Mtu {
    /// 256 bytes.
    #[serde(rename = "256")]
    M256,
    /// 512 bytes.
    #[serde(rename = "512")]
    M512,
    /// 1024 bytes.
    #[serde(rename = "1024")]
    M1024,
    /// 2048 bytes.
    #[serde(rename = "2048")]
    M2048,
    /// 4096 bytes.
    #[serde(rename = "4096")]
    M4096,
}

impl Mtu {
    /// From a byte count (256, 512, 1024, 2048, 4096).
    pub fn from_bytes(n: u32) -> Result<Mtu> {
        Ok(match n {
            256 => Mtu::M256,
            512 => Mtu::M512,
            1024 => Mtu::M1024,
            2048 => Mtu::M2048,
            4096 => Mtu::M4096,
            _ => {
                return Err(Error::InvalidArgument(format!(
                    "MTU must be 256, 512, 1024, 2048 or 4096, not {n}"
                )))
            }
        })
    }

    /// From `enum ibv_mtu` (1..=5).
    pub fn from_raw(v: u32) -> Option<Mtu> {
        Some(match v {
            sys::IBV_MTU_256 => Mtu::M256,
            sys::IBV_MTU_512 => Mtu::M512,
            sys::IBV_MTU_1024 => Mtu::M1024,
            sys::IBV_MTU_2048 => Mtu::M2048,
            sys::IBV_MTU_4096 => Mtu::M4096,
            _ => return None,
        })
    }

    /// The `enum ibv_mtu` value.
    pub fn to_raw(self) -> u32 {
        match self {
            Mtu::M256 => sys::IBV_MTU_256,
            Mtu::M512 => sys::IBV_MTU_512,
            Mtu::M1024 => sys::IBV_MTU_1024,
            Mtu::M2048 => sys::IBV_MTU_2048,
            Mtu::M4096 => sys::IBV_MTU_4096,
        }
    }

    /// Size in bytes.
    pub fn bytes(self) -> u32 {
        256 << (self.to_raw() - 1)
    }
}

/// What `ibv_query_port(3)` says about a port.
#[derive(Clone, Debug, Serialize)]
pub struct PortAttr {
    /// Port number (1-based).
    pub port: u8,
    /// `ibv_port_state_str` text: "PORT_ACTIVE", "PORT_DOWN", ...
    pub state: String,
    /// True when the port can carry traffic.
    pub active: bool,
    /// Active path MTU.
    pub active_mtu: Option<Mtu>,
    /// Largest path MTU the port supports.
    pub max_mtu: Option<Mtu>,
    /// "Ethernet" (RoCE) or "InfiniBand".
    pub link_layer: String,
    /// Local identifier (0 on RoCE).
    pub lid: u16,
    /// Largest message the port can send.
    pub max_msg_sz: u32,
    /// GID table size.
    pub gid_tbl_len: u32,
}

/// What `ibv_query_device(3)` says, the parts rdmaxfer uses.
#[derive(Clone, Debug, Serialize)]
pub struct DeviceAttr {
    /// Firmware version string.
    pub fw_ver: String,
    /// Node GUID, as `xxxx:xxxx:xxxx:xxxx`.
    pub node_guid: String,
    /// Largest registrable region.
    pub max_mr_size: u64,
    /// Work requests per queue.
    pub max_qp_wr: u32,
    /// Scatter/gather entries per work request.
    pub max_sge: u32,
    /// Completion queue entries.
    pub max_cqe: u32,
    /// Outstanding RDMA READs a QP may be target of.
    pub max_qp_rd_atom: u32,
    /// Outstanding RDMA READs a QP may initiate.
    pub max_qp_init_rd_atom: u32,
    /// Number of physical ports.
    pub phys_port_cnt: u8,
}

/// One port in a [`DeviceInfo`].
#[derive(Clone, Debug, Serialize)]
pub struct PortInfo {
    /// Port attributes.
    #[serde(flatten)]
    pub attr: PortAttr,
    /// Populated GID table entries.
    pub gids: Vec<GidEntry>,
}

/// Everything `rdmaxfer devices` prints about one device.
#[derive(Clone, Debug, Serialize)]
pub struct DeviceInfo {
    /// Device name, e.g. `rxe0`.
    pub name: String,
    /// Node GUID.
    pub node_guid: String,
    /// Node type (`ibv_node_type_str`).
    pub node_type: String,
    /// Transport: "InfiniBand", "iWARP", "usNIC", ...
    pub transport: String,
    /// Device limits.
    pub attr: DeviceAttr,
    /// Its ports.
    pub ports: Vec<PortInfo>,
}

fn guid_str(be: u64) -> String {
    let v = u64::from_be(be);
    format!(
        "{:04x}:{:04x}:{:04x}:{:04x}",
        v >> 48,
        (v >> 32) & 0xffff,
        (v >> 16) & 0xffff,
        v & 0xffff
    )
}

fn transport_str(t: sys::ibv_transport_type) -> &'static str {
    match t {
        sys::IBV_TRANSPORT_IB => "InfiniBand",
        sys::IBV_TRANSPORT_IWARP => "iWARP",
        sys::IBV_TRANSPORT_USNIC => "usNIC",
        sys::IBV_TRANSPORT_USNIC_UDP => "usNIC UDP",
        sys::IBV_TRANSPORT_UNSPECIFIED => "unspecified",
        _ => "unknown",
    }
}

/// The string at `p` ("" for NULL).
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string that stays valid during the call.
unsafe fn cstr_lossy(p: *const libc::c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: `p` is non-null (checked above); the rest is this function's contract.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// A C string in a fixed array, up to its first NUL (the whole array if it has none).
fn array_lossy(a: &[libc::c_char]) -> String {
    let bytes: Vec<u8> = a
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// The device list (`ibv_get_device_list(3)`), freed on drop.
struct DeviceList {
    list: NonNull<*mut sys::ibv_device>,
    len: usize,
}

impl DeviceList {
    fn get() -> Result<DeviceList> {
        let mut n: libc::c_int = 0;
        // SAFETY: `n` is a writable c_int; ibv_get_device_list(3) returns NULL or an array the
        // caller frees with ibv_free_device_list (done once, in `Drop`).
        let p = unsafe { sys::ibv_get_device_list(&mut n) };
        match NonNull::new(p) {
            Some(list) => Ok(DeviceList {
                list,
                len: n.max(0) as usize,
            }),
            None => {
                let errno = last_errno();
                Err(Error::NoDevice {
                    detail: format!(
                        " (ibv_get_device_list: {})",
                        std::io::Error::from_raw_os_error(errno)
                    ),
                })
            }
        }
    }

    fn devices(&self) -> impl Iterator<Item = NonNull<sys::ibv_device>> + '_ {
        (0..self.len).filter_map(move |i| {
            // SAFETY: `i < len`, and ibv_get_device_list(3) set `len` to "the number of devices
            // returned in the array", which stays allocated until `Drop` frees it.
            NonNull::new(unsafe { *self.list.as_ptr().add(i) })
        })
    }

    fn name_of(dev: NonNull<sys::ibv_device>) -> String {
        // ibv_get_device_list(3): entries are valid until the list is freed.
        // SAFETY: every caller passes an entry of a `DeviceList` it still holds (above), and
        // ibv_get_device_name(3) returns the device's name or NULL, which `cstr_lossy` allows.
        unsafe { cstr_lossy(sys::ibv_get_device_name(dev.as_ptr())) }
    }

    fn names(&self) -> Vec<String> {
        self.devices().map(Self::name_of).collect()
    }
}

impl Drop for DeviceList {
    fn drop(&mut self) {
        // SAFETY: `list` came from ibv_get_device_list (non-null, checked in `get`) and `Drop`
        // runs once, so it is freed once.
        unsafe { sys::ibv_free_device_list(self.list.as_ptr()) };
    }
}

/// Names of the RDMA devices present.
pub fn device_names() -> Result<Vec<String>> {
    Ok(DeviceList::get()?.names())
}

/// Full description of every RDMA device. Errors with [`Error::NoDevice`] when there is none.
pub fn devices() -> Result<Vec<DeviceInfo>> {
    let names = device_names()?;
    if names.is_empty() {
        return Err(Error::NoDevice {
            detail: String::new(),
        });
    }
    names
        .iter()
        .map(|n| Context::open(Some(n))?.info())
        .collect()
}

/// Something that keeps open a device context it did not get from [`Context::open`]: an
/// RDMA CM id, whose context librdmacm opened ([`Context::from_owner`] wraps it).
///
/// # Safety
/// Every `Some` that [`verbs`](ContextOwner::verbs) returns must be an open `ibv_context` that
/// stays open as long as the implementor is alive.
pub(crate) unsafe trait ContextOwner: Send + Sync + 'static {
    /// The open context, or `None` when there is none (yet).
    fn verbs(&self) -> Option<NonNull<sys::ibv_context>>;
}

pub(crate) struct ContextInner {
    ctx: NonNull<sys::ibv_context>,
    name: String,
    /// Set for contexts rdma_cm opened: they are not ours to close, and this keeps their owner alive.
    borrowed_from: Option<Arc<dyn Send + Sync>>,
}

// SAFETY: ibv_alloc_td(3): "By default all verbs objects are safe for multi-threaded access";
// the context pointer is only passed to verbs (and its `device` field read, which libibverbs
// sets once when opening it). `name` and `borrowed_from` are Send + Sync.
unsafe impl Send for ContextInner {}
// SAFETY: as above; Rust mutates nothing behind `&ContextInner`.
unsafe impl Sync for ContextInner {}

impl Drop for ContextInner {
    fn drop(&mut self) {
        if self.borrowed_from.is_none() {
            // The PD and CQ wrappers hold a `Context` (an Arc of this), so none of them outlives
            // it (ibv_close_device(3) wants associated resources released first).
            // SAFETY: `borrowed_from` is None only for contexts ibv_open_device returned
            // (`open_dev`), so this one is ours to close, once (Drop), after its users (above).
            let rc = unsafe { sys::ibv_close_device(self.ctx.as_ptr()) };
            if rc != 0 {
                tracing::warn!("ibv_close_device({}) failed: {rc}", self.name);
            }
        }
    }
}

/// An open device (`struct ibv_context`). Cheap to clone; closed when the last clone and every
/// object made from it are gone.
#[derive(Clone)]
pub struct Context {
    pub(crate) inner: Arc<ContextInner>,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Context({})", self.inner.name)
    }
}

impl Context {
    /// Opens device `name` (`ibv_open_device(3)`), or with `None` the first device that has an
    /// active port (else the first device).
    pub fn open(name: Option<&str>) -> Result<Context> {
        let list = DeviceList::get()?;
        let names = list.names();
        if names.is_empty() {
            return Err(Error::NoDevice {
                detail: String::new(),
            });
        }
        let pick = |n: &str| list.devices().find(|d| DeviceList::name_of(*d) == n);
        match name {
            Some(n) => {
                let dev = pick(n).ok_or_else(|| Error::DeviceNotFound {
                    name: n.to_string(),
                    available: names.clone(),
                })?;
                Self::open_dev(dev)
            }
            None => {
                let mut first = None;
                for dev in list.devices() {
                    let ctx = Self::open_dev(dev)?;
                    if ctx.first_active_port().is_ok() {
                        return Ok(ctx);
                    }
                    first.get_or_insert(ctx);
                }
                first.ok_or(Error::NoDevice {
                    detail: String::new(),
                })
            }
        }
    }

    fn open_dev(dev: NonNull<sys::ibv_device>) -> Result<Context> {
        let name = DeviceList::name_of(dev);
        // SAFETY: callers pass an entry of a `DeviceList` they still hold (valid until freed,
        // ibv_get_device_list(3)); NULL is checked below.
        let ctx = unsafe { sys::ibv_open_device(dev.as_ptr()) };
        let ctx = NonNull::new(ctx).ok_or_else(|| Error::last_os("ibv_open_device"))?;
        Ok(Context {
            inner: Arc::new(ContextInner {
                ctx,
                name,
                borrowed_from: None,
            }),
        })
    }

    /// Wraps the context `owner` keeps open (see [`ContextOwner`]), or `None` when it has none;
    /// it is never closed here, and the context keeps `owner` alive.
    pub(crate) fn from_owner<O: ContextOwner>(owner: Arc<O>) -> Option<Context> {
        let ctx = owner.verbs()?;
        // Its `device` is the device libibverbs opened it on; ibv_get_device_name(3) returns that
        // device's name or NULL (`cstr_lossy` allows it).
        // SAFETY: `ctx` is open while `owner` (alive here) lives: ContextOwner's contract, which
        // its unsafe impl states.
        let name = unsafe { cstr_lossy(sys::ibv_get_device_name((*ctx.as_ptr()).device)) };
        Some(Context {
            inner: Arc::new(ContextInner {
                ctx,
                name,
                borrowed_from: Some(owner),
            }),
        })
    }

    pub(crate) fn as_ptr(&self) -> *mut sys::ibv_context {
        self.inner.ctx.as_ptr()
    }

    pub(crate) fn as_non_null(&self) -> NonNull<sys::ibv_context> {
        self.inner.ctx
    }

    /// True when both are the same device context (`ibv_context`): two [`Context::open`]s of
    /// one device are different contexts, and objects of one cannot be used with the other.
    pub fn same_as(&self, other: &Context) -> bool {
        self.as_ptr() == other.as_ptr()
    }

    /// The device name, e.g. `rxe0`.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// `ibv_query_device(3)`.
    pub fn query_device(&self) -> Result<DeviceAttr> {
        let mut a = sys::ibv_device_attr::default();
        // SAFETY: `self` holds an open context (ibv_open_device returned it non-null, or
        // `from_borrowed`'s contract); `a` is a writable ibv_device_attr.
        let rc = unsafe { sys::ibv_query_device(self.as_ptr(), &mut a) };
        if rc != 0 {
            return Err(Error::verb("ibv_query_device", rc));
        }
        Ok(DeviceAttr {
            fw_ver: array_lossy(&a.fw_ver),
            node_guid: guid_str(a.node_guid),
            max_mr_size: a.max_mr_size,
            max_qp_wr: a.max_qp_wr.max(0) as u32,
            max_sge: a.max_sge.max(0) as u32,
            max_cqe: a.max_cqe.max(0) as u32,
            max_qp_rd_atom: a.max_qp_rd_atom.max(0) as u32,
            max_qp_init_rd_atom: a.max_qp_init_rd_atom.max(0) as u32,
            phys_port_cnt: a.phys_port_cnt,
        })
    }

    /// `ibv_query_port(3)`.
    pub fn query_port(&self, port: u8) -> Result<PortAttr> {
        let mut a = sys::ibv_port_attr::default();
        // SAFETY: as in `query_device`; `a` is a writable ibv_port_attr.
        let rc = unsafe { sys::shim_ibv_query_port(self.as_ptr(), port, &mut a) };
        if rc != 0 {
            return Err(Error::Verb {
                verb: "ibv_query_port",
                errno: rc,
                hint: " (no such port on this device?)",
            });
        }
        Ok(PortAttr {
            port,
            // SAFETY: ibv_port_state_str(3) returns "a constant string that describes the enum
            // value" (NULL would give "").
            state: unsafe { cstr_lossy(sys::ibv_port_state_str(a.state)) },
            active: a.state == sys::IBV_PORT_ACTIVE,
            active_mtu: Mtu::from_raw(a.active_mtu),
            max_mtu: Mtu::from_raw(a.max_mtu),
            link_layer: match u32::from(a.link_layer) {
                sys::IBV_LINK_LAYER_ETHERNET => "Ethernet".into(),
                sys::IBV_LINK_LAYER_INFINIBAND | sys::IBV_LINK_LAYER_UNSPECIFIED => {
                    "InfiniBand".into()
                }
                x => format!("unknown({x})"),
            },
            lid: a.lid,
            max_msg_sz: a.max_msg_sz,
            gid_tbl_len: a.gid_tbl_len.max(0) as u32,
        })
    }

    /// The first port in state ACTIVE.
    pub fn first_active_port(&self) -> Result<PortAttr> {
        let n = self.query_device()?.phys_port_cnt;
        let mut state = String::new();
        for p in 1..=n {
            let a = self.query_port(p)?;
            if a.active {
                return Ok(a);
            }
            state = a.state;
        }
        Err(Error::PortNotActive {
            device: self.name().to_string(),
            port: None,
            state,
        })
    }

    /// Port `port` (1-based, as `ibv_devinfo` numbers them) if it exists and is active; `None`:
    /// the first active port.
    pub fn active_port(&self, port: Option<u8>) -> Result<PortAttr> {
        let Some(p) = port else {
            return self.first_active_port();
        };
        let n = self.query_device()?.phys_port_cnt;
        if p == 0 || p > n {
            return Err(Error::PortNotFound {
                device: self.name().to_string(),
                port: p,
                ports: n,
            });
        }
        let a = self.query_port(p)?;
        if !a.active {
            return Err(Error::PortNotActive {
                device: self.name().to_string(),
                port: Some(p),
                state: a.state.to_string(),
            });
        }
        Ok(a)
    }

    /// The populated entries of a port's GID table, from one `ibv_query_gid_table(3)` call
    /// (querying each of rxe's 1024 slots with `ibv_query_gid_ex(3)` cost seconds in the guest).
    pub fn gid_table(&self, port: u8) -> Result<Vec<GidEntry>> {
        let ports = self.query_device()?.phys_port_cnt.max(1);
        let len = self.query_port(port)?.gid_tbl_len as usize;
        let max = len
            .checked_mul(ports as usize)
            .filter(|&n| n <= 1 << 20)
            .ok_or_else(|| Error::TooLarge {
                what: "GID table",
                detail: format!("{len} entries × {ports} ports (more than 2^20 entries)"),
            })?
            .max(1);
        let mut entries = vec![sys::ibv_gid_entry::default(); max];
        let ctx = self.as_ptr();
        // SAFETY: `ctx` is open (as in `query_device`); `entries` has `max` elements (built
        // just above), the size ibv_query_gid_table(3) is told it may fill.
        let n = unsafe { sys::shim_ibv_query_gid_table(ctx, entries.as_mut_ptr(), max, 0) };
        if n < 0 {
            return Err(Error::verb("ibv_query_gid_table", (-n) as i32));
        }
        let mut out = Vec::new();
        for e in entries.iter().take(n as usize) {
            if e.port_num != u32::from(port) {
                continue;
            }
            // SAFETY: `raw` ([u8; 16]) spans the whole union, any bit pattern is a valid value,
            // and every entry was initialised (`default()`) before the call wrote some.
            let gid = Gid(unsafe { e.gid.raw });
            if gid.is_zero() {
                continue;
            }
            let netdev = (e.ndev_ifindex != 0)
                .then(|| ifname(e.ndev_ifindex))
                .flatten();
            out.push(GidEntry {
                index: e.gid_index,
                gid,
                gid_type: GidType::from_raw(e.gid_type),
                netdev,
            });
        }
        out.sort_by_key(|e| e.index);
        Ok(out)
    }

    /// The GID to use on `port`: `wanted` if given (checked), else the IPv4-mapped RoCE v2 GID.
    pub fn choose_gid(&self, port: u8, wanted: Option<u32>) -> Result<GidEntry> {
        let t = self.gid_table(port)?;
        select_gid(&t, wanted).cloned().map_err(|e| match e {
            Error::InvalidArgument(m) => {
                Error::InvalidArgument(format!("{} port {port}: {m}", self.name()))
            }
            e => e,
        })
    }

    /// Everything about this device, for `rdmaxfer devices`.
    pub fn info(&self) -> Result<DeviceInfo> {
        let attr = self.query_device()?;
        // SAFETY: `self` holds an open context (as in `query_device`); its `device` field is the
        // device libibverbs opened it on (struct ibv_context, verbs.h).
        let dev = unsafe { (*self.as_ptr()).device };
        // SAFETY: an open device stays valid while a context on it is open
        // (ibv_get_device_list(3): after freeing the list "only the open devices" remain usable).
        let (node_type, transport) = unsafe { ((*dev).node_type, (*dev).transport_type) };
        let mut ports = Vec::new();
        for p in 1..=attr.phys_port_cnt {
            ports.push(PortInfo {
                attr: self.query_port(p)?,
                gids: self.gid_table(p)?,
            });
        }
        Ok(DeviceInfo {
            name: self.name().to_string(),
            node_guid: attr.node_guid.clone(),
            // SAFETY: ibv_node_type_str(3) returns "a constant string that describes the enum
            // value" (NULL would give "").
            node_type: unsafe { cstr_lossy(sys::ibv_node_type_str(node_type)) },
            transport: transport_str(transport).into(),
            attr,
            ports,
        })
    }
}

fn ifname(ifindex: u32) -> Option<String> {
    let mut buf = [0 as libc::c_char; libc::IF_NAMESIZE];
    // SAFETY: `buf` has IF_NAMESIZE writable bytes, the size if_indextoname(3) requires.
    let p = unsafe { libc::if_indextoname(ifindex, buf.as_mut_ptr()) };
    (!p.is_null()).then(|| array_lossy(&buf))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mtu_conversions() {
        for (b, m) in [(256, Mtu::M256), (1024, Mtu::M1024), (4096, Mtu::M4096)] {
            assert_eq!(Mtu::from_bytes(b).unwrap(), m);
            assert_eq!(m.bytes(), b);
            assert_eq!(Mtu::from_raw(m.to_raw()), Some(m));
        }
        assert!(Mtu::from_bytes(1500).is_err());
        assert_eq!(Mtu::from_raw(0), None);
        assert_eq!(Mtu::from_raw(sys::IBV_MTU_1024), Some(Mtu::M1024));
    }

    #[test]
    fn guid_formatting() {
        assert_eq!(
            guid_str(0x0123_4567_89ab_cdefu64.to_be()),
            "0123:4567:89ab:cdef"
        );
    }
}
