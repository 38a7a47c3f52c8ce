//! Reply status codes. Stable on the wire: a code is never reused for another meaning.

use std::fmt;

macro_rules! statuses {
    ($($name:ident = $code:literal : $text:literal,)*) => {
        /// The outcome of a request; every refusal of seed 002 §2.4 has its own code.
        #[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
        #[repr(u16)]
        pub enum Status { $($name = $code,)* }
        impl Status {
            pub fn from_u16(v: u16) -> Option<Status> {
                match v { $($code => Some(Status::$name),)* _ => None }
            }
            pub fn text(self) -> &'static str {
                match self { $(Status::$name => $text,)* }
            }
            pub const ALL: &'static [Status] = &[$(Status::$name,)*];
        }
    };
}

statuses! {
    Ok = 0: "ok",
    Malformed = 1: "malformed request",
    UnknownOp = 2: "unknown operation",
    ProtectionTooWeak = 10: "request protection below the capability's minimum",
    CapabilityBelowMinimum = 11: "capability minimum protection below the drive's or partition's minimum",
    NonceOutsideWindow = 12: "nonce outside the clock window",
    NonceReplayed = 13: "nonce already seen (replay)",
    CapabilityExpired = 14: "capability expired",
    WrongDrive = 15: "capability is for another drive",
    RightsDenied = 16: "capability rights do not allow this operation",
    RegionOutsideCapability = 17: "region outside capability",
    BadDigest = 18: "digest does not verify (forged, revoked or wrong key)",
    KeyNotSet = 19: "key not set on this drive",
    BadSeal = 20: "sealed capability or wrapped key does not open",
    NonceCacheFull = 21: "replay cache full; retry",
    WrongKeyType = 22: "operation not allowed with this key type",
    ObjectMismatch = 23: "request target differs from the capability's",
    BadSignature = 24: "the write was not signed by the capability's writer key (signature missing, malformed or wrong)",
    NoSuchPartition = 30: "no such partition",
    NoSuchObject = 31: "no such object",
    PartitionExists = 32: "partition exists",
    QuotaExceeded = 33: "partition quota exceeded",
    DiskFull = 34: "drive full",
    InvalidArgument = 35: "invalid argument",
    TooLarge = 36: "request too large",
    PartitionNotEmpty = 37: "partition not empty",
    ReadOnlyObject = 38: "object is read-only",
    IoError = 50: "drive I/O error",
    Corrupt = 51: "stored data failed its at-rest check",
    ShuttingDown = 52: "drive shutting down",
    Busy = 53: "drive busy; retry",
    NotInitialized = 54: "drive not initialized",
}

impl Status {
    /// Refusals of the security checks of seed 002 §2.4.
    pub fn is_security_refusal(self) -> bool {
        (10..30).contains(&(self as u16))
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.text())
    }
}
