//! `nasd obj ...` (object operations of seed 002 Table 1 against a drive) and `nasd cap mint`.
//! Wherever a command takes `--out FILE`, `--out -` means standard output.

use crate::parse;
use anyhow::{bail, Context as _};
use clap::{Args, Subcommand};
use nasd_client::auth::{load_key_file, write_secret_file};
use nasd_client::wire::Signing;
use nasd_client::{Auth, Capability, DriveConn, Reply, Target};
use nasd_crypto::wsig::WriterSigner;
use nasd_proto::{
    AttrMask, Attributes, CapabilityArgs, KeyType, ObjectId, Op, PartitionId, Protection, Region,
    ReplyBody, Rights, Scheme, Status, WriterPublicKey, FS_SPECIFIC_BYTES,
};
use std::io::Write as _;
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

/// How every object command reaches the drive and what authorizes it.
#[derive(Args, Debug, Clone)]
pub struct Access {
    /// Drive address, HOST:PORT.
    #[arg(long, value_name = "ADDR")]
    pub drive: String,
    /// Capability file (from `nasd cap mint`).
    #[arg(
        long,
        value_name = "CAP_FILE",
        conflicts_with = "key",
        required_unless_present = "key"
    )]
    pub cap: Option<PathBuf>,
    /// Key file of the hierarchy (partition, working, drive) instead of a capability.
    #[arg(long, value_name = "KEY_FILE")]
    pub key: Option<PathBuf>,
    /// Partition (default: the capability's, or the key file's).
    #[arg(long)]
    pub partition: Option<u16>,
    /// Object id (default: the capability's).
    #[arg(long, value_parser = parse::number)]
    pub object: Option<u64>,
    /// Protection of the request and reply (seed 002 Table 7). Default: integrity-data, raised
    /// to the capability's minimum.
    #[arg(long, value_parser = parse::protection)]
    pub protection: Option<Protection>,
    /// Also write the exact bytes of the request frame to FILE (for `nasd obj replay`).
    #[arg(long, value_name = "FILE")]
    pub save_request: Option<PathBuf>,
    /// Ed25519 secret key file (from `nasd user keygen`) that signs writes and size changes
    /// under a capability naming a writer key (`nasd cap mint --writer-key`); the drive
    /// stores nothing such a capability's holder did not sign with it (seed 001 scheme 1).
    #[arg(long, value_name = "FILE", requires = "cap")]
    pub sign_key: Option<PathBuf>,
    /// Send a write or size change unsigned even when the capability names a writer key, for
    /// checking that the drive refuses it (status BadSignature); nothing is stored.
    #[arg(long, conflicts_with = "sign_key")]
    pub unsigned: bool,
}

#[derive(Subcommand, Debug)]
pub enum ObjCmd {
    /// Create an object; prints its id.
    Create {
        #[command(flatten)]
        access: Access,
        /// Integrity scheme (default: the partition's).
        #[arg(long, value_parser = parse::scheme)]
        scheme: Option<Scheme>,
    },
    /// Write a file's bytes at an offset.
    Write {
        #[command(flatten)]
        access: Access,
        #[arg(long, default_value_t = 0, value_parser = parse::bytes)]
        offset: u64,
        /// Input file (`-` for standard input).
        #[arg(long = "in", value_name = "FILE")]
        input: PathBuf,
        /// Digest form of the data (default: the object's scheme, asked with a getattr when the
        /// capability allows it, else tree).
        #[arg(long, value_parser = parse::scheme)]
        form: Option<Scheme>,
        /// Let the drive reply before the data is durable (`nasd obj flush` later).
        #[arg(long)]
        write_back: bool,
    },
    /// Read bytes; writes each piece only after it verified, to stdout or --out. A read
    /// larger than one reply (16 MiB) takes several requests; --save-request saves the first.
    Read {
        #[command(flatten)]
        access: Access,
        #[arg(long, default_value_t = 0, value_parser = parse::bytes)]
        offset: u64,
        /// Bytes to read (default: to the end of the object).
        #[arg(long, value_parser = parse::bytes)]
        len: Option<u64>,
        /// Where the bytes go (default and `-`: standard output). A file appears only once
        /// every byte has verified.
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
    /// Print an object's attributes.
    Getattr {
        #[command(flatten)]
        access: Access,
        /// As one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Change attributes; prints them after the change.
    Setattr {
        #[command(flatten)]
        access: Access,
        /// New access_control_version: every outstanding capability for the object dies.
        #[arg(long)]
        access_control_version: Option<u64>,
        /// New logical size (truncate or extend with a hole).
        #[arg(long, value_parser = parse::bytes)]
        size: Option<u64>,
        /// New fs_specific attribute, hex, up to 256 bytes (zero-padded).
        #[arg(long, value_name = "HEX")]
        fs_specific_hex: Option<String>,
        #[arg(long)]
        nearby_object: Option<u64>,
        #[arg(long)]
        blocks_allocated: Option<u64>,
        #[arg(long)]
        fs_data_modify_time_us: Option<u64>,
        #[arg(long)]
        fs_attribute_modify_time_us: Option<u64>,
    },
    /// Remove an object.
    Remove {
        #[command(flatten)]
        access: Access,
    },
    /// Copy-on-write copy of an object; prints the new object's id.
    Fastcopy {
        #[command(flatten)]
        access: Access,
    },
    /// Make write-back writes durable.
    Flush {
        #[command(flatten)]
        access: Access,
        /// Objects to flush (default: the target object).
        #[arg(long, value_delimiter = ',')]
        objects: Vec<u64>,
    },
    /// How many blocks a write of a region would need.
    Blocksrequired {
        #[command(flatten)]
        access: Access,
        #[arg(long, default_value_t = 0, value_parser = parse::bytes)]
        offset: u64,
        #[arg(long, value_parser = parse::bytes)]
        len: u64,
    },
    /// Resend the exact bytes of a request saved with --save-request (tests replay defence).
    Replay {
        /// The saved request frame.
        file: PathBuf,
        #[arg(long, value_name = "ADDR")]
        drive: String,
    },
}

#[derive(Subcommand, Debug)]
pub enum CapCmd {
    /// Mint a capability from a working key file; prints the capability file (JSON).
    Mint(MintArgs),
}

#[derive(Args, Debug)]
pub struct MintArgs {
    /// Working key file (from `nasd drive init --partition` or `nasd key rotate`).
    #[arg(long, value_name = "WORKING_KEY_FILE")]
    key: PathBuf,
    /// Partition (default: the key file's).
    #[arg(long)]
    partition: Option<u16>,
    /// Object id; 0 (the default) means any object of the partition, as `create` needs.
    #[arg(long, default_value_t = 0, value_parser = parse::number)]
    object: u64,
    /// Comma-separated rights: read,write,getattr,setattr,create,remove,fastcopy,flush,
    /// blocksrequired or all.
    #[arg(long, value_parser = parse::rights)]
    rights: Rights,
    /// Lifetime, e.g. 120s, 10m, 2h.
    #[arg(long, value_parser = parse::duration, default_value = "1h")]
    expires_in: std::time::Duration,
    /// Start of the byte region the capability covers (default 0).
    #[arg(long, default_value_t = 0, value_parser = parse::bytes)]
    offset: u64,
    /// Length of the region (default: to the largest offset).
    #[arg(long, value_parser = parse::bytes)]
    len: Option<u64>,
    /// The object's current access_control_version (the capability dies when it changes).
    #[arg(long, default_value_t = 0)]
    access_control_version: u64,
    /// Weakest protection a request using this capability may ask for. Must meet the drive's
    /// and partition's minimum (a drive's default is integrity-args).
    #[arg(long, value_parser = parse::protection, default_value = "integrity-data")]
    min_protection: Protection,
    /// Opaque number recorded in the drive's audit trail.
    #[arg(long, default_value_t = 0)]
    audit_id: u64,
    /// Also seal the args under the working key (for privacy-capability requests).
    #[arg(long)]
    sealed: bool,
    /// Ed25519 public key file (`FILE.pub` from `nasd user keygen`) of the object's only
    /// writer: the drive then stores a write (or size change) under this capability only when
    /// that key signed it (`nasd obj write --sign-key`; seed 001 §3.3.1 scheme 1).
    #[arg(long, value_name = "PUBFILE")]
    writer_key: Option<PathBuf>,
    /// Write the capability to FILE (mode 0600) instead of stdout (`-`: stdout).
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
}

/// Whether an `--out` argument names standard output.
fn is_stdout(p: &std::path::Path) -> bool {
    p.as_os_str() == "-"
}

/// Bytes one request of `obj read` asks for: as much as one reply may carry.
const READ_PIECE_BYTES: u64 = nasd_proto::DATA_BYTES_MAX as u64;

/// Where `obj read` puts verified bytes.
enum ReadSink {
    Stdout(std::io::StdoutLock<'static>),
    /// A temporary file beside the target, renamed over it once complete.
    File {
        target: PathBuf,
        partial: nasd_client::transfer::PartialFile,
        at: u64,
    },
}

impl ReadSink {
    fn open(out: Option<PathBuf>) -> anyhow::Result<ReadSink> {
        match out.filter(|p| !is_stdout(p)) {
            None => Ok(ReadSink::Stdout(std::io::stdout().lock())),
            Some(target) => {
                let partial = nasd_client::transfer::PartialFile::beside(&target)
                    .with_context(|| format!("writing {}", target.display()))?;
                Ok(ReadSink::File {
                    target,
                    partial,
                    at: 0,
                })
            }
        }
    }

    fn put(&mut self, data: &[u8]) -> anyhow::Result<()> {
        match self {
            ReadSink::Stdout(so) => so.write_all(data).context("writing to stdout"),
            ReadSink::File {
                target,
                partial,
                at,
            } => {
                use std::os::unix::fs::FileExt;
                partial
                    .file()
                    .write_all_at(data, *at)
                    .with_context(|| format!("writing {}", target.display()))?;
                *at += data.len() as u64;
                Ok(())
            }
        }
    }

    fn finish(self) -> anyhow::Result<()> {
        match self {
            ReadSink::Stdout(mut so) => so.flush().context("writing to stdout"),
            ReadSink::File {
                target, partial, ..
            } => {
                let finish = nasd_client::transfer::LocalFinish {
                    mode: 0o666 & !crate::cmd_cp::umask(),
                    mtime_us: None,
                };
                partial
                    .persist(&target, finish)
                    .with_context(|| format!("writing {}", target.display()))
            }
        }
    }
}

/// Reads `len` bytes (default: to the object's end) from `offset` in requests of at most
/// [`READ_PIECE_BYTES`], giving each piece to `sink` once it verified. Returns whether every
/// reply was authenticated.
async fn read_object(
    s: &mut Session,
    object: ObjectId,
    offset: u64,
    len: Option<u64>,
    sink: &mut ReadSink,
) -> anyhow::Result<bool> {
    let end = match len {
        Some(l) => Some(
            offset
                .checked_add(l)
                .with_context(|| format!("--offset {offset} + --len {l} overflows"))?,
        ),
        None => None,
    };
    let mut at = offset;
    let mut authenticated = true;
    loop {
        let want = end.map_or(READ_PIECE_BYTES, |e| (e - at).min(READ_PIECE_BYTES));
        let op = Op::Read {
            regions: vec![Region::new(at, want)],
        };
        let r = s.call(object, &op, &[]).await?;
        // Only the first request is saved (for `obj replay`).
        s.save_request = None;
        authenticated &= r.authenticated;
        let size = match &r.body {
            ReplyBody::Read(rr) => rr.logical_size,
            _ => bail!("unexpected reply to read"),
        };
        // `r.data` has verified (open_reply drops anything that did not).
        sink.put(&r.data)?;
        at += r.data.len() as u64;
        let done = end.is_some_and(|e| at >= e) || at >= size;
        if done || (r.data.len() as u64) < want {
            return Ok(authenticated);
        }
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

pub fn run_cap(c: CapCmd) -> anyhow::Result<()> {
    let CapCmd::Mint(a) = c;
    let kf = load_key_file(&a.key)?;
    if kf.kind != KeyType::Working {
        bail!(
            "{} is a {} key file; capabilities are minted from a working key \
             (DIR/keys/*working*, or `nasd key rotate --out`)",
            a.key.display(),
            kf.kind.name()
        );
    }
    let partition = match (a.partition, kf.partition) {
        (Some(p), Some(k)) if p != k.0 => bail!(
            "--partition {p} but {} is the working key of partition {}",
            a.key.display(),
            k.0
        ),
        (Some(p), _) => PartitionId(p),
        (None, Some(k)) => k,
        (None, None) => bail!("--partition is required"),
    };
    if a.writer_key.is_some() && !a.min_protection.integrity_args() {
        // The capability key binds the writer key only where the drive checks a digest: under
        // protection none a holder could send the args without it.
        bail!(
            "--writer-key needs --min-protection integrity-args or stronger (got {}): \
             without a digest the drive cannot tell that the writer key was left out",
            a.min_protection
        );
    }
    let len = a.len.unwrap_or(u64::MAX - a.offset);
    let region = Region::new(a.offset, len);
    if region.end().is_none() {
        bail!("--offset {} + --len {} overflows", a.offset, len);
    }
    let args = CapabilityArgs {
        drive: kf.drive,
        partition,
        object: ObjectId(a.object),
        region,
        rights: a.rights,
        expiry_ms: now_ms().saturating_add(a.expires_in.as_millis() as u64),
        audit_id: a.audit_id,
        min_protection: a.min_protection,
        writer_key: match &a.writer_key {
            Some(p) => Some(WriterPublicKey(nasd_client::userkey::read_public(p)?)),
            None => None,
        },
    };
    let cap = Capability::mint(kf.suite, &kf.key, args, a.access_control_version, a.sealed);
    match a.out.filter(|p| !is_stdout(p)) {
        Some(p) => {
            cap.save(&p)?;
            eprintln!("capability written to {}", p.display());
        }
        None => {
            std::io::stdout()
                .write_all(cap.to_json().as_bytes())
                .context("writing the capability to stdout")?;
        }
    }
    Ok(())
}

/// An open connection with what authorizes requests and where they go.
struct Session {
    conn: DriveConn,
    auth: Auth,
    partition: PartitionId,
    object: Option<ObjectId>,
    protection: Protection,
    save_request: Option<PathBuf>,
    signing: Signing,
}

impl Session {
    async fn open(a: &Access) -> anyhow::Result<Session> {
        let (auth, partition, object) = match (&a.cap, &a.key) {
            (Some(p), _) => {
                let mut c = Capability::load(p)?;
                if let Some(sk) = &a.sign_key {
                    let signer = WriterSigner::from_seed(&nasd_client::userkey::read_secret(sk)?);
                    match c.args.writer_key {
                        Some(k) if k != signer.public() => bail!(
                            "{} is not the key of the capability's writer: its public key is \
                             {}, the capability names {k}",
                            sk.display(),
                            signer.public()
                        ),
                        Some(_) => {}
                        None => eprintln!(
                            "nasd: note: {} names no writer key; --sign-key is not used",
                            p.display()
                        ),
                    }
                    c = c.with_signer(std::sync::Arc::new(signer));
                }
                let part = a.partition.map(PartitionId).unwrap_or(c.args.partition);
                let obj = a.object.map(ObjectId).unwrap_or(c.args.object);
                (Auth::Capability(c), part, Some(obj))
            }
            (None, Some(p)) => {
                let kf = load_key_file(p)?;
                let part = a
                    .partition
                    .map(PartitionId)
                    .or(kf.partition)
                    .unwrap_or(PartitionId(0));
                (Auth::from_key_file(&kf), part, a.object.map(ObjectId))
            }
            (None, None) => bail!("give --cap CAP_FILE or --key KEY_FILE"),
        };
        let protection = a
            .protection
            .unwrap_or_else(|| Protection::INTEGRITY_DATA.union(auth.min_protection()));
        let conn = DriveConn::connect(&a.drive).await?;
        Ok(Session {
            conn,
            auth,
            partition,
            object,
            protection,
            save_request: a.save_request.clone(),
            signing: if a.unsigned {
                Signing::AsGiven
            } else {
                Signing::Required
            },
        })
    }

    fn object(&self) -> anyhow::Result<ObjectId> {
        self.object
            .context("--object is required with --key (a capability names its object)")
    }

    /// The object's integrity scheme, when the capability (or key) may ask for it: a write
    /// whose data digest is in the object's own form lets the drive keep the client's hashes.
    async fn object_scheme(&self, object: ObjectId) -> Option<Scheme> {
        if let Auth::Capability(c) = &self.auth {
            if !c.args.rights.contains(Rights::GETATTR) {
                return None;
            }
        }
        let t = Target {
            partition: self.partition,
            object,
            protection: self.protection,
        };
        self.conn
            .getattr(&self.auth, t)
            .await
            .ok()
            .map(|a| a.scheme)
    }

    /// Sends `op` to `object`, saving the request's bytes first when asked.
    async fn call(&self, object: ObjectId, op: &Op, data: &[u8]) -> anyhow::Result<Reply> {
        let t = Target {
            partition: self.partition,
            object,
            protection: self.protection,
        };
        let req =
            self.conn
                .prepare_signing(self.conn.nonce(), &self.auth, t, op, data, self.signing)?;
        if let Some(p) = &self.save_request {
            std::fs::write(p, &req.frame)
                .with_context(|| format!("saving the request to {}", p.display()))?;
        }
        Ok(self.conn.submit(req).await?)
    }
}

fn attrs_or_bail(r: &Reply) -> anyhow::Result<Attributes> {
    r.attributes()
        .context("the drive's reply carried no attributes")
}

fn print_attrs(a: &Attributes, json: bool) {
    let fs = {
        let end = a
            .fs_specific
            .iter()
            .rposition(|&b| b != 0)
            .map_or(0, |i| i + 1);
        hex::encode(&a.fs_specific[..end])
    };
    if json {
        outln!(
            "{}",
            serde_json::json!({
                "access_control_version": a.access_control_version,
                "nearby_object": a.nearby_object.0,
                "copied_object": a.copied_object.0,
                "logical_size": a.logical_size,
                "blocks_allocated": a.blocks_allocated,
                "blocks_used": a.blocks_used,
                "block_size": a.block_size,
                "create_time_us": a.create_time_us,
                "data_modify_time_us": a.data_modify_time_us,
                "attribute_modify_time_us": a.attribute_modify_time_us,
                "fs_data_modify_time_us": a.fs_data_modify_time_us,
                "fs_attribute_modify_time_us": a.fs_attribute_modify_time_us,
                "fs_specific_hex": fs,
                "scheme": a.scheme.name(),
            })
        );
        return;
    }
    outln!("access_control_version      {}", a.access_control_version);
    outln!("logical_size                {}", a.logical_size);
    outln!("scheme                      {}", a.scheme);
    outln!("blocks_used                 {}", a.blocks_used);
    outln!("blocks_allocated            {}", a.blocks_allocated);
    outln!("block_size                  {}", a.block_size);
    outln!("nearby_object               {}", a.nearby_object);
    outln!("copied_object               {}", a.copied_object);
    outln!("create_time_us              {}", a.create_time_us);
    outln!("data_modify_time_us         {}", a.data_modify_time_us);
    outln!("attribute_modify_time_us    {}", a.attribute_modify_time_us);
    outln!("fs_data_modify_time_us      {}", a.fs_data_modify_time_us);
    outln!(
        "fs_attribute_modify_time_us {}",
        a.fs_attribute_modify_time_us
    );
    outln!("fs_specific                 {fs}");
}

pub async fn run_obj(c: ObjCmd) -> anyhow::Result<()> {
    match c {
        ObjCmd::Create { access, scheme } => {
            let s = Session::open(&access).await?;
            let op = Op::Create {
                scheme,
                mask: AttrMask::default(),
                attrs: Box::default(),
            };
            let r = s.call(s.object.unwrap_or(ObjectId::ANY), &op, &[]).await?;
            match r.body {
                ReplyBody::Object { object } => outln!("{object}"),
                _ => bail!("the drive's reply to create named no object"),
            }
        }
        ObjCmd::Write {
            access,
            offset,
            input,
            form,
            write_back,
        } => {
            let data = if input.as_os_str() == "-" {
                let mut v = vec![];
                std::io::Read::read_to_end(&mut std::io::stdin(), &mut v)
                    .context("reading standard input")?;
                v
            } else {
                std::fs::read(&input).with_context(|| format!("reading {}", input.display()))?
            };
            let s = Session::open(&access).await?;
            let object = s.object()?;
            let form = match form {
                Some(f) => f,
                None => s.object_scheme(object).await.unwrap_or(Scheme::Tree),
            };
            let op = Op::Write {
                regions: vec![Region::new(offset, data.len() as u64)],
                form,
                write_back,
                signature: None,
            };
            let r = s.call(object, &op, &data).await?;
            match r.body {
                ReplyBody::Written {
                    bytes,
                    scheme,
                    logical_size,
                } => outln!(
                    "wrote {bytes} bytes at offset {offset} to object {object} \
                     (scheme {scheme}, size now {logical_size})"
                ),
                _ => bail!("unexpected reply to write"),
            }
        }
        ObjCmd::Read {
            access,
            offset,
            len,
            out,
        } => {
            let mut s = Session::open(&access).await?;
            let object = s.object()?;
            let mut sink = ReadSink::open(out)?;
            let authenticated = read_object(&mut s, object, offset, len, &mut sink).await?;
            sink.finish()?;
            if !authenticated {
                eprintln!("nasd: warning: protection none: the data was not verified");
            }
        }
        ObjCmd::Getattr { access, json } => {
            let s = Session::open(&access).await?;
            let r = s.call(s.object()?, &Op::GetAttr, &[]).await?;
            print_attrs(&attrs_or_bail(&r)?, json);
        }
        ObjCmd::Setattr {
            access,
            access_control_version,
            size,
            fs_specific_hex,
            nearby_object,
            blocks_allocated,
            fs_data_modify_time_us,
            fs_attribute_modify_time_us,
        } => {
            let mut mask = AttrMask::default();
            let mut a = Attributes::default();
            if let Some(v) = access_control_version {
                mask = mask.with(AttrMask::ACCESS_CONTROL_VERSION);
                a.access_control_version = v;
            }
            if let Some(v) = size {
                mask = mask.with(AttrMask::LOGICAL_SIZE);
                a.logical_size = v;
            }
            if let Some(h) = &fs_specific_hex {
                let b = hex::decode(h.trim()).context("--fs-specific-hex is not hex")?;
                if b.len() > FS_SPECIFIC_BYTES {
                    bail!("--fs-specific-hex holds at most {FS_SPECIFIC_BYTES} bytes");
                }
                a.fs_specific[..b.len()].copy_from_slice(&b);
                mask = mask.with(AttrMask::FS_SPECIFIC);
            }
            if let Some(v) = nearby_object {
                mask = mask.with(AttrMask::NEARBY_OBJECT);
                a.nearby_object = ObjectId(v);
            }
            if let Some(v) = blocks_allocated {
                mask = mask.with(AttrMask::BLOCKS_ALLOCATED);
                a.blocks_allocated = v;
            }
            if let Some(v) = fs_data_modify_time_us {
                mask = mask.with(AttrMask::FS_DATA_MODIFY_TIME);
                a.fs_data_modify_time_us = v;
            }
            if let Some(v) = fs_attribute_modify_time_us {
                mask = mask.with(AttrMask::FS_ATTRIBUTE_MODIFY_TIME);
                a.fs_attribute_modify_time_us = v;
            }
            if mask == AttrMask::default() {
                bail!("nothing to set (see `nasd obj setattr --help`)");
            }
            let s = Session::open(&access).await?;
            let op = Op::SetAttr {
                mask,
                attrs: Box::new(a),
                signature: None,
            };
            let r = s.call(s.object()?, &op, &[]).await?;
            print_attrs(&attrs_or_bail(&r)?, false);
        }
        ObjCmd::Remove { access } => {
            let s = Session::open(&access).await?;
            let object = s.object()?;
            s.call(object, &Op::Remove, &[]).await?;
            outln!("removed object {object}");
        }
        ObjCmd::Fastcopy { access } => {
            let s = Session::open(&access).await?;
            let r = s.call(s.object()?, &Op::FastCopy, &[]).await?;
            match r.body {
                ReplyBody::Object { object } => outln!("{object}"),
                _ => bail!("the drive's reply to fastcopy named no object"),
            }
        }
        ObjCmd::Flush { access, objects } => {
            let s = Session::open(&access).await?;
            let object = s.object()?;
            let objects = if objects.is_empty() {
                vec![object]
            } else {
                objects.into_iter().map(ObjectId).collect()
            };
            s.call(object, &Op::Flush { objects }, &[]).await?;
            outln!("flushed");
        }
        ObjCmd::Blocksrequired {
            access,
            offset,
            len,
        } => {
            let s = Session::open(&access).await?;
            let op = Op::BlocksRequired {
                regions: vec![Region::new(offset, len)],
            };
            let r = s.call(s.object()?, &op, &[]).await?;
            match r.body {
                ReplyBody::BlocksRequired { estimated, maximum } => {
                    outln!("estimated {estimated} blocks, at most {maximum}")
                }
                _ => bail!("unexpected reply to blocksrequired"),
            }
        }
        ObjCmd::Replay { file, drive } => {
            let bytes =
                std::fs::read(&file).with_context(|| format!("reading {}", file.display()))?;
            let h = nasd_client::replay(&drive, bytes).await?;
            let detail = String::from_utf8_lossy(&h.args).into_owned();
            if h.status == Status::Ok {
                outln!(
                    "the drive ACCEPTED the replayed request (status ok, reply protection {})",
                    h.protection
                );
            } else {
                bail!(
                    "the drive refused the replayed request{}: {}{}",
                    if h.protection.integrity_args() {
                        ""
                    } else {
                        " (unauthenticated reply)"
                    },
                    h.status.text(),
                    if h.protection.privacy_args() || detail.is_empty() {
                        String::new()
                    } else {
                        format!(" ({detail})")
                    }
                );
            }
        }
    }
    Ok(())
}

/// Writes a key file (mode 0600).
/// Writes a key file (mode 0600), or to stdout when `path` is `-`.
pub fn save_key_file(
    path: &std::path::Path,
    kf: &nasd_crypto::keyfile::KeyFile,
) -> anyhow::Result<()> {
    if path == std::path::Path::new("-") {
        use std::io::Write as _;
        std::io::stdout().write_all(kf.encode().as_bytes())?;
        return Ok(());
    }
    write_secret_file(path, kf.encode().as_bytes())?;
    Ok(())
}
