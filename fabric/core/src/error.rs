//! The one error type of fabric, numbered as libfabric numbers its errors.

use std::borrow::Cow;

macro_rules! errors {
    ($( $(#[$doc:meta])* $variant:ident = $num:expr, $name:literal, $text:literal; )*) => {
        /// A fabric error. [`Error::errno`] gives the libfabric number
        /// (`FI_E*`, positive), and `Display` gives `fi_strerror`'s text.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
        #[non_exhaustive]
        pub enum Error {
            $( $(#[$doc])* #[error($text)] $variant, )*
            /// A blocking wait of the safe API (a queue's `sread`, a counter's or
            /// a wait set's `wait`) ended at its time-out with nothing to return.
            /// Its number is `FI_ETIMEDOUT`; libfabric's C calls say `FI_EAGAIN`
            /// for a queue's `sread` and `FI_ETIMEDOUT` for the others, which the
            /// C ABI keeps.
            #[error("Timed out waiting")]
            WaitTimedOut,
            /// An error number that has no variant of its own.
            #[error("{}", other_text(*.0))]
            Other(i32),
        }

        impl Error {
            /// The libfabric error number (positive, as `fi_strerror` takes it).
            pub fn errno(&self) -> i32 {
                match self {
                    $( Error::$variant => $num, )*
                    Error::WaitTimedOut => Error::TimedOut.errno(),
                    Error::Other(n) => *n,
                }
            }

            /// The error for a libfabric (or system) error number; the sign is ignored.
            pub fn from_errno(n: i32) -> Error {
                match n.abs() {
                    $( $num => Error::$variant, )*
                    other => Error::Other(other),
                }
            }

            /// The libfabric constant's name, such as `FI_ETRUNC`.
            pub fn name(&self) -> &'static str {
                match self {
                    $( Error::$variant => $name, )*
                    Error::WaitTimedOut => Error::TimedOut.name(),
                    Error::Other(_) => "FI_EOTHER",
                }
            }
        }
    };
}

errors! {
    /// Operation not permitted.
    Perm = 1, "FI_EPERM", "Operation not permitted";
    /// No such file or directory (no such object).
    NoEnt = 2, "FI_ENOENT", "No such file or directory";
    /// Interrupted system call.
    Intr = 4, "FI_EINTR", "Interrupted system call";
    /// Input/output error.
    Io = 5, "FI_EIO", "Input/output error";
    /// Argument list too long.
    TooBig = 7, "FI_E2BIG", "Argument list too long";
    /// Bad file descriptor.
    BadF = 9, "FI_EBADF", "Bad file descriptor";
    /// Broken pipe: the peer closed the connection.
    Pipe = 32, "FI_EPIPE", "Broken pipe";
    /// Back-pressure: try again after progressing completions.
    Again = 11, "FI_EAGAIN", "Resource temporarily unavailable";
    /// Cannot allocate memory.
    NoMem = 12, "FI_ENOMEM", "Cannot allocate memory";
    /// Permission denied (a remote access outside what was granted).
    Access = 13, "FI_EACCES", "Permission denied";
    /// Bad address.
    Fault = 14, "FI_EFAULT", "Bad address";
    /// Device or resource busy.
    Busy = 16, "FI_EBUSY", "Device or resource busy";
    /// No such device.
    NoDev = 19, "FI_ENODEV", "No such device";
    /// Invalid argument.
    Inval = 22, "FI_EINVAL", "Invalid argument";
    /// Too many open files.
    MFile = 24, "FI_EMFILE", "Too many open files";
    /// No space left on device.
    NoSpc = 28, "FI_ENOSPC", "No space left on device";
    /// Function not implemented.
    NoSys = 38, "FI_ENOSYS", "Function not implemented";
    /// No message of desired type (a peek that found nothing).
    NoMsg = 42, "FI_ENOMSG", "No message of desired type";
    /// No data available (no provider matches the hints).
    NoData = 61, "FI_ENODATA", "No data available";
    /// Value too large for defined data type.
    Overflow = 75, "FI_EOVERFLOW", "Value too large for defined data type";
    /// Message too long.
    MsgSize = 90, "FI_EMSGSIZE", "Message too long";
    /// Protocol not available.
    NoProtoOpt = 92, "FI_ENOPROTOOPT", "Protocol not available";
    /// Operation not supported.
    OpNotSupp = 95, "FI_EOPNOTSUPP", "Operation not supported";
    /// Address already in use.
    AddrInUse = 98, "FI_EADDRINUSE", "Address already in use";
    /// Cannot assign requested address.
    AddrNotAvail = 99, "FI_EADDRNOTAVAIL", "Cannot assign requested address";
    /// Network is down.
    NetDown = 100, "FI_ENETDOWN", "Network is down";
    /// Network is unreachable.
    NetUnreach = 101, "FI_ENETUNREACH", "Network is unreachable";
    /// Software caused connection abort.
    ConnAborted = 103, "FI_ECONNABORTED", "Software caused connection abort";
    /// Connection reset by peer.
    ConnReset = 104, "FI_ECONNRESET", "Connection reset by peer";
    /// No buffer space available.
    NoBufs = 105, "FI_ENOBUFS", "No buffer space available";
    /// Transport endpoint is already connected.
    IsConn = 106, "FI_EISCONN", "Transport endpoint is already connected";
    /// Transport endpoint is not connected.
    NotConn = 107, "FI_ENOTCONN", "Transport endpoint is not connected";
    /// Cannot send after transport endpoint shutdown.
    Shutdown = 108, "FI_ESHUTDOWN", "Cannot send after transport endpoint shutdown";
    /// Connection timed out.
    TimedOut = 110, "FI_ETIMEDOUT", "Connection timed out";
    /// Connection refused.
    ConnRefused = 111, "FI_ECONNREFUSED", "Connection refused";
    /// Host is down.
    HostDown = 112, "FI_EHOSTDOWN", "Host is down";
    /// No route to host.
    HostUnreach = 113, "FI_EHOSTUNREACH", "No route to host";
    /// Operation already in progress.
    Already = 114, "FI_EALREADY", "Operation already in progress";
    /// Operation now in progress.
    InProgress = 115, "FI_EINPROGRESS", "Operation now in progress";
    /// Remote I/O error.
    RemoteIo = 121, "FI_EREMOTEIO", "Remote I/O error";
    /// Operation canceled.
    Canceled = 125, "FI_ECANCELED", "Operation canceled";
    /// Key was rejected by service.
    KeyRejected = 129, "FI_EKEYREJECTED", "Key was rejected by service";
    /// Unspecified error.
    Unspecified = 256, "FI_EOTHER", "Unspecified error";
    /// Provided buffer is too small.
    TooSmall = 257, "FI_ETOOSMALL", "Provided buffer is too small";
    /// Operation not permitted in current state.
    OpBadState = 258, "FI_EOPBADSTATE", "Operation not permitted in current state";
    /// Error available: read the error entry.
    Avail = 259, "FI_EAVAIL", "Error available";
    /// Flags not supported.
    BadFlags = 260, "FI_EBADFLAGS", "Flags not supported";
    /// Missing or unavailable event queue.
    NoEq = 261, "FI_ENOEQ", "Missing or unavailable event queue";
    /// Invalid resource domain.
    Domain = 262, "FI_EDOMAIN", "Invalid resource domain";
    /// Missing or unavailable completion queue.
    NoCq = 263, "FI_ENOCQ", "Missing or unavailable completion queue";
    /// CRC error.
    Crc = 264, "FI_ECRC", "CRC error";
    /// Truncation error: the receive buffer was too small.
    Trunc = 265, "FI_ETRUNC", "Truncation error";
    /// Required key not available.
    NoKey = 266, "FI_ENOKEY", "Required key not available";
    /// Missing or unavailable address vector.
    NoAv = 267, "FI_ENOAV", "Missing or unavailable address vector";
    /// Queue has been overrun.
    Overrun = 268, "FI_EOVERRUN", "Queue has been overrun";
    /// Receiver not ready, no receive buffers available.
    NoRx = 269, "FI_ENORX", "Receiver not ready, no receive buffers available";
}

/// The text of an error number without a variant of its own, as `fi_strerror`
/// gives it: the system's text below 256, "Unspecified error" from there on.
fn other_text(n: i32) -> Cow<'static, str> {
    if n >= 256 {
        Cow::Borrowed("Unspecified error")
    } else {
        let mut s = std::io::Error::from_raw_os_error(n).to_string();
        if let Some(end) = s.find(" (os error") {
            s.truncate(end);
        }
        Cow::Owned(s)
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Error {
        if let Some(n) = e.raw_os_error() {
            return Error::from_errno(n);
        }
        use std::io::ErrorKind as K;
        match e.kind() {
            K::WouldBlock => Error::Again,
            K::NotFound => Error::NoEnt,
            K::PermissionDenied => Error::Access,
            K::ConnectionRefused => Error::ConnRefused,
            K::ConnectionReset => Error::ConnReset,
            K::ConnectionAborted => Error::ConnAborted,
            K::NotConnected => Error::NotConn,
            K::AddrInUse => Error::AddrInUse,
            K::AddrNotAvailable => Error::AddrNotAvail,
            K::BrokenPipe => Error::Shutdown,
            K::InvalidInput | K::InvalidData => Error::Inval,
            K::TimedOut => Error::TimedOut,
            K::Interrupted => Error::Intr,
            K::Unsupported => Error::OpNotSupp,
            K::OutOfMemory => Error::NoMem,
            K::UnexpectedEof => Error::ConnReset,
            _ => Error::Io,
        }
    }
}

/// `fi_strerror`: the text for a libfabric error number (sign ignored).
pub fn strerror(errno: i32) -> String {
    Error::from_errno(errno).to_string()
}

/// The result type of every fabric call.
pub type Result<T> = std::result::Result<T, Error>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_texts_match_libfabric() {
        assert_eq!(Error::Again.errno(), 11);
        assert_eq!(Error::Trunc.errno(), 265);
        assert_eq!(Error::Trunc.to_string(), "Truncation error");
        assert_eq!(Error::from_errno(-125), Error::Canceled);
        assert_eq!(Error::from_errno(269).to_string(), "Receiver not ready, no receive buffers available");
        assert_eq!(strerror(270), "Unspecified error");
        // Numbers without a variant: the system's text below 256, as fi_strerror.
        assert_eq!(Error::from_errno(3), Error::Other(3));
        assert_eq!(strerror(3), "No such process");
        assert_eq!(Error::from_errno(2).name(), "FI_ENOENT");
    }

    #[test]
    fn a_wait_time_out_says_so() {
        let text = Error::WaitTimedOut.to_string();
        assert!(text.contains("Timed out"), "{text}");
        assert_ne!(text, Error::Again.to_string());
        assert_eq!((Error::WaitTimedOut.errno(), Error::WaitTimedOut.name()), (110, "FI_ETIMEDOUT"));
    }

    #[test]
    fn io_errors_map_to_numbers() {
        let e: Error = std::io::Error::from_raw_os_error(libc::ECONNREFUSED).into();
        assert_eq!(e, Error::ConnRefused);
        let e: Error = std::io::Error::from(std::io::ErrorKind::WouldBlock).into();
        assert_eq!(e, Error::Again);
    }
}
