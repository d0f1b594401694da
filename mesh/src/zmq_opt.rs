//! Integer socket options of the vendored libzmq that the `zmq` crate has no setter for
//! (`vendor/zeromq-src/PATCHES.md`, "Router ids", "Batch sizes"): the one place the mesh calls libzmq's C API
//! itself.
#![allow(unsafe_code)]

use std::os::raw::{c_int, c_void};

/// `ZMQ_ROUTER_NOTIFY`: a ROUTER reads an empty message from a connection's routing id when
/// that connection ends (with [`NOTIFY_DISCONNECT`]).
pub(crate) const ROUTER_NOTIFY: c_int = 97;
/// `ZMQ_NOTIFY_DISCONNECT`, the value of [`ROUTER_NOTIFY`] the mesh uses.
pub(crate) const NOTIFY_DISCONNECT: c_int = 2;
/// `ZMQ_ROUTER_ASSIGN_IDS` (vendored patch): a ROUTER ignores the routing ids its peers
/// announce and gives every connection a generated one.
pub(crate) const ROUTER_ASSIGN_IDS: c_int = 0x5a4c_0001;

/// `ZMQ_IN_BATCH_SIZE` (vendored patch "batch sizes": settable without the DRAFT API): the
/// size of each connection's receive buffer (libzmq's default 8,192 bytes).
pub(crate) const IN_BATCH_SIZE: c_int = 101;
/// `ZMQ_OUT_BATCH_SIZE` (the same patch): the size of each connection's send buffer (default
/// 8,192 bytes).
pub(crate) const OUT_BATCH_SIZE: c_int = 102;

/// `ZMQ_IN_ZERO_COPY` (vendored patch "decoder copies"): 0 makes each connection copy a
/// received message out of its receive buffer, which then carries no reference counts.
pub(crate) const IN_ZERO_COPY: c_int = 0x5a4c_0002;

/// `ZMQ_LAZY_BUFFERS` (vendored patch "lazy buffers"): 1 makes each connection free its
/// receive buffer once everything read is decoded and its send buffer once everything encoded
/// is written, allocating them again on use.
pub(crate) const LAZY_BUFFERS: c_int = 0x5a4c_0003;

/// Sets the integer socket option `option` of `socket` to `value`.
pub(crate) fn set_int(socket: &mut zmq::Socket, option: c_int, value: c_int) -> zmq::Result<()> {
    let ptr = socket.as_mut_ptr();
    // SAFETY: `ptr` is the live socket `socket` borrows exclusively for this call; the value
    // pointer and length describe the local `value`, which libzmq copies during the call.
    let rc = unsafe {
        zmq_sys::zmq_setsockopt(
            ptr,
            option,
            std::ptr::from_ref(&value).cast::<c_void>(),
            std::mem::size_of::<c_int>(),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        // SAFETY: reads libzmq's thread-local errno of the call above; no pointers involved.
        Err(zmq::Error::from_raw(unsafe { zmq_sys::zmq_errno() }))
    }
}
