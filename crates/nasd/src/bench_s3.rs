//! `nasd bench s3`: PUT and GET through the S3 gateway with N concurrent clients (4, as the
//! MinIO figures of issue 11 were taken with `warp --concurrent 4`), for 64 MiB objects
//! (16 MiB with `--quick`) and 4 KiB ones — and, in the same run, the same operations through
//! the client library, so the gateway's cost shows as a ratio on this noisy machine.
//!
//! Method: the bench starts a temporary cluster of `--drives` drives (the cluster's default
//! layout) with the gateway beside it (`nasd up --s3`'s setup: a gateway user, `/s3`), makes
//! a user with an access key, and runs each cell — (path, op, size) — for duration/rounds in
//! each of the rounds, the paths alternating which goes first. Every worker has its own HTTP
//! connection (kept alive) and signs every request with SigV4 (`UNSIGNED-PAYLOAD`, as S3
//! clients do over TLS: the gateway does not hash bodies it is not asked to check); GETs read
//! the objects the PUTs of the round wrote, and the bytes are compared once per worker. A
//! cell's figure is the median over rounds. A benchmark: it asserts nothing about speed.

use crate::bench::median;
use anyhow::{bail, Context as _};
use bytes::Bytes;
use clap::Args;
use hmac::{KeyInit, Mac};
use http_body_util::{BodyExt, Full};
use nasd_client::files::Client;
use nasd_cluster::{pseudo_random, Cluster, Options};
use nasd_proto::manager::calls;
use nasd_proto::manager::{Credential, S3KeyMade};
use sha2::{Digest, Sha256};
use std::sync::Arc;
use std::time::{Duration, Instant};

const LARGE_BYTES: usize = 64 << 20;
const LARGE_BYTES_QUICK: usize = 16 << 20;
const SMALL_BYTES: usize = 4 << 10;
const ROUNDS: usize = 3;
const ROUNDS_QUICK: usize = 1;
/// Seconds per cell over all rounds.
const DURATION_S: f64 = 9.0;
const DURATION_S_QUICK: f64 = 1.0;
const BENCH_USER: &str = "s3-bench";

#[derive(Args, Debug)]
pub struct BenchS3Args {
    /// 16 MiB large objects, 1 s per cell, one round: finishes in seconds.
    #[arg(long)]
    pub quick: bool,
    /// One JSON object per cell: path, op, size_bytes, workers, rounds, count, mib_per_s,
    /// ops_per_s.
    #[arg(long)]
    pub json: bool,
    /// Concurrent clients.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub workers: u16,
    /// Drives of the temporary cluster.
    #[arg(long, default_value_t = 2)]
    pub drives: usize,
    /// Seconds of measurement per cell, over all rounds (default 9; 1 with --quick).
    #[arg(long, value_name = "SECS")]
    pub duration: Option<f64>,
    /// The gateway's tree as it comes (`default`: encrypted, issue 10) or set to `plain`,
    /// as MinIO stores objects unless asked to encrypt them.
    #[arg(long, default_value = "default", value_parser = ["default", "plain"])]
    pub protection: String,
}

/// SigV4 (AWS's "Signature Version 4" for S3, header form) of one request: the
/// `Authorization` header for `method` `path` (already URI-encoded, no query) with the
/// given host and time, payload unsigned.
#[allow(clippy::too_many_arguments)] // the parts of the canonical request
fn authorization(
    key_id: &str,
    secret: &str,
    method: &str,
    path: &str,
    host: &str,
    amz_date: &str,
    payload_hash: &str,
    extra: &[(&str, &str)],
) -> String {
    let region = "us-east-1";
    let date = &amz_date[..8];
    let mut headers: Vec<(String, String)> = vec![
        ("host".into(), host.into()),
        ("x-amz-content-sha256".into(), payload_hash.into()),
        ("x-amz-date".into(), amz_date.into()),
    ];
    headers.extend(
        extra
            .iter()
            .map(|(k, v)| (k.to_ascii_lowercase(), v.to_string())),
    );
    headers.sort();
    let canonical_headers: String = headers.iter().map(|(k, v)| format!("{k}:{v}\n")).collect();
    let signed: Vec<&str> = headers.iter().map(|(k, _)| k.as_str()).collect();
    let signed = signed.join(";");
    let canonical = format!("{method}\n{path}\n\n{canonical_headers}\n{signed}\n{payload_hash}");
    let scope = format!("{date}/{region}/s3/aws4_request");
    let to_sign = format!(
        "AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{}",
        hex::encode(Sha256::digest(canonical.as_bytes()))
    );
    let hmac = |k: &[u8], m: &str| {
        let mut h = hmac::Hmac::<Sha256>::new_from_slice(k).expect("any key length");
        h.update(m.as_bytes());
        h.finalize().into_bytes().to_vec()
    };
    let k = hmac(format!("AWS4{secret}").as_bytes(), date);
    let k = hmac(&k, region);
    let k = hmac(&k, "s3");
    let k = hmac(&k, "aws4_request");
    let sig = hex::encode(hmac(&k, &to_sign));
    format!("AWS4-HMAC-SHA256 Credential={key_id}/{scope}, SignedHeaders={signed}, Signature={sig}")
}

fn amz_now() -> String {
    let t = time::OffsetDateTime::now_utc();
    format!(
        "{:04}{:02}{:02}T{:02}{:02}{:02}Z",
        t.year(),
        t.month() as u8,
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    )
}

/// One keep-alive HTTP/1.1 connection to the gateway, signing as one user.
struct S3Conn {
    send: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    host: String,
    key_id: String,
    secret: String,
}

impl S3Conn {
    async fn connect(addr: &str, key_id: &str, secret: &str) -> anyhow::Result<S3Conn> {
        Ok(S3Conn {
            send: Self::handshake(addr).await?,
            host: addr.into(),
            key_id: key_id.into(),
            secret: secret.into(),
        })
    }

    async fn handshake(
        addr: &str,
    ) -> anyhow::Result<hyper::client::conn::http1::SendRequest<Full<Bytes>>> {
        let tcp = tokio::net::TcpStream::connect(addr).await?;
        tcp.set_nodelay(true)?;
        let (send, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp)).await?;
        tokio::spawn(conn);
        Ok(send)
    }

    /// Sends `method path` with `body`; the status and the body's length (`keep` keeps
    /// the bytes).
    async fn call(
        &mut self,
        method: &str,
        path: &str,
        body: Bytes,
        keep: bool,
    ) -> anyhow::Result<(u16, u64, Vec<u8>)> {
        let date = amz_now();
        let auth = authorization(
            &self.key_id,
            &self.secret,
            method,
            path,
            &self.host,
            &date,
            "UNSIGNED-PAYLOAD",
            &[],
        );
        let req = hyper::Request::builder()
            .method(method)
            .uri(path)
            .header("host", &self.host)
            .header("x-amz-date", &date)
            .header("x-amz-content-sha256", "UNSIGNED-PAYLOAD")
            .header("authorization", auth)
            .header("content-length", body.len())
            .body(Full::new(body))?;
        // The gateway closes a connection idle for `HEADER_READ_TIMEOUT_MS` (as any HTTP
        // server ends idle keep-alives); a client opens a new one, as S3 clients' pools do.
        if self.send.ready().await.is_err() {
            self.send = Self::handshake(&self.host).await?;
            self.send.ready().await?;
        }
        let resp = self.send.send_request(req).await?;
        let status = resp.status().as_u16();
        let mut body = resp.into_body();
        let (mut n, mut kept) = (0u64, vec![]);
        while let Some(f) = body.frame().await {
            if let Ok(d) = f?.into_data() {
                n += d.len() as u64;
                if keep || status >= 300 {
                    kept.extend_from_slice(&d);
                }
            }
        }
        if status >= 300 {
            bail!(
                "{method} {path}: HTTP {status}: {}",
                String::from_utf8_lossy(&kept)
            );
        }
        Ok((status, n, kept))
    }
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Path {
    S3,
    Library,
}

impl Path {
    /// The prefix of the objects this path writes.
    fn tag(self) -> &'static str {
        match self {
            Path::S3 => "s3",
            Path::Library => "lib",
        }
    }
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Op {
    Put,
    Get,
}

struct Cell {
    path: Path,
    op: Op,
    size: usize,
    rates: Vec<(f64, u64)>,
}

pub fn run(a: BenchS3Args) -> anyhow::Result<()> {
    let quick = a.quick;
    let large = if quick {
        LARGE_BYTES_QUICK
    } else {
        LARGE_BYTES
    };
    let rounds = if quick { ROUNDS_QUICK } else { ROUNDS };
    let duration = a
        .duration
        .unwrap_or(if quick { DURATION_S_QUICK } else { DURATION_S });
    let per_round = Duration::from_secs_f64(duration / rounds as f64);
    let workers = a.workers as usize;
    let dir = tempfile::tempdir()?;
    let exe = std::env::current_exe()?;
    let cluster = Cluster::start(&exe, &dir.path().join("c"), &Options::drives(a.drives))?;
    let addr = {
        let l = std::net::TcpListener::bind("127.0.0.1:0")?;
        l.local_addr()?.to_string()
    };
    crate::cmd_s3::start(cluster.dir(), &crate::cmd_s3::Up::on(&addr))?;
    let rt = crate::runtime()?;
    let r = rt.block_on(async {
        let admin = Client::connect(cluster.session_config()?).await?;
        if a.protection == "plain" {
            admin.layout_set("/s3", "plain").await?;
        }
        let password = hex::encode(pseudo_random(16, 9));
        admin
            .add_user_enrolled(BENCH_USER, &password, false)
            .await?;
        let made = calls::S3KeyCreate {
            user: BENCH_USER.into(),
        };
        let S3KeyMade {
            access_key_id,
            secret,
        } = admin.call("/", made).await?;
        let user_cfg = nasd_client::session::SessionConfig {
            user: BENCH_USER.into(),
            credential: Credential::Password(password.into()),
            ..cluster.session_config()?
        };
        let mut conns = vec![];
        let mut clients = vec![];
        for _ in 0..workers {
            conns.push(S3Conn::connect(&addr, &access_key_id, &secret.0).await?);
            clients.push(Client::connect(user_cfg.clone()).await?);
        }
        conns[0]
            .call("PUT", "/bench", Bytes::new(), false)
            .await
            .context("making the bucket")?;
        let mut cells: Vec<Cell> = vec![];
        for &size in &[large, SMALL_BYTES] {
            for path in [Path::S3, Path::Library] {
                for op in [Op::Put, Op::Get] {
                    cells.push(Cell {
                        path,
                        op,
                        size,
                        rates: vec![],
                    });
                }
            }
        }
        let data = Bytes::from(pseudo_random(large, 3));
        for round in 0..rounds {
            let order: Vec<Path> = if round % 2 == 0 {
                vec![Path::S3, Path::Library]
            } else {
                vec![Path::Library, Path::S3]
            };
            for &size in &[large, SMALL_BYTES] {
                for &path in &order {
                    let mut written = vec![];
                    for op in [Op::Put, Op::Get] {
                        let (counts, secs) = run_cell(
                            path, op, size, round, per_round, &data, &mut conns, &clients, &written,
                        )
                        .await?;
                        let ops: u64 = counts.iter().sum();
                        if op == Op::Put {
                            written = counts;
                        }
                        let c = cells
                            .iter_mut()
                            .find(|c| c.path == path && c.op == op && c.size == size)
                            .expect("every cell is listed");
                        c.rates.push((ops as f64 / secs, ops));
                    }
                    // A round's large objects go once read, so a long run needs the disk
                    // space of one round, not of all.
                    if size == large {
                        let tag = path.tag();
                        for (w, &n) in written.iter().enumerate() {
                            for i in 0..n {
                                let key = format!("/s3/bench/{tag}-{size}-r{round}-w{w}-{i}");
                                admin.unlink(&key).await?;
                            }
                        }
                    }
                }
            }
        }
        anyhow::Ok(cells)
    });
    crate::cmd_s3::stop(cluster.dir());
    drop(cluster);
    let cells = r?;
    report(&cells, workers, rounds, a.json);
    Ok(())
}

/// Runs one cell for `time`: every worker repeats the operation on its own objects
/// (`r{round}-w{worker}-{i}`; the GETs read those the PUTs wrote, `written[worker]` of
/// them, round and round). Returns each worker's operations, and seconds.
#[allow(clippy::too_many_arguments)]
async fn run_cell(
    path: Path,
    op: Op,
    size: usize,
    round: usize,
    time: Duration,
    data: &Bytes,
    conns: &mut Vec<S3Conn>,
    clients: &[Arc<Client>],
    written: &[u64],
) -> anyhow::Result<(Vec<u64>, f64)> {
    let body = data.slice(..size);
    let t0 = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    let tag = path.tag();
    let taken = std::mem::take(conns);
    for (w, (mut conn, client)) in taken.into_iter().zip(clients.iter().cloned()).enumerate() {
        let body = body.clone();
        let have = written.get(w).copied().unwrap_or(0).max(1);
        tasks.spawn(async move {
            let mut n = 0u64;
            loop {
                let i = if op == Op::Get { n % have } else { n };
                let key = format!("{tag}-{size}-r{round}-w{w}-{i}");
                match (path, op) {
                    (Path::S3, Op::Put) => {
                        conn.call("PUT", &format!("/bench/{key}"), body.clone(), false)
                            .await?;
                    }
                    (Path::S3, Op::Get) => {
                        let check = n == 0;
                        let (_, got, bytes) = conn
                            .call("GET", &format!("/bench/{key}"), Bytes::new(), check)
                            .await?;
                        if got != size as u64 || (check && bytes != body) {
                            bail!("GET {key}: not the bytes written");
                        }
                    }
                    (Path::Library, Op::Put) => {
                        client
                            .put_bytes(&format!("/s3/bench/{key}"), &body, 0o644)
                            .await?;
                    }
                    (Path::Library, Op::Get) => {
                        let got = client.get_bytes(&format!("/s3/bench/{key}")).await?;
                        if got.len() != size || (n == 0 && got != body) {
                            bail!("get {key}: not the bytes written");
                        }
                    }
                }
                n += 1;
                if t0.elapsed() >= time {
                    return anyhow::Ok((w, n, conn));
                }
            }
        });
    }
    let mut counts = vec![0; clients.len()];
    let secs = loop {
        match tasks.join_next().await {
            Some(r) => {
                let (w, n, conn) = r??;
                counts[w] = n;
                conns.push(conn);
            }
            None => break t0.elapsed().as_secs_f64(),
        }
    };
    Ok((counts, secs))
}

fn report(cells: &[Cell], workers: usize, rounds: usize, json: bool) {
    if !json {
        println!(
            "{:<8} {:<4} {:>9} {:>10} {:>10} {:>8}",
            "path", "op", "size", "MiB/s", "ops/s", "s3/lib"
        );
    }
    for c in cells {
        let ops_s = median(c.rates.iter().map(|r| r.0).collect());
        let mib_s = ops_s * c.size as f64 / (1 << 20) as f64;
        let count: u64 = c.rates.iter().map(|r| r.1).sum();
        let path = match c.path {
            Path::S3 => "s3",
            Path::Library => "library",
        };
        let op = match c.op {
            Op::Put => "PUT",
            Op::Get => "GET",
        };
        let lib = cells
            .iter()
            .find(|o| o.path == Path::Library && o.op == c.op && o.size == c.size)
            .map(|o| median(o.rates.iter().map(|r| r.0).collect()))
            .unwrap_or(f64::NAN);
        if json {
            println!(
                "{}",
                serde_json::json!({"path": path, "op": op, "size_bytes": c.size, "workers": workers,
                    "rounds": rounds, "count": count, "mib_per_s": mib_s, "ops_per_s": ops_s})
            );
        } else {
            let ratio = if c.path == Path::S3 {
                format!("{:.2}", ops_s / lib)
            } else {
                String::new()
            };
            println!(
                "{path:<8} {op:<4} {:>9} {mib_s:>10.1} {ops_s:>10.0} {ratio:>8}",
                c.size
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The known answer of AWS's SigV4 documentation ("GET object" example: a ranged GET of
    /// examplebucket/test.txt, 2013-05-24).
    #[test]
    fn signatures_match_the_aws_example() {
        let a = authorization(
            "AKIAIOSFODNN7EXAMPLE",
            "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            "GET",
            "/test.txt",
            "examplebucket.s3.amazonaws.com",
            "20130524T000000Z",
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
            &[("range", "bytes=0-9")],
        );
        assert!(
            a.ends_with(
                "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
            ),
            "{a}"
        );
        assert!(a.contains("SignedHeaders=host;range;x-amz-content-sha256;x-amz-date"));
    }
}
