//! The C ABI's layout against the system's libfabric headers.
//!
//! One table below lists every struct of `fabric_capi::abi` with every field,
//! every anonymous union, and every constant. From it, the test writes a C
//! program that includes `<rdma/fabric.h>` and the other headers and prints
//! `sizeof`, `_Alignof` and `offsetof` (and each constant's value), compiles it
//! with `cc`, runs it, and compares each number with the Rust side
//! (`size_of`, `align_of`, `offset_of!`). Without the headers (no
//! `libfabric-dev`) the test skips area `libfabric`.

use std::collections::BTreeMap;
use std::mem::{align_of, offset_of, size_of};
use std::path::{Path, PathBuf};
use std::process::Command;

use fabric_capi::abi;

/// The headers the C program includes: those `abi` follows.
const HEADERS: &[&str] = &[
    "rdma/fabric.h",
    "rdma/fi_domain.h",
    "rdma/fi_endpoint.h",
    "rdma/fi_eq.h",
    "rdma/fi_cm.h",
    "rdma/fi_tagged.h",
    "rdma/fi_rma.h",
    "rdma/fi_atomic.h",
    "rdma/fi_errno.h",
    "rdma/fi_collective.h",
    "rdma/fi_trigger.h",
    "rdma/providers/fi_log.h",
    "rdma/providers/fi_prov.h",
];

/// A struct (or an anonymous union) as both sides see it.
struct Layout {
    /// The C type expression (`struct fid`, or `((struct fi_mr_attr *)0)->device`
    /// for an anonymous union, which C cannot name).
    c_type: String,
    /// For an anonymous union: `(struct, member)`, whose offsets are taken in it.
    within: Option<(&'static str, &'static str)>,
    /// The name the report uses.
    name: &'static str,
    /// Rust's size.
    size: usize,
    /// Rust's alignment.
    align: usize,
    /// Each field's C name (a raw identifier loses its `r#`) and Rust offset.
    fields: Vec<(&'static str, usize)>,
}

/// A field name as C spells it: `r#type` is `type`.
fn c_name(f: &'static str) -> &'static str {
    f.strip_prefix("r#").unwrap_or(f)
}

/// `structs!{ name { field, ... } ... }`: every struct, each field once.
macro_rules! structs {
    ($($s:ident { $($f:ident),* $(,)? })*) => {
        fn structs() -> Vec<Layout> {
            vec![$(Layout {
                c_type: format!("struct {}", stringify!($s)),
                within: None,
                name: stringify!($s),
                size: size_of::<abi::$s>(),
                align: align_of::<abi::$s>(),
                fields: vec![$((c_name(stringify!($f)), offset_of!(abi::$s, $f))),*],
            }),*]
        }
    };
}

/// `unions!{ parent.member: rust_name { field, ... } ... }`: the anonymous
/// unions, measured as the member of their parent struct.
macro_rules! unions {
    ($($p:ident . $m:ident : $u:ident { $($f:ident),* $(,)? })*) => {
        fn unions() -> Vec<Layout> {
            vec![$(Layout {
                c_type: format!("((struct {} *)0)->{}", stringify!($p), stringify!($m)),
                within: Some((stringify!($p), stringify!($m))),
                name: stringify!($u),
                size: size_of::<abi::$u>(),
                align: align_of::<abi::$u>(),
                fields: vec![$((stringify!($f), offset_of!(abi::$u, $f))),*],
            }),*]
        }
    };
}

/// `constants!{ NAME, ... }`: every constant, compared as `unsigned long long`.
macro_rules! constants {
    ($($c:ident),* $(,)?) => {
        // The constants keep their C types (u64, u32, usize, c_int): each is
        // widened to u64 as C widens it to unsigned long long; none is negative.
        #[allow(clippy::unnecessary_cast, clippy::cast_sign_loss)]
        fn constants() -> Vec<(String, u64)> {
            vec![$((stringify!($c).to_string(), abi::$c as u64)),*]
        }
    };
}

structs! {
    fi_ioc { addr, count }
    fi_tx_attr {
        caps, mode, op_flags, msg_order, comp_order, inject_size, size, iov_limit,
        rma_iov_limit, tclass
    }
    fi_rx_attr { caps, mode, op_flags, msg_order, comp_order, total_buffered_recv, size, iov_limit }
    fi_ep_attr {
        r#type, protocol, protocol_version, max_msg_size, msg_prefix_size, max_order_raw_size,
        max_order_war_size, max_order_waw_size, mem_tag_format, tx_ctx_cnt, rx_ctx_cnt,
        auth_key_size, auth_key
    }
    fi_domain_attr {
        domain, name, threading, control_progress, data_progress, resource_mgmt, av_type,
        mr_mode, mr_key_size, cq_data_size, cq_cnt, ep_cnt, tx_ctx_cnt, rx_ctx_cnt,
        max_ep_tx_ctx, max_ep_rx_ctx, max_ep_stx_ctx, max_ep_srx_ctx, cntr_cnt, mr_iov_limit,
        caps, mode, auth_key, auth_key_size, max_err_data, mr_cnt, tclass
    }
    fi_fabric_attr { fabric, name, prov_name, prov_version, api_version }
    fi_info {
        next, caps, mode, addr_format, src_addrlen, dest_addrlen, src_addr, dest_addr, handle,
        tx_attr, rx_attr, ep_attr, domain_attr, fabric_attr, nic
    }
    fi_device_attr { name, device_id, device_version, vendor_id, driver, firmware }
    fi_pci_attr { domain_id, bus_id, device_id, function_id }
    fi_bus_attr { bus_type, attr }
    fi_link_attr { address, mtu, speed, state, network_type }
    fi_ops { size, close, bind, control, ops_open, tostr, ops_set }
    fid { fclass, context, ops }
    fi_ops_fabric { size, domain, passive_ep, eq_open, wait_open, trywait, domain2 }
    fid_fabric { fid, ops, api_version }
    fid_nic { fid, device_attr, bus_attr, link_attr, prov_attr }
    fi_alias { fid, flags }
    fi_fid_var { name, val }
    fi_mr_raw_attr { flags, base_addr, raw_key, key_size }
    fi_mr_map_raw { flags, base_addr, raw_key, key_size, key }
    fi_param { name, r#type, help_string, value }
    fi_context { internal }
    fi_context2 { internal }
    fi_recv_context { ep, context }
    fi_av_attr { r#type, rx_ctx_bits, count, ep_per_node, name, map_addr, flags }
    fi_av_set_attr { count, start_addr, end_addr, stride, comm_key_size, comm_key, flags }
    fi_ops_av { size, insert, insertsvc, insertsym, remove, lookup, straddr, av_set }
    fid_av { fid, ops }
    fid_mr { fid, mem_desc, key }
    fi_mr_attr {
        mr_iov, iov_count, access, offset, requested_key, context, auth_key_size, auth_key,
        iface, device
    }
    fi_mr_modify { flags, attr }
    fi_hmem_override_ops { size, copy_from_hmem_iov, copy_to_hmem_iov }
    fi_ops_domain {
        size, av_open, cq_open, endpoint, scalable_ep, cntr_open, poll_open, stx_ctx, srx_ctx,
        query_atomic, query_collective, endpoint2
    }
    fi_ops_mr { size, reg, regv, regattr }
    fid_domain { fid, ops, mr }
    fi_msg { msg_iov, desc, iov_count, addr, context, data }
    fi_ops_ep { size, cancel, getopt, setopt, tx_ctx, rx_ctx, rx_size_left, tx_size_left }
    fi_ops_msg { size, recv, recvv, recvmsg, send, sendv, sendmsg, inject, senddata, injectdata }
    fid_ep { fid, ops, cm, msg, rma, tagged, atomic, collective }
    fid_pep { fid, ops, cm }
    fid_stx { fid, ops }
    fi_wait_attr { wait_obj, flags }
    fi_ops_wait { size, wait }
    fid_wait { fid, ops }
    fi_mutex_cond { mutex, cond }
    fi_wait_pollfd { change_index, nfds, fd }
    fi_poll_attr { flags }
    fi_ops_poll { size, poll, poll_add, poll_del }
    fid_poll { fid, ops }
    fi_eq_attr { size, flags, wait_obj, signaling_vector, wait_set }
    fi_eq_entry { fid, context, data }
    fi_eq_err_entry { fid, context, data, err, prov_errno, err_data, err_data_size }
    fi_eq_cm_entry { fid, info, data }
    fi_ops_eq { size, read, readerr, write, sread, strerror }
    fid_eq { fid, ops }
    fi_cq_entry { op_context }
    fi_cq_msg_entry { op_context, flags, len }
    fi_cq_data_entry { op_context, flags, len, buf, data }
    fi_cq_tagged_entry { op_context, flags, len, buf, data, tag }
    fi_cq_err_entry {
        op_context, flags, len, buf, data, tag, olen, err, prov_errno, err_data, err_data_size
    }
    fi_cq_attr { size, flags, format, wait_obj, signaling_vector, wait_cond, wait_set }
    fi_ops_cq { size, read, readfrom, readerr, sread, sreadfrom, signal, strerror }
    fid_cq { fid, ops }
    fi_cntr_attr { events, wait_obj, wait_set, flags }
    fi_ops_cntr { size, read, readerr, add, set, wait, adderr, seterr }
    fid_cntr { fid, ops }
    fid_mc { fid, fi_addr }
    fi_ops_cm { size, setname, getname, getpeer, connect, listen, accept, reject, shutdown, join }
    fi_msg_tagged { msg_iov, desc, iov_count, addr, tag, ignore, context, data }
    fi_ops_tagged { size, recv, recvv, recvmsg, send, sendv, sendmsg, inject, senddata, injectdata }
    fi_rma_iov { addr, len, key }
    fi_rma_ioc { addr, count, key }
    fi_msg_rma { msg_iov, desc, iov_count, addr, rma_iov, rma_iov_count, context, data }
    fi_ops_rma {
        size, read, readv, readmsg, write, writev, writemsg, inject, writedata, injectdata
    }
    fi_atomic_attr { count, size }
    fi_msg_atomic {
        msg_iov, desc, iov_count, addr, rma_iov, rma_iov_count, datatype, op, context, data
    }
    fi_msg_fetch { msg_iov, desc, iov_count }
    fi_msg_compare { msg_iov, desc, iov_count }
    fi_ops_atomic {
        size, write, writev, writemsg, inject, readwrite, readwritev, readwritemsg, compwrite,
        compwritev, compwritemsg, writevalid, readwritevalid, compwritevalid
    }
    fi_ops_av_set { size, set_union, intersect, diff, insert, remove, addr }
    fid_av_set { fid, ops }
    fi_collective_attr { op, datatype, datatype_attr, max_members, mode }
    fi_collective_addr { set, coll_addr }
    fi_msg_collective {
        msg_iov, desc, iov_count, coll_addr, root_addr, coll, datatype, op, context
    }
    fi_ops_collective {
        size, barrier, broadcast, alltoall, allreduce, allgather, reduce_scatter, reduce,
        scatter, gather, msg, barrier2
    }
    fi_trigger_threshold { cntr, threshold }
    fi_trigger_var { datatype, count, addr, value }
    fi_trigger_xpu { count, iface, device, var }
    fi_op_msg { ep, msg, flags }
    fi_op_tagged { ep, msg, flags }
    fi_op_rma { ep, msg, flags }
    fi_op_atomic { ep, msg, flags }
    fi_op_fetch_atomic { ep, msg, fetch, flags }
    fi_op_compare_atomic { ep, msg, fetch, compare, flags }
    fi_op_cntr { cntr, value }
    fi_triggered_context { event_type, trigger }
    fi_triggered_context2 { event_type, trigger }
    fi_deferred_work { context, threshold, triggering_cntr, completion_cntr, op_type, op }
    fi_provider { version, fi_version, context, name, getinfo, fabric, cleanup }
}

unions! {
    fi_bus_attr.attr: fi_bus_attr_attr { pci }
    fi_mr_attr.device: fi_mr_attr_device { reserved, cuda, ze, neuron, synapseai }
    fi_trigger_var.value: fi_trigger_var_value { val8, val16, val32, val64, data }
    fi_trigger_xpu.device: fi_trigger_xpu_device { reserved, cuda, ze }
    fi_triggered_context.trigger: fi_triggered_context_trigger { threshold, xpu, internal }
    fi_triggered_context2.trigger: fi_triggered_context2_trigger { threshold, xpu, internal }
    fi_deferred_work.op: fi_deferred_work_op {
        msg, tagged, rma, atomic, fetch_atomic, compare_atomic, cntr
    }
}

constants! {
    FI_MAJOR_VERSION, FI_MINOR_VERSION, FI_REVISION_VERSION, FI_PATH_MAX, FI_NAME_MAX,
    FI_VERSION_MAX, FI_PROV_SPECIFIC, FI_MSG, FI_RMA, FI_TAGGED, FI_ATOMIC, FI_ATOMICS,
    FI_MULTICAST, FI_COLLECTIVE, FI_READ, FI_WRITE, FI_RECV, FI_SEND, FI_TRANSMIT,
    FI_REMOTE_READ, FI_REMOTE_WRITE, FI_MULTI_RECV, FI_REMOTE_CQ_DATA, FI_MORE, FI_PEEK,
    FI_TRIGGER, FI_FENCE, FI_PRIORITY, FI_COMPLETION, FI_EVENT, FI_INJECT, FI_INJECT_COMPLETE,
    FI_TRANSMIT_COMPLETE, FI_DELIVERY_COMPLETE, FI_AFFINITY, FI_COMMIT_COMPLETE,
    FI_MATCH_COMPLETE, FI_PEER_TRANSFER, FI_AV_USER_ID, FI_PEER, FI_XPU_TRIGGER,
    FI_HMEM_HOST_ALLOC, FI_HMEM_DEVICE_ONLY, FI_HMEM, FI_VARIABLE_MSG, FI_RMA_PMEM,
    FI_SOURCE_ERR, FI_LOCAL_COMM, FI_REMOTE_COMM, FI_SHARED_AV, FI_PROV_ATTR_ONLY,
    FI_NUMERICHOST, FI_RMA_EVENT, FI_SOURCE, FI_NAMED_RX_CTX, FI_DIRECTED_RECV, FI_CLAIM,
    FI_DISCARD, FI_SELECTIVE_COMPLETION, FI_FORMAT_UNSPEC, FI_SOCKADDR, FI_SOCKADDR_IN,
    FI_SOCKADDR_IN6, FI_SOCKADDR_IB, FI_ADDR_PSMX, FI_ADDR_GNI, FI_ADDR_BGQ, FI_ADDR_MLX,
    FI_ADDR_STR, FI_ADDR_PSMX2, FI_ADDR_IB_UD, FI_ADDR_EFA, FI_ADDR_PSMX3, FI_ADDR_OPX,
    FI_ADDR_CXI, FI_ADDR_UNSPEC, FI_ADDR_NOTAVAIL, FI_KEY_NOTAVAIL, FI_SHARED_CONTEXT,
    FI_AV_UNSPEC, FI_AV_MAP, FI_AV_TABLE, FI_MR_UNSPEC, FI_MR_BASIC, FI_MR_SCALABLE,
    FI_MR_LOCAL, FI_MR_RAW, FI_MR_VIRT_ADDR, FI_MR_ALLOCATED, FI_MR_PROV_KEY, FI_MR_MMU_NOTIFY,
    FI_MR_RMA_EVENT, FI_MR_ENDPOINT, FI_MR_HMEM, FI_MR_COLLECTIVE, FI_PROGRESS_UNSPEC,
    FI_PROGRESS_AUTO, FI_PROGRESS_MANUAL, FI_THREAD_UNSPEC, FI_THREAD_SAFE, FI_THREAD_FID,
    FI_THREAD_DOMAIN, FI_THREAD_COMPLETION, FI_THREAD_ENDPOINT, FI_RM_UNSPEC, FI_RM_DISABLED,
    FI_RM_ENABLED, FI_ORDER_NONE, FI_ORDER_RAR, FI_ORDER_RAW, FI_ORDER_RAS, FI_ORDER_WAR,
    FI_ORDER_WAW, FI_ORDER_WAS, FI_ORDER_SAR, FI_ORDER_SAW, FI_ORDER_SAS, FI_ORDER_STRICT,
    FI_ORDER_RMA_RAR, FI_ORDER_RMA_RAW, FI_ORDER_RMA_WAR, FI_ORDER_RMA_WAW, FI_ORDER_ATOMIC_RAR,
    FI_ORDER_ATOMIC_RAW, FI_ORDER_ATOMIC_WAR, FI_ORDER_ATOMIC_WAW, FI_ORDER_DATA, FI_EP_UNSPEC,
    FI_EP_MSG, FI_EP_DGRAM, FI_EP_RDM, FI_EP_SOCK_STREAM, FI_EP_SOCK_DGRAM, FI_PROTO_UNSPEC,
    FI_PROTO_RDMA_CM_IB_RC, FI_PROTO_IWARP, FI_PROTO_IB_UD, FI_PROTO_PSMX, FI_PROTO_UDP,
    FI_PROTO_SOCK_TCP, FI_PROTO_MXM, FI_PROTO_IWARP_RDM, FI_PROTO_IB_RDM, FI_PROTO_GNI,
    FI_PROTO_RXM, FI_PROTO_RXD, FI_PROTO_MLX, FI_PROTO_NETWORKDIRECT, FI_PROTO_PSMX2,
    FI_PROTO_SHM, FI_PROTO_MRAIL, FI_PROTO_RSTREAM, FI_PROTO_RDMA_CM_IB_XRC, FI_PROTO_EFA,
    FI_PROTO_PSMX3, FI_PROTO_RXM_TCP, FI_PROTO_OPX, FI_PROTO_CXI, FI_PROTO_XNET, FI_TC_UNSPEC,
    FI_TC_DSCP, FI_TC_LABEL, FI_TC_BEST_EFFORT, FI_TC_LOW_LATENCY, FI_TC_DEDICATED_ACCESS,
    FI_TC_BULK_DATA, FI_TC_SCAVENGER, FI_TC_NETWORK_CTRL, FI_CONTEXT, FI_MSG_PREFIX,
    FI_ASYNC_IOV, FI_RX_CQ_DATA, FI_LOCAL_MR, FI_NOTIFY_FLAGS_ONLY, FI_RESTRICTED_COMP,
    FI_CONTEXT2, FI_BUFFERED_RECV, FI_BUS_UNSPEC, FI_BUS_UNKNOWN, FI_BUS_PCI, FI_LINK_UNKNOWN,
    FI_LINK_DOWN, FI_LINK_UP, FI_CLASS_UNSPEC, FI_CLASS_FABRIC, FI_CLASS_DOMAIN, FI_CLASS_EP,
    FI_CLASS_SEP, FI_CLASS_RX_CTX, FI_CLASS_SRX_CTX, FI_CLASS_TX_CTX, FI_CLASS_STX_CTX,
    FI_CLASS_PEP, FI_CLASS_INTERFACE, FI_CLASS_AV, FI_CLASS_MR, FI_CLASS_EQ, FI_CLASS_CQ,
    FI_CLASS_CNTR, FI_CLASS_WAIT, FI_CLASS_POLL, FI_CLASS_CONNREQ, FI_CLASS_MC, FI_CLASS_NIC,
    FI_CLASS_AV_SET, FI_CLASS_MR_CACHE, FI_CLASS_MEM_MONITOR, FI_CLASS_PEER_CQ,
    FI_CLASS_PEER_SRX, FI_CLASS_LOG, FI_CLASS_PEER_AV, FI_CLASS_PEER_AV_SET, FI_GETFIDFLAG,
    FI_SETFIDFLAG, FI_GETOPSFLAG, FI_SETOPSFLAG, FI_ALIAS, FI_GETWAIT, FI_ENABLE, FI_BACKLOG,
    FI_GET_RAW_MR, FI_MAP_RAW_MR, FI_UNMAP_KEY, FI_QUEUE_WORK, FI_CANCEL_WORK, FI_FLUSH_WORK,
    FI_REFRESH, FI_DUP, FI_GETWAITOBJ, FI_GET_VAL, FI_SET_VAL, FI_EXPORT_FID, FI_TYPE_INFO,
    FI_TYPE_EP_TYPE, FI_TYPE_CAPS, FI_TYPE_OP_FLAGS, FI_TYPE_ADDR_FORMAT, FI_TYPE_TX_ATTR,
    FI_TYPE_RX_ATTR, FI_TYPE_EP_ATTR, FI_TYPE_DOMAIN_ATTR, FI_TYPE_FABRIC_ATTR,
    FI_TYPE_THREADING, FI_TYPE_PROGRESS, FI_TYPE_PROTOCOL, FI_TYPE_MSG_ORDER, FI_TYPE_MODE,
    FI_TYPE_AV_TYPE, FI_TYPE_ATOMIC_TYPE, FI_TYPE_ATOMIC_OP, FI_TYPE_VERSION, FI_TYPE_EQ_EVENT,
    FI_TYPE_CQ_EVENT_FLAGS, FI_TYPE_MR_MODE, FI_TYPE_OP_TYPE, FI_TYPE_FID,
    FI_TYPE_COLLECTIVE_OP, FI_TYPE_HMEM_IFACE, FI_TYPE_CQ_FORMAT, FI_TYPE_LOG_LEVEL,
    FI_TYPE_LOG_SUBSYS, FI_PARAM_STRING, FI_PARAM_INT, FI_PARAM_BOOL, FI_PARAM_SIZE_T,
    FI_SUCCESS, FI_EPERM, FI_ENOENT, FI_EINTR, FI_EIO, FI_E2BIG, FI_EBADF, FI_EAGAIN, FI_ENOMEM,
    FI_EACCES, FI_EFAULT, FI_EBUSY, FI_ENODEV, FI_EINVAL, FI_EMFILE, FI_ENOSPC, FI_ENOSYS,
    FI_EWOULDBLOCK, FI_ENOMSG, FI_ENODATA, FI_EOVERFLOW, FI_EMSGSIZE, FI_ENOPROTOOPT,
    FI_EOPNOTSUPP, FI_EADDRINUSE, FI_EADDRNOTAVAIL, FI_ENETDOWN, FI_ENETUNREACH,
    FI_ECONNABORTED, FI_ECONNRESET, FI_ENOBUFS, FI_EISCONN, FI_ENOTCONN, FI_ESHUTDOWN,
    FI_ETIMEDOUT, FI_ECONNREFUSED, FI_EHOSTDOWN, FI_EHOSTUNREACH, FI_EALREADY, FI_EINPROGRESS,
    FI_EREMOTEIO, FI_ECANCELED, FI_EKEYREJECTED, FI_ERRNO_OFFSET, FI_EOTHER, FI_ETOOSMALL,
    FI_EOPBADSTATE, FI_EAVAIL, FI_EBADFLAGS, FI_ENOEQ, FI_EDOMAIN, FI_ENOCQ, FI_ECRC, FI_ETRUNC,
    FI_ENOKEY, FI_ENOAV, FI_EOVERRUN, FI_ENORX, FI_ERRNO_MAX, FI_SYMMETRIC, FI_SYNC_ERR,
    FI_UNIVERSE, FI_BARRIER_SET, FI_BROADCAST_SET, FI_ALLTOALL_SET, FI_ALLREDUCE_SET,
    FI_ALLGATHER_SET, FI_REDUCE_SCATTER_SET, FI_REDUCE_SET, FI_SCATTER_SET, FI_GATHER_SET,
    FI_HMEM_SYSTEM, FI_HMEM_CUDA, FI_HMEM_ROCR, FI_HMEM_ZE, FI_HMEM_NEURON, FI_HMEM_SYNAPSEAI,
    FI_COLLECTIVE_OFFSET, FI_INT8, FI_UINT8, FI_INT16, FI_UINT16, FI_INT32, FI_UINT32, FI_INT64,
    FI_UINT64, FI_FLOAT, FI_DOUBLE, FI_FLOAT_COMPLEX, FI_DOUBLE_COMPLEX, FI_LONG_DOUBLE,
    FI_LONG_DOUBLE_COMPLEX, FI_DATATYPE_LAST, FI_INT128, FI_UINT128, FI_VOID, FI_MIN, FI_MAX,
    FI_SUM, FI_PROD, FI_LOR, FI_LAND, FI_BOR, FI_BAND, FI_LXOR, FI_BXOR, FI_ATOMIC_READ,
    FI_ATOMIC_WRITE, FI_CSWAP, FI_CSWAP_NE, FI_CSWAP_LE, FI_CSWAP_LT, FI_CSWAP_GE, FI_CSWAP_GT,
    FI_MSWAP, FI_ATOMIC_OP_LAST, FI_NOOP, FI_BARRIER, FI_BROADCAST, FI_ALLTOALL, FI_ALLREDUCE,
    FI_ALLGATHER, FI_REDUCE_SCATTER, FI_REDUCE, FI_SCATTER, FI_GATHER, FI_REG_MR,
    FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, FI_OPT_CM_DATA_SIZE, FI_OPT_BUFFERED_MIN,
    FI_OPT_BUFFERED_LIMIT, FI_OPT_SEND_BUF_SIZE, FI_OPT_RECV_BUF_SIZE, FI_OPT_TX_SIZE,
    FI_OPT_RX_SIZE, FI_OPT_FI_HMEM_P2P, FI_OPT_XPU_TRIGGER, FI_HMEM_P2P_ENABLED,
    FI_HMEM_P2P_REQUIRED, FI_HMEM_P2P_PREFERRED, FI_HMEM_P2P_DISABLED, FI_WAIT_NONE,
    FI_WAIT_UNSPEC, FI_WAIT_SET, FI_WAIT_FD, FI_WAIT_MUTEX_COND, FI_WAIT_YIELD, FI_WAIT_POLLFD,
    FI_NOTIFY, FI_CONNREQ, FI_CONNECTED, FI_SHUTDOWN, FI_MR_COMPLETE, FI_AV_COMPLETE,
    FI_JOIN_COMPLETE, FI_CQ_FORMAT_UNSPEC, FI_CQ_FORMAT_CONTEXT, FI_CQ_FORMAT_MSG,
    FI_CQ_FORMAT_DATA, FI_CQ_FORMAT_TAGGED, FI_CQ_COND_NONE, FI_CQ_COND_THRESHOLD,
    FI_CNTR_EVENTS_COMP, FI_FETCH_ATOMIC, FI_COMPARE_ATOMIC, FI_TRIGGER_THRESHOLD,
    FI_TRIGGER_XPU, FI_OP_RECV, FI_OP_SEND, FI_OP_TRECV, FI_OP_TSEND, FI_OP_READ, FI_OP_WRITE,
    FI_OP_ATOMIC, FI_OP_FETCH_ATOMIC, FI_OP_COMPARE_ATOMIC, FI_OP_CNTR_SET, FI_OP_CNTR_ADD,
    FI_LOG_CORE, FI_LOG_FABRIC, FI_LOG_DOMAIN, FI_LOG_EP_CTRL, FI_LOG_EP_DATA, FI_LOG_AV,
    FI_LOG_CQ, FI_LOG_EQ, FI_LOG_MR, FI_LOG_CNTR, FI_LOG_SUBSYS_MAX, FI_LOG_WARN, FI_LOG_TRACE,
    FI_LOG_INFO, FI_LOG_DEBUG, FI_LOG_MAX
}

/// Expressions C evaluates that are not plain constants.
fn expressions() -> Vec<(String, u64)> {
    vec![
        ("FI_VERSION(1, 17)".to_string(), u64::from(abi::FI_VERSION(1, 17))),
        ("FI_VERSION(1, 5)".to_string(), u64::from(abi::FI_VERSION(1, 5))),
        ("FI_MAJOR(FI_VERSION(3, 9))".to_string(), u64::from(abi::FI_MAJOR(abi::FI_VERSION(3, 9)))),
        ("FI_MINOR(FI_VERSION(3, 9))".to_string(), u64::from(abi::FI_MINOR(abi::FI_VERSION(3, 9)))),
    ]
}

/// The C program and the values Rust expects of it, keyed alike.
fn program(layouts: &[Layout], values: &[(String, u64)]) -> (String, BTreeMap<String, u64>) {
    let mut c = String::from("#include <stddef.h>\n#include <stdio.h>\n");
    for h in HEADERS {
        c += &format!("#include <{h}>\n");
    }
    c += "int main(void)\n{\n";
    let mut want = BTreeMap::new();
    let mut line = |c: &mut String, key: String, expr: String, value: u64| {
        *c += &format!("\tprintf(\"%s %llu\\n\", \"{key}\", (unsigned long long)({expr}));\n");
        assert!(want.insert(key.clone(), value).is_none(), "{key} listed twice");
    };
    for l in layouts {
        line(&mut c, format!("sizeof {}", l.name), format!("sizeof({})", l.c_type), l.size as u64);
        line(&mut c, format!("alignof {}", l.name), format!("__alignof__({})", l.c_type), l.align as u64);
        for &(f, off) in &l.fields {
            let expr = match l.within {
                None => format!("offsetof({}, {f})", l.c_type),
                Some((p, m)) => format!("offsetof(struct {p}, {m}.{f}) - offsetof(struct {p}, {m})"),
            };
            line(&mut c, format!("offsetof {}.{f}", l.name), expr, off as u64);
        }
    }
    for (name, value) in values {
        line(&mut c, format!("value {name}"), name.clone(), *value);
    }
    c += "\treturn 0;\n}\n";
    (c, want)
}

/// Compiles `source` in `dir` with `cc`, or says why not.
fn compile(dir: &Path, name: &str, source: &str) -> Result<PathBuf, String> {
    let src = dir.join(format!("{name}.c"));
    let exe = dir.join(name);
    std::fs::write(&src, source).map_err(|e| format!("write {}: {e}", src.display()))?;
    let out = Command::new("cc")
        .arg("-std=gnu11")
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .output()
        .map_err(|e| format!("cannot run cc: {e}"))?;
    if out.status.success() {
        Ok(exe)
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

#[test]
fn layout_matches_the_c_headers() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("capi-layout");
    std::fs::create_dir_all(&dir).unwrap();

    // Are the headers here at all? Without them, this area cannot be checked.
    let probe = "#include <rdma/fabric.h>\nint main(void) { return 0; }\n";
    if let Err(why) = compile(&dir, "probe", probe) {
        fabric_testkit::skip("libfabric", format!("cannot compile against <rdma/fabric.h> (libfabric-dev): {why}"));
        return;
    }

    let mut layouts = structs();
    let struct_count = layouts.len();
    layouts.extend(unions());
    let mut values = constants();
    let constant_count = values.len();
    values.extend(expressions());
    let (source, want) = program(&layouts, &values);
    let exe = compile(&dir, "layout", &source).unwrap_or_else(|e| panic!("the layout program does not compile:\n{e}"));
    let out = Command::new(&exe).output().unwrap();
    assert!(out.status.success(), "{} failed: {:?}", exe.display(), out.status);
    let text = String::from_utf8(out.stdout).unwrap();

    let mut got = BTreeMap::new();
    for l in text.lines() {
        let (key, value) = l.rsplit_once(' ').unwrap();
        got.insert(key.to_string(), value.parse::<u64>().unwrap());
    }
    let wrong: Vec<String> = want
        .iter()
        .filter(|(k, v)| got.get(*k) != Some(v))
        .map(|(k, v)| format!("{k}: Rust {v}, C {:?}", got.get(k)))
        .collect();
    assert!(
        wrong.is_empty(),
        "{} of {} numbers differ from the C headers:\n{}",
        wrong.len(),
        want.len(),
        wrong.join("\n")
    );

    let fields: usize = layouts.iter().map(|l| l.fields.len()).sum();
    let unions = layouts.len() - struct_count;
    let expressions = values.len() - constant_count;
    let report = format!(
        "layout: {struct_count} structs, {unions} anonymous unions, {fields} fields, {constant_count} constants and \
         {expressions} expressions match the C headers ({} numbers)\n",
        want.len()
    );
    // Past libtest's capture, so that a run shows what was checked.
    let _ = std::io::Write::write_all(&mut std::io::stderr(), report.as_bytes());
}
