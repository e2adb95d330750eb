//! Device listing: `rdmaxfer_devices`.

use std::ffi::{c_char, CString};

use super::boundary::{self, out, Fail};
use super::handle::{free_handle, handle, impl_handle, into_handle, Slot};
use super::status::rdmaxfer_status;
use crate::verbs;

/// A snapshot of the RDMA devices. Made by `rdmaxfer_devices`, freed by
/// `rdmaxfer_device_list_free`.
pub struct rdmaxfer_device_list {
    slot: Slot<Vec<Device>>,
}

/// One device (Rust side), with the strings C borrows.
pub struct Device {
    name: CString,
    node_guid: CString,
    transport: CString,
    ports: u32,
    active_ports: u32,
    gids: u32,
}

impl_handle!(rdmaxfer_device_list, Vec<Device>);

/// One device of an `rdmaxfer_device_list`. The strings belong to the list and live until it
/// is freed.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct rdmaxfer_device_info {
    /// In: `sizeof` the struct as the caller knows it. Out: the bytes written (see the
    /// header's conventions: the struct can grow).
    pub struct_size: usize,
    /// Device name, e.g. "rxe0".
    pub name: *const c_char,
    /// Node GUID, "xxxx:xxxx:xxxx:xxxx".
    pub node_guid: *const c_char,
    /// Transport: "InfiniBand", "iWARP", ...
    pub transport: *const c_char,
    /// Number of ports.
    pub ports: u32,
    /// Ports whose state is ACTIVE.
    pub active_ports: u32,
    /// Populated GID table entries over all ports.
    pub gids: u32,
}

// SAFETY: repr(C), first field `struct_size: usize`.
unsafe impl boundary::Growable for rdmaxfer_device_info {
    const V1: usize = std::mem::size_of::<rdmaxfer_device_info>();
}

fn cstring(s: &str) -> CString {
    CString::new(s.replace('\0', " ")).unwrap_or_default()
}

/// Lists the RDMA devices with their ports and GIDs. Fails with `RDMAXFER_ERR_NO_DEVICE` (the
/// last error message says how to get a Soft-RoCE device) when there is none.
/// Returns: RDMAXFER_OK; the pointer statuses of out_list; RDMAXFER_ERR_NO_DEVICE when there is
/// none; RDMAXFER_ERR_VERBS or RDMAXFER_ERR_DEVICE_NOT_FOUND when one cannot be opened or queried;
/// RDMAXFER_ERR_PANIC.
/// Blocks: no (it queries the devices, not the network).
#[no_mangle]
pub extern "C" fn rdmaxfer_devices(out_list: *mut *mut rdmaxfer_device_list) -> rdmaxfer_status {
    boundary::run("rdmaxfer_devices", || {
        let o = out(out_list, "out_list")?;
        let devs = verbs::devices()?
            .into_iter()
            .map(|d| Device {
                name: cstring(&d.name),
                node_guid: cstring(&d.node_guid),
                transport: cstring(&d.transport),
                ports: d.ports.len() as u32,
                active_ports: d.ports.iter().filter(|p| p.attr.active).count() as u32,
                gids: d.ports.iter().map(|p| p.gids.len() as u32).sum(),
            })
            .collect();
        o.set(into_handle::<rdmaxfer_device_list>(devs));
        Ok(())
    })
}

/// Number of devices in `list` (0 for NULL).
/// Returns: the count; 0 for NULL (the last error message says nothing then), and for a misaligned,
/// freed, busy or poisoned list (it says why).
/// Blocks: no.
#[no_mangle]
pub extern "C" fn rdmaxfer_device_list_len(list: *const rdmaxfer_device_list) -> usize {
    boundary::run_or("rdmaxfer_device_list_len", 0, || {
        if list.is_null() {
            return Ok(0);
        }
        Ok(handle(list, "list")?.len())
    })
}

/// Device `index` of `list`.
/// Returns: RDMAXFER_OK; the handle statuses of list; the pointer statuses of out_info;
/// RDMAXFER_ERR_INVALID_ARGUMENT if index is past the end.
/// Blocks: no.
#[no_mangle]
pub extern "C" fn rdmaxfer_device_list_get(
    list: *const rdmaxfer_device_list,
    index: usize,
    out_info: *mut rdmaxfer_device_info,
) -> rdmaxfer_status {
    boundary::run("rdmaxfer_device_list_get", || {
        let l = handle(list, "list")?;
        let o = boundary::sized_out(out_info, "out_info")?;
        let d = l.get(index).ok_or_else(|| {
            Fail::invalid(format!("index {index} (the list has {} devices)", l.len()))
        })?;
        o.set(rdmaxfer_device_info {
            struct_size: 0,
            name: d.name.as_ptr(),
            node_guid: d.node_guid.as_ptr(),
            transport: d.transport.as_ptr(),
            ports: d.ports,
            active_ports: d.active_ports,
            gids: d.gids,
        });
        Ok(())
    })
}

/// Frees a device list (NULL: nothing).
/// Returns: nothing (NULL: a no-op; a misaligned or already freed list: only the last error message
/// says so).
/// Blocks: no.
#[no_mangle]
pub extern "C" fn rdmaxfer_device_list_free(list: *mut rdmaxfer_device_list) {
    free_handle("rdmaxfer_device_list_free", list);
}
