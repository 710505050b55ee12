//! Completion and event entries as providers produce them.

use crate::addr::FiAddr;
use crate::error::Error;
use crate::flags::Caps;
use crate::info::Info;

/// Format of completion entries (`enum fi_cq_format`): which fields of
/// [`CqEntry`] the application asks to see. Providers always fill every field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum CqFormat {
    /// Provider's choice (context).
    #[default]
    Unspec,
    /// `op_context` only.
    Context,
    /// `op_context`, `flags`, `len`.
    Msg,
    /// `op_context`, `flags`, `len`, `buf`, `data`.
    Data,
    /// `op_context`, `flags`, `len`, `buf`, `data`, `tag`.
    Tagged,
}

/// How a blocking wait sleeps (`enum fi_wait_obj`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum WaitObj {
    /// No blocking waits.
    None,
    /// Provider's choice.
    #[default]
    Unspec,
    /// A file descriptor the application may poll.
    Fd,
}

/// Attributes of a completion queue (`struct fi_cq_attr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CqAttr {
    /// Entries the queue holds (0: provider default).
    pub size: usize,
    /// Entry format.
    pub format: CqFormat,
    /// Wait object.
    pub wait_obj: WaitObj,
}

/// Attributes of an event queue (`struct fi_eq_attr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EqAttr {
    /// Entries the queue holds (0: provider default).
    pub size: usize,
    /// Wait object.
    pub wait_obj: WaitObj,
}

/// Attributes of an address vector (`struct fi_av_attr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AvAttr {
    /// Table or map.
    pub av_type: crate::info::AvType,
    /// Expected number of addresses (0: provider default).
    pub count: usize,
}

/// One completion (`struct fi_cq_tagged_entry` plus the source address).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CqEntry {
    /// The context given when the operation was posted.
    pub op_context: u64,
    /// Completion flags: `SEND`/`RECV`, `MSG`/`TAGGED`, `REMOTE_CQ_DATA`, `MULTI_RECV`.
    pub flags: Caps,
    /// Bytes transferred (received length for receives).
    pub len: usize,
    /// Address where received data starts (multi-receive buffers); 0 otherwise.
    pub buf: usize,
    /// Remote CQ data, when `flags` has `REMOTE_CQ_DATA`.
    pub data: u64,
    /// Tag of a tagged receive.
    pub tag: u64,
    /// Source of a receive (`FI_ADDR_NOTAVAIL` when not in the AV or not known).
    pub src: FiAddr,
}

impl CqEntry {
    /// An entry with only a context and flags.
    pub fn new(op_context: u64, flags: Caps) -> CqEntry {
        CqEntry { op_context, flags, len: 0, buf: 0, data: 0, tag: 0, src: FiAddr::NOTAVAIL }
    }
}

/// An error completion (`struct fi_cq_err_entry`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CqErrEntry {
    /// The completion fields, as far as they are known.
    pub entry: CqEntry,
    /// Bytes that did not fit (`FI_ETRUNC`): the message length minus `len`.
    pub olen: usize,
    /// The error.
    pub err: Error,
    /// The provider's own error number (for verbs, the `IBV_WC_*` status).
    pub prov_errno: i32,
}

/// A control event (`fi_eq_read`).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum EqEvent {
    /// A peer asks to connect to a passive endpoint (`FI_CONNREQ`); `info.handle`
    /// identifies the request for `accept` or `reject`.
    ConnReq {
        /// The passive endpoint's id.
        fid: u64,
        /// The peer's info, with `dest_addr` the peer and `handle` set.
        info: Box<Info>,
        /// The peer's connection data.
        data: Vec<u8>,
    },
    /// A connection is established (`FI_CONNECTED`).
    Connected {
        /// The endpoint's id.
        fid: u64,
        /// The peer's accept data (on the active side).
        data: Vec<u8>,
    },
    /// The peer closed or shut down the connection (`FI_SHUTDOWN`).
    Shutdown {
        /// The endpoint's id.
        fid: u64,
    },
    /// An event the application wrote itself (`fi_eq_write`): its event number
    /// (`FI_NOTIFY`, or any other) and its bytes, read back as they were written.
    User {
        /// The event number.
        event: u32,
        /// The event's bytes.
        data: Vec<u8>,
    },
}

impl EqEvent {
    /// libfabric's name of the event (`FI_CONNREQ`, ...).
    pub fn name(&self) -> &'static str {
        match self {
            EqEvent::ConnReq { .. } => "FI_CONNREQ",
            EqEvent::Connected { .. } => "FI_CONNECTED",
            EqEvent::Shutdown { .. } => "FI_SHUTDOWN",
            EqEvent::User { event, .. } => match event {
                0 => "FI_NOTIFY",
                1 => "FI_CONNREQ",
                2 => "FI_CONNECTED",
                3 => "FI_SHUTDOWN",
                4 => "FI_MR_COMPLETE",
                5 => "FI_AV_COMPLETE",
                6 => "FI_JOIN_COMPLETE",
                _ => "user event",
            },
        }
    }

    /// The id of the object the event is about (0 for an application's event).
    pub fn fid(&self) -> u64 {
        match self {
            EqEvent::ConnReq { fid, .. } | EqEvent::Connected { fid, .. } | EqEvent::Shutdown { fid } => *fid,
            EqEvent::User { .. } => 0,
        }
    }
}

/// An error event (`struct fi_eq_err_entry`): a connection that was refused,
/// rejected, or broke.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EqErrEntry {
    /// The endpoint's id.
    pub fid: u64,
    /// The error (`FI_ECONNREFUSED` for a rejected connection).
    pub err: Error,
    /// The provider's own error number.
    pub prov_errno: i32,
    /// Data the peer sent with a reject.
    pub data: Vec<u8>,
}
