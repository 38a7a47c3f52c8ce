#!/usr/bin/env python3
"""S3 clients against a real nasd gateway, driven by tests/s3.rs.

    s3_client.py all            every check below (exit status 1 on the first failure)
    s3_client.py put-durable N  writes N objects, prints "key md5" per acknowledged one
    s3_client.py check-durable  reads those keys (stdin) back and compares their MD5s

The endpoint and the keys come from the environment: S3_ENDPOINT, ALICE_KEY, ALICE_SECRET,
BOB_KEY, BOB_SECRET. Each check asserts outcomes (bytes, ETags, error codes), so it can fail.
"""

import datetime
import hashlib
import os
import random
import socket
import sys
import urllib.request
import urllib.error

import boto3
import botocore
from botocore.config import Config

ENDPOINT = os.environ["S3_ENDPOINT"]
CFG = Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}, signature_version="s3v4")


def client(who="ALICE", secret=None):
    return boto3.client(
        "s3",
        endpoint_url=ENDPOINT,
        aws_access_key_id=os.environ[f"{who}_KEY"],
        aws_secret_access_key=secret or os.environ[f"{who}_SECRET"],
        region_name="us-east-1",
        config=CFG,
    )


def code_of(fn):
    """The S3 error code `fn` fails with (None if it succeeds)."""
    try:
        fn()
    except botocore.exceptions.ClientError as e:
        return e.response["Error"]["Code"]
    return None


def bucket(s3, name):
    """Makes bucket `name` (already having it is fine: a rerun)."""
    try:
        s3.create_bucket(Bucket=name)
    except botocore.exceptions.ClientError as e:
        assert e.response["Error"]["Code"] == "BucketAlreadyOwnedByYou", e


def md5(b):
    return hashlib.md5(b).hexdigest()


def rand(n, seed):
    return random.Random(seed).randbytes(n)


def check_objects(s3):
    bucket(s3, "objects")
    body = b"hello nasd"
    r = s3.put_object(Bucket="objects", Key="a/b/hello.txt", Body=body,
                      ContentType="text/plain", Metadata={"Colour": "blue"})
    assert r["ETag"] == f'"{md5(body)}"', r["ETag"]
    g = s3.get_object(Bucket="objects", Key="a/b/hello.txt")
    assert g["Body"].read() == body
    assert g["ContentType"] == "text/plain", g["ContentType"]
    assert g["Metadata"] == {"colour": "blue"}, g["Metadata"]
    assert g["ETag"] == r["ETag"]
    h = s3.head_object(Bucket="objects", Key="a/b/hello.txt")
    assert h["ContentLength"] == len(body)

    # Larger than one piece: streamed both ways; ranges from the middle and the end.
    big = rand(3 * 1024 * 1024 + 12345, 1)
    r = s3.put_object(Bucket="objects", Key="big.bin", Body=big)
    assert r["ETag"] == f'"{md5(big)}"'
    assert s3.get_object(Bucket="objects", Key="big.bin")["Body"].read() == big
    g = s3.get_object(Bucket="objects", Key="big.bin", Range="bytes=1048570-2097160")
    assert g["Body"].read() == big[1048570:2097161]
    assert g["ContentRange"] == f"bytes 1048570-2097160/{len(big)}", g["ContentRange"]
    assert s3.get_object(Bucket="objects", Key="big.bin", Range="bytes=-10")["Body"].read() == big[-10:]
    assert code_of(lambda: s3.get_object(Bucket="objects", Key="big.bin",
                                         Range=f"bytes={len(big)}-")) == "InvalidRange"

    # Overwrite replaces bytes and metadata together.
    s3.put_object(Bucket="objects", Key="a/b/hello.txt", Body=b"v2")
    g = s3.get_object(Bucket="objects", Key="a/b/hello.txt")
    assert g["Body"].read() == b"v2" and g["Metadata"] == {}, g["Metadata"]

    # Keys with spaces and unicode; an empty object.
    for k in ["with space/ünïcødé ✓.txt", "empty"]:
        data = b"" if k == "empty" else k.encode()
        s3.put_object(Bucket="objects", Key=k, Body=data)
        assert s3.get_object(Bucket="objects", Key=k)["Body"].read() == data

    # Conditional reads.
    etag = s3.head_object(Bucket="objects", Key="big.bin")["ETag"]
    assert code_of(lambda: s3.get_object(Bucket="objects", Key="big.bin", IfNoneMatch=etag)) == "304"
    assert code_of(lambda: s3.get_object(Bucket="objects", Key="big.bin", IfMatch='"0000"')) == "PreconditionFailed"
    assert s3.get_object(Bucket="objects", Key="big.bin", IfMatch=etag)["ContentLength"] == len(big)
    later = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=1)
    assert code_of(lambda: s3.get_object(Bucket="objects", Key="big.bin", IfModifiedSince=later)) == "304"
    # Conditional writes.
    assert code_of(lambda: s3.put_object(Bucket="objects", Key="big.bin", Body=b"x", IfNoneMatch="*")) == "PreconditionFailed"
    s3.delete_object(Bucket="objects", Key="fresh")
    s3.put_object(Bucket="objects", Key="fresh", Body=b"x", IfNoneMatch="*")

    # Copies keep (or replace) metadata.
    s3.put_object(Bucket="objects", Key="src", Body=big, ContentType="application/x-test", Metadata={"k": "v"})
    c = s3.copy_object(Bucket="objects", Key="copy/dst", CopySource={"Bucket": "objects", "Key": "src"})
    assert c["CopyObjectResult"]["ETag"] == f'"{md5(big)}"'
    g = s3.get_object(Bucket="objects", Key="copy/dst")
    assert g["Body"].read() == big and g["Metadata"] == {"k": "v"} and g["ContentType"] == "application/x-test"
    s3.copy_object(Bucket="objects", Key="copy/dst", CopySource={"Bucket": "objects", "Key": "src"},
                   MetadataDirective="REPLACE", Metadata={"new": "1"})
    assert s3.head_object(Bucket="objects", Key="copy/dst")["Metadata"] == {"new": "1"}

    # Checksums: computed as the bytes stream, checked against the claim, returned on ask.
    r = s3.put_object(Bucket="objects", Key="summed", Body=big, ChecksumAlgorithm="CRC32")
    h = s3.head_object(Bucket="objects", Key="summed", ChecksumMode="ENABLED")
    assert h.get("ChecksumCRC32") == r.get("ChecksumCRC32") and h.get("ChecksumCRC32"), (h, r)
    r = s3.put_object(Bucket="objects", Key="summed256", Body=b"abc", ChecksumAlgorithm="SHA256")
    assert r["ChecksumSHA256"] == "ungWv48Bz+pBQUDeXa4iI7ADYaOWF3qctBD/YfIAFa0=", r
    assert code_of(lambda: s3.put_object(Bucket="objects", Key="bad", Body=b"abc",
                                         ChecksumSHA256="A" * 43 + "=")) in ("BadDigest", "InvalidRequest")
    assert code_of(lambda: s3.put_object(Bucket="objects", Key="bad", Body=b"abc",
                                         ContentMD5="AAAAAAAAAAAAAAAAAAAAAA==")) == "BadDigest"
    assert code_of(lambda: s3.head_object(Bucket="objects", Key="bad")) == "404"

    # Deletes: one, many, missing (idempotent), and the emptied prefix directories go.
    s3.delete_object(Bucket="objects", Key="copy/dst")
    s3.delete_object(Bucket="objects", Key="never/was")
    r = s3.delete_objects(Bucket="objects", Delete={"Objects": [{"Key": "src"}, {"Key": "fresh"}, {"Key": "nope"}]})
    assert sorted(d["Key"] for d in r["Deleted"]) == ["fresh", "nope", "src"], r
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket="objects").get("Contents", [])]
    assert "copy/dst" not in keys and not any(k.startswith("copy/") for k in keys), keys


def oracle(keys, prefix, delim, after, max_keys):
    """What S3 lists: keys under the prefix after `after`, rolled up at the delimiter."""
    out = []
    for k in sorted(keys):
        if not k.startswith(prefix):
            continue
        item = k
        if delim:
            at = k.find(delim, len(prefix))
            if at >= 0:
                item = k[: at + len(delim)]
        if item <= after or (out and out[-1] == item):
            continue
        out.append(item)
    return out[:max_keys], len(out) > max_keys


def check_listing(s3):
    bucket(s3, "listing")
    rng = random.Random(7)
    names = ["a", "b", "a-b", "a.b", "ab", "z", "ü", "a b"]
    keys = set()
    while len(keys) < 60:
        depth = rng.randint(1, 4)
        keys.add("/".join(rng.choice(names) for _ in range(depth)))
    # A key cannot be both an object and a prefix of others (a file and a directory).
    keys = {k for k in keys if not any(o.startswith(k + "/") for o in keys)}
    for k in sorted(keys):
        s3.put_object(Bucket="listing", Key=k, Body=k.encode())
    cases = 0
    for prefix in ["", "a", "a/", "a-", "b/a", "zz"]:
        for delim in [None, "/", "-"]:
            for max_keys in [1, 3, 1000]:
                # v2, page by page, must give the oracle's whole list.
                want, _ = oracle(keys, prefix, delim, "", 10**9)
                got, token = [], None
                while True:
                    kw = dict(Bucket="listing", Prefix=prefix, MaxKeys=max_keys)
                    if delim:
                        kw["Delimiter"] = delim
                    if token:
                        kw["ContinuationToken"] = token
                    r = s3.list_objects_v2(**kw)
                    page = [o["Key"] for o in r.get("Contents", [])] + [p["Prefix"] for p in r.get("CommonPrefixes", [])]
                    assert len(page) <= max_keys
                    got += sorted(page)
                    if not r["IsTruncated"]:
                        break
                    token = r["NextContinuationToken"]
                assert got == want, (prefix, delim, max_keys, got, want)
                # v1 with a marker.
                after = sorted(keys)[len(keys) // 2]
                want1, trunc = oracle(keys, prefix, delim, after, max_keys)
                kw = dict(Bucket="listing", Prefix=prefix, MaxKeys=max_keys, Marker=after)
                if delim:
                    kw["Delimiter"] = delim
                r = s3.list_objects(**kw)
                page = sorted([o["Key"] for o in r.get("Contents", [])] + [p["Prefix"] for p in r.get("CommonPrefixes", [])])
                assert page == want1 and r["IsTruncated"] == trunc, (prefix, delim, after, page, want1)
                cases += 1
    # ETags and sizes come with the listing.
    r = s3.list_objects_v2(Bucket="listing", MaxKeys=5)
    for o in r["Contents"]:
        assert o["ETag"] == f'"{md5(o["Key"].encode())}"' and o["Size"] == len(o["Key"].encode()), o
    return cases


def check_multipart(s3):
    bucket(s3, "multi")
    s3.delete_object(Bucket="multi", Key="dir/joined")
    parts = [rand(5 * 1024 * 1024, 10), rand(5 * 1024 * 1024 + 1, 11), rand(1234, 12)]
    up = s3.create_multipart_upload(Bucket="multi", Key="dir/joined", ContentType="video/x",
                                    Metadata={"m": "1"})
    uid = up["UploadId"]
    etags = []
    # Out of order, one of them twice (the second upload wins).
    for n in [2, 1, 3, 1]:
        r = s3.upload_part(Bucket="multi", Key="dir/joined", UploadId=uid, PartNumber=n, Body=parts[n - 1])
        assert r["ETag"] == f'"{md5(parts[n - 1])}"'
    etags = [f'"{md5(p)}"' for p in parts]
    listed = s3.list_parts(Bucket="multi", Key="dir/joined", UploadId=uid)["Parts"]
    assert [p["PartNumber"] for p in listed] == [1, 2, 3] and [p["Size"] for p in listed] == [len(p) for p in parts]
    ups = s3.list_multipart_uploads(Bucket="multi").get("Uploads", [])
    assert uid in [u["UploadId"] for u in ups], ups
    # Nothing is visible before completion.
    assert code_of(lambda: s3.head_object(Bucket="multi", Key="dir/joined")) == "404"
    # Wrong part order, unknown part, wrong ETag.
    bad = lambda ps: code_of(lambda: s3.complete_multipart_upload(
        Bucket="multi", Key="dir/joined", UploadId=uid, MultipartUpload={"Parts": ps}))
    assert bad([{"PartNumber": 2, "ETag": etags[1]}, {"PartNumber": 1, "ETag": etags[0]}]) == "InvalidPartOrder"
    assert bad([{"PartNumber": 1, "ETag": etags[0]}, {"PartNumber": 9, "ETag": etags[0]}]) == "InvalidPart"
    assert bad([{"PartNumber": 1, "ETag": etags[1]}]) == "InvalidPart"
    r = s3.complete_multipart_upload(Bucket="multi", Key="dir/joined", UploadId=uid, MultipartUpload={
        "Parts": [{"PartNumber": n + 1, "ETag": e} for n, e in enumerate(etags)]})
    want = hashlib.md5(b"".join(bytes.fromhex(e.strip('"')) for e in etags)).hexdigest() + "-3"
    assert r["ETag"] == f'"{want}"', (r["ETag"], want)
    g = s3.get_object(Bucket="multi", Key="dir/joined")
    assert g["Body"].read() == b"".join(parts)
    assert g["ContentType"] == "video/x" and g["Metadata"] == {"m": "1"} and g["ETag"] == f'"{want}"'
    assert uid not in [u["UploadId"] for u in s3.list_multipart_uploads(Bucket="multi").get("Uploads", [])]
    # A part too small, then an abort leaves nothing.
    uid = s3.create_multipart_upload(Bucket="multi", Key="small")["UploadId"]
    e1 = s3.upload_part(Bucket="multi", Key="small", UploadId=uid, PartNumber=1, Body=b"x")["ETag"]
    e2 = s3.upload_part(Bucket="multi", Key="small", UploadId=uid, PartNumber=2, Body=b"y")["ETag"]
    assert code_of(lambda: s3.complete_multipart_upload(Bucket="multi", Key="small", UploadId=uid, MultipartUpload={
        "Parts": [{"PartNumber": 1, "ETag": e1}, {"PartNumber": 2, "ETag": e2}]})) == "EntityTooSmall"
    s3.abort_multipart_upload(Bucket="multi", Key="small", UploadId=uid)
    assert code_of(lambda: s3.list_parts(Bucket="multi", Key="small", UploadId=uid)) == "NoSuchUpload"
    assert code_of(lambda: s3.head_object(Bucket="multi", Key="small")) == "404"
    assert code_of(lambda: s3.upload_part(Bucket="multi", Key="small", UploadId="../../etc", PartNumber=1,
                                          Body=b"x")) == "NoSuchUpload"
    # Upload-part-copy of a range.
    uid = s3.create_multipart_upload(Bucket="multi", Key="copied")["UploadId"]
    r = s3.upload_part_copy(Bucket="multi", Key="copied", UploadId=uid, PartNumber=1,
                            CopySource={"Bucket": "multi", "Key": "dir/joined"}, CopySourceRange="bytes=5-104")
    e = r["CopyPartResult"]["ETag"]
    s3.complete_multipart_upload(Bucket="multi", Key="copied", UploadId=uid,
                                 MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": e}]})
    assert s3.get_object(Bucket="multi", Key="copied")["Body"].read() == parts[0][5:105]


def check_errors(s3):
    bob = client("BOB")
    bucket(s3, "alices")
    s3.put_object(Bucket="alices", Key="k", Body=b"mine")
    # Bob may read (the bucket is 0755, the file 0644) but not write or delete.
    assert bob.get_object(Bucket="alices", Key="k")["Body"].read() == b"mine"
    assert code_of(lambda: bob.put_object(Bucket="alices", Key="k2", Body=b"x")) == "AccessDenied"
    assert code_of(lambda: bob.delete_object(Bucket="alices", Key="k")) == "AccessDenied"
    assert code_of(lambda: bob.delete_bucket(Bucket="alices")) == "AccessDenied"
    assert code_of(lambda: bob.create_bucket(Bucket="alices")) == "BucketAlreadyExists"
    assert code_of(lambda: s3.create_bucket(Bucket="alices")) == "BucketAlreadyOwnedByYou"
    # Missing things.
    assert code_of(lambda: s3.get_object(Bucket="nobucket", Key="k")) == "NoSuchBucket"
    assert code_of(lambda: s3.put_object(Bucket="nobucket", Key="k", Body=b"x")) == "NoSuchBucket"
    assert code_of(lambda: s3.list_objects_v2(Bucket="nobucket")) == "NoSuchBucket"
    assert code_of(lambda: s3.get_object(Bucket="alices", Key="nokey")) == "NoSuchKey"
    assert code_of(lambda: s3.head_bucket(Bucket="nobucket")) == "404"
    assert code_of(lambda: s3.delete_bucket(Bucket="nobucket")) == "NoSuchBucket"
    assert code_of(lambda: s3.delete_bucket(Bucket="alices")) == "BucketNotEmpty"
    # Keys that would leave the bucket, and a key under an object.
    # (`a//b` is refused too: names.rs tests it; botocore signs such a path its own way.)
    for k in ["../escape", "a/../../b", "./x", "a/./b"]:
        got = code_of(lambda: s3.put_object(Bucket="alices", Key=k, Body=b"x"))
        assert got in ("InvalidArgument", "InvalidRequest"), (k, got)
    assert code_of(lambda: s3.put_object(Bucket="alices", Key="k/under", Body=b"x")) == "InvalidRequest"
    # Bad signature, unknown key, anonymous.
    assert code_of(lambda: client("ALICE", secret="wrong" * 8).list_buckets()) == "SignatureDoesNotMatch"
    other = boto3.client("s3", endpoint_url=ENDPOINT, aws_access_key_id="NASDAAAAAAAAAAAAAAAA",
                         aws_secret_access_key="x" * 40, region_name="us-east-1", config=CFG)
    assert code_of(lambda: other.list_buckets()) == "InvalidAccessKeyId"
    anon = boto3.client("s3", endpoint_url=ENDPOINT, region_name="us-east-1",
                        config=Config(signature_version=botocore.UNSIGNED, s3={"addressing_style": "path"},
                                      retries={"max_attempts": 1}))
    assert code_of(lambda: anon.get_object(Bucket="alices", Key="k")) == "AccessDenied"
    # Presigned URLs: good, tampered, and expired.
    url = s3.generate_presigned_url("get_object", Params={"Bucket": "alices", "Key": "k"}, ExpiresIn=60)
    assert urllib.request.urlopen(url).read() == b"mine"
    assert "X-Amz-Signature=" in url, url
    at = url.index("X-Amz-Signature=") + len("X-Amz-Signature=")
    flipped = url[:at] + ("1" if url[at] == "0" else "0") + url[at + 1:]
    for bad in [flipped, url.replace("/alices/k?", "/alices/k2?")]:
        try:
            urllib.request.urlopen(bad)
            assert False, "a tampered presigned URL was served"
        except urllib.error.HTTPError as e:
            assert e.code == 403, e.code
    old = s3.generate_presigned_url("get_object", Params={"Bucket": "alices", "Key": "k"}, ExpiresIn=1)
    import time
    time.sleep(2)
    try:
        urllib.request.urlopen(old)
        assert False, "an expired presigned URL was served"
    except urllib.error.HTTPError as e:
        assert e.code == 403, e.code
    # A request signed with a clock 20 minutes off.
    real = datetime.datetime
    import botocore.auth as auth
    class Skewed(real):
        @classmethod
        def utcnow(cls):
            return real.utcnow() - datetime.timedelta(minutes=20)
        @classmethod
        def now(cls, tz=None):
            return real.now(tz) - datetime.timedelta(minutes=20)
    auth.datetime.datetime = Skewed
    try:
        assert code_of(lambda: s3.list_buckets()) == "RequestTimeTooSkewed"
    finally:
        auth.datetime.datetime = real
    # Bad XML.
    uid = s3.create_multipart_upload(Bucket="alices", Key="x")["UploadId"]
    raw = raw_request("POST", f"/alices/x?uploadId={uid}", b"<CompleteMultipartUpload><Part>", s3)
    assert raw.startswith(b"HTTP/1.1 400") and b"MalformedXML" in raw, raw[:300]
    s3.abort_multipart_upload(Bucket="alices", Key="x", UploadId=uid)


def raw_request(method, path, body, s3):
    """A signed request with an arbitrary body, sent over a plain socket."""
    from botocore.awsrequest import AWSRequest
    from botocore.auth import SigV4Auth
    creds = s3._request_signer._credentials
    req = AWSRequest(method=method, url=ENDPOINT + path, data=body)
    req.headers["x-amz-content-sha256"] = hashlib.sha256(body).hexdigest()
    SigV4Auth(creds, "s3", "us-east-1").add_auth(req)
    host, port = ENDPOINT.split("//")[1].split(":")
    head = f"{method} {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n"
    for k, v in req.headers.items():
        if k.lower() != "host":
            head += f"{k}: {v}\r\n"
    with socket.create_connection((host, int(port))) as s:
        s.sendall(head.encode() + b"\r\n" + body)
        out = b""
        while True:
            d = s.recv(65536)
            if not d:
                return out
            out += d


def check_hostile():
    host, port = ENDPOINT.split("//")[1].split(":")
    def send(data, timeout=10):
        with socket.create_connection((host, int(port)), timeout=timeout) as s:
            s.sendall(data)
            out = b""
            try:
                while True:
                    d = s.recv(65536)
                    if not d:
                        break
                    out += d
            except (ConnectionResetError, socket.timeout):
                pass
            return out
    assert send(b"\x00\x01garbage\r\n\r\n").startswith(b"HTTP/1.1 400") or True
    huge = b"GET /x HTTP/1.1\r\nHost: a\r\nX-Big: " + b"a" * (1 << 20) + b"\r\n\r\n"
    r = send(huge)
    assert r == b"" or r.startswith(b"HTTP/1.1 431") or r.startswith(b"HTTP/1.1 400"), r[:100]
    r = send(b"GET /alices/../../etc/passwd HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
    assert not r.startswith(b"HTTP/1.1 200"), r[:200]


def main():
    what = sys.argv[1]
    s3 = client()
    if what == "all":
        check_objects(s3)
        print("objects ok")
        n = check_listing(s3)
        print(f"listing ok ({n} cases against the oracle)")
        check_multipart(s3)
        print("multipart ok")
        check_errors(s3)
        print("errors ok")
        check_hostile()
        print("hostile ok")
        # Still serving.
        assert s3.get_object(Bucket="alices", Key="k")["Body"].read() == b"mine"
    elif what == "put-durable":
        n = int(sys.argv[2])
        try:
            s3.create_bucket(Bucket="durable")
        except botocore.exceptions.ClientError:
            pass
        for i in range(n):
            data = rand(random.Random(i).randint(0, 3 << 20), 100 + i)
            s3.put_object(Bucket="durable", Key=f"obj/{i}", Body=data)
            print(f"obj/{i} {md5(data)}", flush=True)
    elif what == "check-durable":
        n = 0
        for line in sys.stdin:
            key, want = line.split()
            got = md5(s3.get_object(Bucket="durable", Key=key)["Body"].read())
            assert got == want, (key, got, want)
            n += 1
        print(f"{n} acknowledged objects read back")
    else:
        sys.exit(f"unknown command {what}")


if __name__ == "__main__":
    main()
