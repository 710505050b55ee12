//! The vocabulary of RMA and atomics: remote memory pieces, atomic operations
//! (`enum fi_op`) and datatypes (`enum fi_datatype`), with libfabric's values.

use std::fmt;

/// A piece of a peer's registered memory (`struct fi_rma_iov`): the address (a
/// virtual address or an offset into the region, as the domain's `mr_mode` says),
/// the length, and the region's key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RmaIov {
    /// Remote address (or offset).
    pub addr: u64,
    /// Bytes.
    pub len: usize,
    /// The remote region's key.
    pub key: u64,
}

macro_rules! numbered_enum {
    ($(#[$m:meta])* $name:ident { $( $(#[$vd:meta])* $v:ident = $n:expr, $s:literal ),* $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(u8)]
        pub enum $name {
            $( $(#[$vd])* $v = $n, )*
        }
        impl $name {
            /// Every value, in libfabric's order.
            pub const ALL: &'static [$name] = &[ $( $name::$v, )* ];
            /// libfabric's name.
            pub fn name(self) -> &'static str {
                match self { $( $name::$v => $s, )* }
            }
            /// The value with libfabric's number, if there is one.
            pub fn from_u8(n: u8) -> Option<$name> {
                match n { $( $n => Some($name::$v), )* _ => None }
            }
            /// Parse libfabric's name, with or without `FI_`, any case.
            pub fn parse(s: &str) -> Option<$name> {
                let u = s.trim().to_ascii_uppercase();
                let u = if u.starts_with("FI_") { u } else { format!("FI_{u}") };
                $( if u == $s { return Some($name::$v); } )*
                None
            }
        }
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result { f.write_str(self.name()) }
        }
    };
}

numbered_enum!(
    /// An atomic operation (`enum fi_op`).
    AtomicOp {
        /// target = min(target, operand).
        Min = 0, "FI_MIN",
        /// target = max(target, operand).
        Max = 1, "FI_MAX",
        /// target += operand.
        Sum = 2, "FI_SUM",
        /// target *= operand.
        Prod = 3, "FI_PROD",
        /// target = target || operand (logical).
        Lor = 4, "FI_LOR",
        /// target = target && operand (logical).
        Land = 5, "FI_LAND",
        /// target |= operand.
        Bor = 6, "FI_BOR",
        /// target &= operand.
        Band = 7, "FI_BAND",
        /// target = target != operand, as booleans (logical xor).
        Lxor = 8, "FI_LXOR",
        /// target ^= operand.
        Bxor = 9, "FI_BXOR",
        /// Read the target (fetching only).
        Read = 10, "FI_ATOMIC_READ",
        /// target = operand.
        Write = 11, "FI_ATOMIC_WRITE",
        /// if compare == target: target = operand.
        Cswap = 12, "FI_CSWAP",
        /// if compare != target: target = operand.
        CswapNe = 13, "FI_CSWAP_NE",
        /// if compare <= target: target = operand.
        CswapLe = 14, "FI_CSWAP_LE",
        /// if compare < target: target = operand.
        CswapLt = 15, "FI_CSWAP_LT",
        /// if compare >= target: target = operand.
        CswapGe = 16, "FI_CSWAP_GE",
        /// if compare > target: target = operand.
        CswapGt = 17, "FI_CSWAP_GT",
        /// target = (operand & compare) | (target & !compare) (masked swap).
        Mswap = 18, "FI_MSWAP",
    }
);

numbered_enum!(
    /// An atomic datatype (`enum fi_datatype`).
    Datatype {
        /// i8.
        Int8 = 0, "FI_INT8",
        /// u8.
        Uint8 = 1, "FI_UINT8",
        /// i16.
        Int16 = 2, "FI_INT16",
        /// u16.
        Uint16 = 3, "FI_UINT16",
        /// i32.
        Int32 = 4, "FI_INT32",
        /// u32.
        Uint32 = 5, "FI_UINT32",
        /// i64.
        Int64 = 6, "FI_INT64",
        /// u64.
        Uint64 = 7, "FI_UINT64",
        /// f32.
        Float = 8, "FI_FLOAT",
        /// f64.
        Double = 9, "FI_DOUBLE",
    }
);

impl Datatype {
    /// Bytes of one element.
    pub fn size(self) -> usize {
        match self {
            Datatype::Int8 | Datatype::Uint8 => 1,
            Datatype::Int16 | Datatype::Uint16 => 2,
            Datatype::Int32 | Datatype::Uint32 | Datatype::Float => 4,
            Datatype::Int64 | Datatype::Uint64 | Datatype::Double => 8,
        }
    }

    /// Whether it is a floating-point type.
    pub fn is_float(self) -> bool {
        matches!(self, Datatype::Float | Datatype::Double)
    }
}

/// The three kinds of atomic call, which accept different operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AtomicKind {
    /// `fi_atomic`: no result comes back.
    Plain,
    /// `fi_fetch_atomic`: the target's prior value comes back.
    Fetch,
    /// `fi_compare_atomic`: a compare operand goes, the prior value comes back.
    Compare,
}

impl AtomicOp {
    /// Whether this operation belongs to the kind of call (before datatype rules).
    pub fn kind_allows(self, kind: AtomicKind) -> bool {
        use AtomicOp::*;
        match kind {
            AtomicKind::Plain => {
                !matches!(self, Read | Cswap | CswapNe | CswapLe | CswapLt | CswapGe | CswapGt | Mswap)
            }
            AtomicKind::Fetch => !matches!(self, Cswap | CswapNe | CswapLe | CswapLt | CswapGe | CswapGt | Mswap),
            AtomicKind::Compare => matches!(self, Cswap | CswapNe | CswapLe | CswapLt | CswapGe | CswapGt | Mswap),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_names_are_libfabrics() {
        assert_eq!(AtomicOp::Mswap as u8, 18);
        assert_eq!(AtomicOp::from_u8(10), Some(AtomicOp::Read));
        assert_eq!(AtomicOp::from_u8(19), None);
        assert_eq!(Datatype::Double as u8, 9);
        assert_eq!(Datatype::parse("uint64"), Some(Datatype::Uint64));
        assert_eq!(AtomicOp::parse("FI_CSWAP_GE"), Some(AtomicOp::CswapGe));
        assert_eq!(Datatype::Float.size(), 4);
        assert!(AtomicOp::Sum.kind_allows(AtomicKind::Fetch));
        assert!(!AtomicOp::Read.kind_allows(AtomicKind::Plain));
        assert!(AtomicOp::Mswap.kind_allows(AtomicKind::Compare));
        assert!(!AtomicOp::Cswap.kind_allows(AtomicKind::Fetch));
    }
}
