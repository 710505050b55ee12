//! The core of fabric: the object model's types and the provider contract.
//!
//! Providers depend on this crate; applications depend on `fabric`, which
//! re-exports it and adds the safe API and the provider registry.

pub mod addr;
pub mod atomic;
pub mod entry;
pub mod error;
pub mod flags;
pub mod info;
pub mod log;
pub mod param;
pub mod prov;
pub mod sync;
pub mod tostr;
pub mod wait;

pub use addr::{AddrFormat, Address, FiAddr};
pub use atomic::{AtomicKind, AtomicOp, Datatype, RmaIov};
pub use entry::{AvAttr, CqAttr, CqEntry, CqErrEntry, CqFormat, EqAttr, EqErrEntry, EqEvent, WaitObj};
pub use error::{strerror, Error, Result};
pub use flags::{BindFlags, Caps, Mode, MrAccess, MrMode, MsgOrder, OpFlags};
pub use info::{
    AvType, ConnHandle, DomainAttr, EpAttr, EpType, FabricAttr, Hints, Info, Progress, Protocol, ResourceMgmt, RxAttr,
    Threading, TxAttr,
};
pub use param::{Param, ParamType};
