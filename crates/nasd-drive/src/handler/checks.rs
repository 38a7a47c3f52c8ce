//! The checks of seed 002 §2.4, one function each, numbered as the module comment of
//! [`super`] lists them. [`Drive::authenticate`] runs them in that order: the checks a
//! capability's arguments allow (1-6) or the key of the hierarchy's (its protection, its type),
//! the digest under each candidate key (8), then, on the authentic request, the regions (7),
//! the writer's signature (9) and the nonce (10), whose refusals are answered under the
//! request's key.

use super::{refuse, Authed, Drive, Principal, Refusal};
use crate::records::{DriveRecord, PartitionRecord};
use nasd_crypto::integrity::pieces;
use nasd_crypto::nonce::{NonceError, NONCE_WINDOW_MS};
use nasd_crypto::request::{privacy_key, request_mac, Field};
use nasd_crypto::{aead, capability, ct_eq, wsig, Cost, Key};
use nasd_proto::{
    CapField, CapabilityArgs, DriveId, KeyType, ObjectId, Op, OpCode, Protection, Region,
    RequestHeader, Rights, Status,
};

/// What every check of one request looks at: the drive's record and the request's
/// partition's (only those, no copy of every partition), and the minimum protection of both.
pub(super) struct Context {
    drive: DriveRecord,
    part: Option<PartitionRecord>,
    min: Protection,
}

impl Context {
    fn partition(&self, h: &RequestHeader) -> Result<&PartitionRecord, Refusal> {
        self.part.as_ref().ok_or_else(|| {
            Refusal(
                Status::NoSuchPartition,
                format!("no such partition {}", h.partition),
            )
        })
    }

    fn suite(&self) -> nasd_proto::Suite {
        self.drive.suite
    }
}

/// A request's plaintext arguments and data, and the piece hashes of a write's data.
type Verified = (Op, Option<Vec<u8>>, Vec<Vec<pieces::PieceHash>>);

impl Drive {
    /// Every check of seed 002 §2.4; see the module comment of [`super`] for the order.
    pub(super) fn authenticate(
        &self,
        h: &RequestHeader,
        body: &[u8],
        data: &[u8],
        now: u64,
        cost: &mut Cost,
    ) -> Result<Authed, Refusal> {
        let ctx = self.context(h);
        let (keys, cap) = match h.key_type {
            KeyType::Capability => {
                let (keys, args) = self.capability_keys(h, &ctx, now)?;
                (keys, Some(args))
            }
            kt => (self.hierarchy_keys(h, kt, &ctx, now)?, None),
        };
        self.authentic(h, body, data, (keys, cap), &ctx, now, cost)
    }

    fn context(&self, h: &RequestHeader) -> Context {
        let (drive, part) = self
            .store
            .with_state(|c| (c.drive.clone(), c.partitions.get(&h.partition.0).cloned()));
        let mut min = drive.min_protection;
        if let Some(p) = &part {
            min = min.union(p.min_protection);
        }
        Context { drive, part, min }
    }

    /// Checks 1-6 of a capability-authorized request, then its candidate keys: the
    /// capability key under the current, then the previous, working key (from the
    /// capability-key cache when the drive keeps one; the same keys either way).
    fn capability_keys(
        &self,
        h: &RequestHeader,
        ctx: &Context,
        now: u64,
    ) -> Result<(Vec<Key>, CapabilityArgs), Refusal> {
        let args = capability_args(h, ctx)?;
        protection_meets_capability(h, &args)?;
        capability_meets_minimum(&args, ctx.min)?;
        self.nonce_in_window(h, now)?;
        not_expired(&args, now)?;
        names_this_object(&args, ctx.drive.drive, h)?;
        rights_cover(&args, h)?;
        let p = ctx.partition(h)?;
        let acv = if h.op == OpCode::Create {
            0
        } else {
            self.store
                .object(h.partition, h.object)?
                .attrs
                .access_control_version
        };
        let keys: Vec<Key> = [&p.working_current, &p.working_previous]
            .into_iter()
            .flatten()
            .map(|wk| self.capability_key(ctx.suite(), wk, &args, acv))
            .collect();
        if keys.is_empty() {
            return refuse(Status::KeyNotSet, "partition has no working key");
        }
        Ok((keys, args))
    }

    /// `capability::capability_key`, memoized by the drive's cache when it keeps one.
    fn capability_key(
        &self,
        suite: nasd_proto::Suite,
        working_key: &Key,
        args: &CapabilityArgs,
        acv: u64,
    ) -> Key {
        match &self.cap_keys {
            Some(c) => c.capability_key(suite, working_key, args, acv),
            None => capability::capability_key(suite, working_key, args, acv),
        }
    }

    /// The checks of a request authorized by key `kt` of the hierarchy (its protection, the
    /// nonce's window, what the key may do), then its candidate keys.
    fn hierarchy_keys(
        &self,
        h: &RequestHeader,
        kt: KeyType,
        ctx: &Context,
        now: u64,
    ) -> Result<Vec<Key>, Refusal> {
        key_protection(h, kt, ctx.min)?;
        self.nonce_in_window(h, now)?;
        key_allows(h, kt)?;
        let mut keys = vec![];
        match kt {
            KeyType::Master => keys.push(ctx.drive.master_key.clone()),
            KeyType::Drive => keys.extend(ctx.drive.drive_key.clone()),
            KeyType::Partition => keys.extend(ctx.partition(h)?.partition_key.clone()),
            KeyType::Working => {
                let p = ctx.partition(h)?;
                keys.extend(p.working_current.clone());
                keys.extend(p.working_previous.clone());
            }
            KeyType::Capability => unreachable!("a capability is no key of the hierarchy"),
        }
        if keys.is_empty() {
            return refuse(
                Status::KeyNotSet,
                format!("the {} key is not set", kt.name()),
            );
        }
        Ok(keys)
    }

    /// 8, then 7, 9 and 10: arguments (decrypted under privacy), data and the digest, tried
    /// under each key; on the first that verifies, the checks of an authentic request, whose
    /// refusal is kept to be answered under its key, with its protection (seed 002 §2.4).
    #[allow(clippy::too_many_arguments)] // the request, its parts, and what the checks found
    fn authentic(
        &self,
        h: &RequestHeader,
        body: &[u8],
        data: &[u8],
        (keys, cap): (Vec<Key>, Option<CapabilityArgs>),
        ctx: &Context,
        now: u64,
        cost: &mut Cost,
    ) -> Result<Authed, Refusal> {
        let mut last = Refusal(Status::BadDigest, "digest does not verify".into());
        // A signed write's signature covers its piece hashes: compute them even without
        // INTEGRITY_DATA (the writer then keeps them as metadata, as it would the client's).
        let signed = cap.is_some_and(|c| c.writer_key.is_some());
        for key in keys {
            let (op, plain, write_pieces) =
                match self.verify_with(h, body, data, &key, ctx, signed, cost) {
                    Ok(v) => v,
                    Err(r) => {
                        last = r;
                        continue;
                    }
                };
            let refused = regions_inside(cap.as_ref(), &op)
                .and_then(|()| {
                    let data = plain.as_deref().unwrap_or(data);
                    writer_signed(h, cap.as_ref(), ctx, &op, data, &write_pieces, cost)
                })
                .and_then(|()| self.nonce_new(h, cap.as_ref(), now))
                .err();
            let key = (h.protection.integrity_args() || h.protection.privacy_args()).then_some(key);
            return Ok(Authed {
                key,
                cap,
                op,
                plain,
                write_pieces,
                refused,
            });
        }
        Err(last)
    }

    /// 8: the arguments and data as the request means them (opened under privacy), the
    /// write's piece hashes, and the digest verified under `key` in constant time.
    #[allow(clippy::too_many_arguments)] // the request, its parts, the key and the context
    fn verify_with(
        &self,
        h: &RequestHeader,
        body: &[u8],
        data: &[u8],
        key: &Key,
        ctx: &Context,
        signed: bool,
        cost: &mut Cost,
    ) -> Result<Verified, Refusal> {
        let suite = ctx.suite();
        let pk = (h.protection.privacy_args() || h.protection.privacy_data())
            .then(|| privacy_key(suite, key, &h.nonce));
        let args = match &pk {
            Some(pk) if h.protection.privacy_args() => {
                aead::open(pk, Field::RequestArgs.nonce(), b"", &h.args).ok_or_else(bad_digest)?
            }
            _ => h.args.clone(),
        };
        let op = Op::decode_args(h.op, &args)
            .map_err(|e| Refusal(Status::Malformed, format!("malformed arguments: {e}")))?;
        regions_within_object_max(&op)?;
        let plain = match &pk {
            Some(pk) if h.protection.privacy_data() && !data.is_empty() => {
                Some(aead::open(pk, Field::RequestData.nonce(), b"", data).ok_or_else(bad_digest)?)
            }
            _ => None,
        };
        let data: &[u8] = plain.as_deref().unwrap_or(data);
        let hashed = h.protection.integrity_data() || signed;
        let write_pieces = write_pieces(&op, data, suite, hashed, cost)?;
        if h.protection.integrity_args() {
            let drive = ctx.drive.drive;
            digest_verifies(h, body, &op, data, &write_pieces, key, suite, drive, cost)?;
        }
        Ok((op, plain, write_pieces))
    }

    /// 3: the nonce is inside the clock window.
    fn nonce_in_window(&self, h: &RequestHeader, now: u64) -> Result<(), Refusal> {
        self.nonces
            .lock()
            .check_window(now, &h.nonce)
            .map_err(nonce_refusal)
    }

    /// 10: the nonce is new; recorded only now that the request is authentic, and only once
    /// the durable floor covers it, so no restart can forget it. Booked to what the request
    /// proved it holds.
    fn nonce_new(
        &self,
        h: &RequestHeader,
        cap: Option<&CapabilityArgs>,
        now: u64,
    ) -> Result<(), Refusal> {
        let principal = match cap {
            Some(c) => Principal::Capability(*c),
            None => Principal::Key(h.key_type as u8, h.partition.0),
        };
        if let Err(e) = self.floor.cover(h.nonce.time_us, now) {
            return refuse(
                Status::IoError,
                format!("the replay floor cannot be made durable: {e}"),
            );
        }
        self.nonces
            .lock()
            .accept(now, &principal, &h.nonce)
            .map_err(nonce_refusal)
    }
}

/// The capability a request carries: in the clear, or sealed under one of its partition's
/// working keys.
fn capability_args(h: &RequestHeader, ctx: &Context) -> Result<CapabilityArgs, Refusal> {
    match &h.cap {
        CapField::Plain(c) => Ok(*c),
        CapField::Sealed(s) => {
            let p = ctx.partition(h)?;
            let opened = [&p.working_current, &p.working_previous]
                .into_iter()
                .flatten()
                .find_map(|k| capability::unseal(ctx.suite(), k, s));
            opened.ok_or_else(|| {
                Refusal(
                    Status::BadSeal,
                    "sealed capability does not open under this partition's working keys".into(),
                )
            })
        }
        CapField::None => refuse(Status::Malformed, "capability missing"),
    }
}

/// 1: the request's protection meets the capability's minimum.
fn protection_meets_capability(h: &RequestHeader, args: &CapabilityArgs) -> Result<(), Refusal> {
    if h.protection.meets(args.min_protection) {
        return Ok(());
    }
    refuse(
        Status::ProtectionTooWeak,
        format!(
            "request protection {} below the capability's minimum {}",
            h.protection, args.min_protection
        ),
    )
}

/// 2: the capability's minimum meets the drive's and partition's minimum.
fn capability_meets_minimum(args: &CapabilityArgs, min: Protection) -> Result<(), Refusal> {
    if args.min_protection.meets(min) {
        return Ok(());
    }
    refuse(
        Status::CapabilityBelowMinimum,
        format!(
            "capability minimum {} below the drive/partition minimum {}",
            args.min_protection, min
        ),
    )
}

/// 2, for a request authorized by a key of the hierarchy: it proves it holds the key (without
/// a digest, "authorized by the drive key" would mean nothing), and its own protection meets
/// the drive's and partition's minimum.
fn key_protection(h: &RequestHeader, kt: KeyType, min: Protection) -> Result<(), Refusal> {
    if !h.protection.integrity_args() {
        return refuse(
            Status::ProtectionTooWeak,
            format!(
                "a request authorized by the {} key needs at least integrity-args",
                kt.name()
            ),
        );
    }
    if !h.protection.meets(min) {
        return refuse(
            Status::ProtectionTooWeak,
            format!(
                "request protection {} below the drive/partition minimum {}",
                h.protection, min
            ),
        );
    }
    Ok(())
}

/// 4: the capability has not expired.
fn not_expired(args: &CapabilityArgs, now: u64) -> Result<(), Refusal> {
    if now / 1000 < args.expiry_ms {
        return Ok(());
    }
    refuse(
        Status::CapabilityExpired,
        format!("capability expired at {}", fmt_time_ms(args.expiry_ms)),
    )
}

/// 5: the capability names this drive, and the request's partition and object (any object,
/// for a create).
fn names_this_object(
    args: &CapabilityArgs,
    drive: DriveId,
    h: &RequestHeader,
) -> Result<(), Refusal> {
    if args.drive != drive {
        return refuse(
            Status::WrongDrive,
            format!(
                "capability is for drive {:016x}, this is {:016x}",
                args.drive.0, drive.0
            ),
        );
    }
    let any = args.object == ObjectId::ANY && h.op == OpCode::Create;
    if args.partition != h.partition || (args.object != h.object && !any) {
        return refuse(Status::ObjectMismatch, format!("capability is for object {} in partition {}, request names object {} in partition {}", args.object, args.partition, h.object, h.partition));
    }
    Ok(())
}

/// 6: the capability's rights cover the operation.
fn rights_cover(args: &CapabilityArgs, h: &RequestHeader) -> Result<(), Refusal> {
    if h.op.is_object_op() && args.rights.contains(rights_for(h.op)) {
        return Ok(());
    }
    refuse(
        Status::RightsDenied,
        format!(
            "capability rights {} do not allow {}",
            args.rights,
            h.op.name()
        ),
    )
}

/// What key `kt` of the hierarchy may do.
fn key_allows(h: &RequestHeader, kt: KeyType) -> Result<(), Refusal> {
    let allowed = match h.op {
        OpCode::Initialize | OpCode::SetDriveKey => kt == KeyType::Master,
        OpCode::CreatePartition
        | OpCode::RemovePartition
        | OpCode::ResizePartition
        | OpCode::SetPartitionKey => matches!(kt, KeyType::Master | KeyType::Drive),
        OpCode::SetWorkingKey => kt == KeyType::Partition,
        OpCode::SetMinProtection | OpCode::FlushPartition => {
            matches!(kt, KeyType::Master | KeyType::Drive | KeyType::Partition)
        }
        _ => true,
    };
    if allowed {
        return Ok(());
    }
    refuse(
        Status::WrongKeyType,
        format!("{} is not allowed with the {} key", h.op.name(), kt.name()),
    )
}

/// 7: every region lies inside the capability's region.
fn regions_inside(cap: Option<&CapabilityArgs>, op: &Op) -> Result<(), Refusal> {
    let Some(c) = cap else {
        return Ok(());
    };
    match op_regions(op).iter().find(|r| !c.region.contains(r)) {
        None => Ok(()),
        Some(r) => refuse(
            Status::RegionOutsideCapability,
            format!(
                "region {}+{} outside capability region {}+{}",
                r.offset, r.len, c.region.offset, c.region.len
            ),
        ),
    }
}

/// 9: the writer's signature, checked before the nonce is booked, so a refused request
/// changes nothing, not even the replay cache ([`check_writer_signature`]).
fn writer_signed(
    h: &RequestHeader,
    cap: Option<&CapabilityArgs>,
    ctx: &Context,
    op: &Op,
    data: &[u8],
    write_pieces: &[Vec<pieces::PieceHash>],
    cost: &mut Cost,
) -> Result<(), Refusal> {
    let Some(c) = cap else {
        return Ok(());
    };
    let place = wsig::Place {
        drive: ctx.drive.drive,
        partition: h.partition,
        object: h.object,
        nonce: h.nonce,
    };
    check_writer_signature(c, &place, op, data, write_pieces, ctx.suite(), cost)
}

/// No region of the operation ends past the object size limit.
fn regions_within_object_max(op: &Op) -> Result<(), Refusal> {
    match op_regions(op).iter().find(|r| !r.within_object_max()) {
        None => Ok(()),
        Some(r) => refuse(
            Status::InvalidArgument,
            format!(
                "region {}+{} ends past the {} byte object limit",
                r.offset,
                r.len,
                nasd_proto::OBJECT_BYTES_MAX
            ),
        ),
    }
}

/// A write's data is exactly its regions' total; its piece hashes in its write form per region
/// when `hashed` (the digest or a writer's signature covers them).
fn write_pieces(
    op: &Op,
    data: &[u8],
    suite: nasd_proto::Suite,
    hashed: bool,
    cost: &mut Cost,
) -> Result<Vec<Vec<pieces::PieceHash>>, Refusal> {
    let Op::Write { regions, form, .. } = op else {
        return Ok(vec![]);
    };
    let total = nasd_proto::ops::regions_total(regions)
        .ok_or_else(|| Refusal(Status::InvalidArgument, "region lengths overflow".into()))?;
    if total != data.len() as u64 {
        return refuse(
            Status::InvalidArgument,
            format!(
                "regions cover {total} bytes but {} bytes of data came",
                data.len()
            ),
        );
    }
    let mut out = vec![];
    if hashed {
        let mut at = 0usize;
        for r in regions {
            let d = &data[at..at + r.len as usize];
            at += r.len as usize;
            out.push(pieces::write_form(suite, *form, r.offset, d, cost));
        }
    }
    Ok(out)
}

/// 8: the request MAC over the header (and, under INTEGRITY_DATA, a write's data by its
/// piece hashes) under `key` equals the request's digest, compared in constant time.
#[allow(clippy::too_many_arguments)] // the request, its parts, and the key it claims
fn digest_verifies(
    h: &RequestHeader,
    body: &[u8],
    op: &Op,
    data: &[u8],
    write_pieces: &[Vec<pieces::PieceHash>],
    key: &Key,
    suite: nasd_proto::Suite,
    drive: DriveId,
    cost: &mut Cost,
) -> Result<(), Refusal> {
    let mut mac = request_mac(suite, key, drive, RequestHeader::mac_input_of(body));
    if h.protection.integrity_data() {
        if let Op::Write { regions, form, .. } = op {
            let mut at = 0usize;
            for (r, ps) in regions.iter().zip(write_pieces) {
                let d = &data[at..at + r.len as usize];
                at += r.len as usize;
                pieces::feed(&mut mac, *form, ps, d, cost);
            }
        }
    }
    let got = mac.finalize(cost);
    if !ct_eq(&got, &h.digest) {
        return Err(bad_digest());
    }
    Ok(())
}

fn bad_digest() -> Refusal {
    Refusal(
        Status::BadDigest,
        "digest does not verify (forged, revoked, or the wrong key)".into(),
    )
}

fn rights_for(op: OpCode) -> Rights {
    match op {
        OpCode::Read => Rights::READ,
        OpCode::Write => Rights::WRITE,
        OpCode::GetAttr => Rights::GETATTR,
        OpCode::SetAttr => Rights::SETATTR,
        OpCode::Create => Rights::CREATE,
        OpCode::Remove => Rights::REMOVE,
        OpCode::FastCopy => Rights::FASTCOPY,
        OpCode::Flush => Rights::FLUSH,
        OpCode::BlocksRequired => Rights::BLOCKSREQUIRED,
        // Hints can warm the cache with an object's bytes and a consume reports on them: only
        // a reader may (seed 002 §2.2: an extension must not circumvent the manager's policy).
        OpCode::Hint | OpCode::Consume => Rights::READ,
        _ => Rights(u32::MAX),
    }
}

fn fmt_time_ms(ms: u64) -> String {
    format!("{}.{:03}s after the Unix epoch", ms / 1000, ms % 1000)
}

pub(super) fn op_regions(op: &Op) -> &[Region] {
    match op {
        Op::Read { regions }
        | Op::Write { regions, .. }
        | Op::BlocksRequired { regions }
        | Op::Hint { regions, .. } => regions,
        _ => &[],
    }
}

fn nonce_refusal(e: NonceError) -> Refusal {
    match e {
        NonceError::OutsideWindow { nonce_us, now_us } => Refusal(
            Status::NonceOutsideWindow,
            format!(
                "nonce time {} µs is {} ms from the drive's clock (window ±{} ms)",
                nonce_us,
                nonce_us.abs_diff(now_us) / 1000,
                NONCE_WINDOW_MS
            ),
        ),
        NonceError::Replayed => Refusal(
            Status::NonceReplayed,
            "nonce already seen: replayed request".into(),
        ),
        NonceError::BelowFloor { nonce_us, floor_us } => Refusal(
            Status::NonceReplayed,
            format!(
                "nonce time {nonce_us} µs is below the drive's replay floor {floor_us} µs: \
                 the drive may have accepted it before (a restart, or a replay cache full \
                 of this key's requests); send a fresh request"
            ),
        ),
    }
}

/// Step 9 of the checks (seed 001 §3.3.1 scheme 1: "the network disk verifies the signature
/// and hash of the block before it is written"): under a capability that names a writer key,
/// a request that changes the object's bytes ([`Op::changes_data`]) must carry that key's
/// Ed25519 signature over the message of `nasd_crypto::wsig` for this drive, object, nonce and
/// change; it is refused with `BadSignature` when the signature is missing or does not verify
/// strictly. Requests that change no bytes, and capabilities without a writer key, pass
/// untouched (a signature where none is required is not looked at). `data` is the write's
/// plaintext and `pieces` its write-form piece hashes per region, which the caller computed
/// for every write under a writer key (none for form `mac`).
fn check_writer_signature(
    cap: &CapabilityArgs,
    place: &wsig::Place,
    op: &Op,
    data: &[u8],
    pieces: &[Vec<pieces::PieceHash>],
    suite: nasd_proto::Suite,
    cost: &mut Cost,
) -> Result<(), Refusal> {
    let Some(key) = &cap.writer_key else {
        return Ok(());
    };
    if !op.changes_data() {
        return Ok(());
    }
    let what = match op {
        Op::Write { .. } => "write",
        _ => "size change",
    };
    let Some(sig) = op.writer_signature() else {
        return refuse(
            Status::BadSignature,
            format!("{what} not signed: the capability names writer key {key} and the request carries no signature"),
        );
    };
    let digest;
    let change = match op {
        Op::Write { regions, form, .. } => {
            let mut d = wsig::DataDigest::new(suite, *form);
            let mut at = 0usize;
            for (i, r) in regions.iter().enumerate() {
                // The caller checked that the data is exactly the regions' total.
                let bytes = &data[at..at + r.len as usize];
                at += r.len as usize;
                d.region(pieces.get(i).map_or(&[][..], Vec::as_slice), bytes, cost);
            }
            digest = d.finish(cost);
            wsig::Change::Write {
                form: *form,
                regions,
                data_digest: digest,
            }
        }
        Op::SetAttr { attrs, .. } => wsig::Change::Resize {
            logical_size: attrs.logical_size,
        },
        _ => return Ok(()),
    };
    wsig::verify(key, &wsig::message(place, &change), sig).map_err(|e| {
        Refusal(
            Status::BadSignature,
            format!("{what} not signed by the capability's writer key {key}: {e}"),
        )
    })
}
