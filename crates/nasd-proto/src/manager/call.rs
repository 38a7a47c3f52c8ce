//! What a manager call is. A request is a type of [`super::calls`] that knows its tag, its
//! name and the type of its reply ([`Call`]); every value in a body encodes itself
//! ([`Wire`]); a reply travels as one payload of [`MgrReply`] and comes back typed
//! ([`Reply`]). The generators here turn the tables in [`super`] into the message enums, their
//! names and their tag dispatch, so each tag is written once.

use super::MgrReply;
use crate::codec::{Reader, Writer};
use crate::DecodeError;
use std::fmt;

/// A value's encoding in a manager message body: its fields in order, little-endian. `get` is
/// total: malformed bytes are a [`DecodeError`], never a panic, and every length is checked
/// against the bytes present before anything is allocated.
pub trait Wire: Sized {
    fn put(&self, w: &mut Writer);
    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError>;
}

/// One manager call: a request with its tag and name on the wire (from the table in
/// [`for_each_manager_call!`](crate::for_each_manager_call)) and the reply that answers it.
pub trait Call:
    Wire + Clone + fmt::Debug + PartialEq + Into<super::MgrRequest> + Send + Sync + 'static
{
    const TAG: u8;
    const NAME: &'static str;
    type Reply: Reply;
}

/// A call's reply, as one payload of [`MgrReply`] (or, for [`super::Created`], one of two).
pub trait Reply: Sized + fmt::Debug + Send + 'static {
    fn into_reply(self) -> MgrReply;
    /// The payload, or the name of the reply that came instead ([`MgrReply::name`]).
    fn from_reply(r: MgrReply) -> Result<Self, &'static str>;
}

/// From the rows of the call table: [`Call`] for every request type, `From` it into
/// `MgrRequest`, and `MgrRequest` with its name, tag, encoder and decoder.
macro_rules! define_calls {
    ($($tag:literal $C:ident $name:literal => $R:ty;)*) => {
        $(
            impl Call for calls::$C {
                const TAG: u8 = $tag;
                const NAME: &'static str = $name;
                type Reply = $R;
            }

            impl From<calls::$C> for MgrRequest {
                fn from(c: calls::$C) -> MgrRequest {
                    MgrRequest::$C(c)
                }
            }
        )*

        /// A request to the manager: one of the [`calls`], named as its type.
        #[derive(Clone, PartialEq, Eq, Debug)]
        pub enum MgrRequest {
            $(
                #[doc = concat!("[`calls::", stringify!($C), "`]")]
                $C(calls::$C),
            )*
        }

        impl MgrRequest {
            pub fn name(&self) -> &'static str {
                match self {
                    $(Self::$C(_) => $name,)*
                }
            }

            pub fn tag(&self) -> u8 {
                match self {
                    $(Self::$C(_) => $tag,)*
                }
            }

            pub fn encode(&self, request_id: u64) -> Vec<u8> {
                let mut w = Writer::with_capacity(64);
                put_header(&mut w, KIND_REQUEST, request_id, self.tag());
                match self {
                    $(Self::$C(c) => c.put(&mut w),)*
                }
                w.into_vec()
            }

            /// Decodes a request body; returns its request id and the request.
            pub fn decode(body: &[u8]) -> Result<(u64, MgrRequest), DecodeError> {
                let mut r = Reader::new(body);
                let (id, tag) = get_header(&mut r, KIND_REQUEST)?;
                let req = match tag {
                    $($tag => Self::$C(Wire::get(&mut r)?),)*
                    _ => return Err(DecodeError::BadValue("request tag")),
                };
                r.finish("manager request")?;
                Ok((id, req))
            }
        }
    };
}

/// From the rows of the reply table: `MgrReply`, [`Reply`] for every payload type, and the
/// reply's name, encoder and decoder.
macro_rules! define_replies {
    ($($tag:literal $V:ident($T:ty);)*) => {
        /// A reply from the manager.
        #[derive(Clone, PartialEq, Eq, Debug)]
        pub enum MgrReply {
            $($V($T),)*
        }

        $(
            impl Reply for $T {
                fn into_reply(self) -> MgrReply {
                    MgrReply::$V(self)
                }
                fn from_reply(r: MgrReply) -> Result<Self, &'static str> {
                    match r {
                        MgrReply::$V(x) => Ok(x),
                        r => Err(r.name()),
                    }
                }
            }
        )*

        impl MgrReply {
            /// The reply's kind, as its variant is named.
            pub fn name(&self) -> &'static str {
                match self {
                    $(Self::$V(_) => stringify!($V),)*
                }
            }

            pub fn encode(&self, request_id: u64) -> Vec<u8> {
                let mut w = Writer::with_capacity(128);
                let tag = match self {
                    $(Self::$V(_) => $tag,)*
                };
                put_header(&mut w, KIND_REPLY, request_id, tag);
                match self {
                    $(Self::$V(x) => x.put(&mut w),)*
                }
                w.into_vec()
            }

            pub fn decode(body: &[u8]) -> Result<(u64, MgrReply), DecodeError> {
                let mut r = Reader::new(body);
                let (id, tag) = get_header(&mut r, KIND_REPLY)?;
                let reply = match tag {
                    $($tag => Self::$V(Wire::get(&mut r)?),)*
                    _ => return Err(DecodeError::BadValue("reply tag")),
                };
                r.finish("manager reply")?;
                Ok((id, reply))
            }
        }
    };
}

pub(super) use {define_calls, define_replies};
