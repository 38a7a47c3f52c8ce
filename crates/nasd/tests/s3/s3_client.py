#!/usr/bin/env python3
"""S3 clients against a real nasd gateway, driven by tests/s3.rs.

    s3_client.py all            every check below (exit status 1 on the first failure)
    s3_client.py only NAME      one check (check_NAME: private, acls, unsupported, ...)
    s3_client.py put-durable N  writes N objects, prints "key md5" per acknowledged one
    s3_client.py check-durable  reads those keys (stdin) back and compares their MD5s
    s3_client.py post-forms N M N unsigned POST forms sending M MiB each; prints how many
                                were refused, then checks a signed form
    s3_client.py chunked-hold M an aws-chunked PUT declaring a 1 GiB chunk, M MiB of it sent;
                                prints "sent" and holds the connection until stdin has a line
    s3_client.py sigv2-allowed  SigV2 against a gateway started with --sigv2

The endpoint and the keys come from the environment: S3_ENDPOINT, ALICE_KEY, ALICE_SECRET,
BOB_KEY, BOB_SECRET. Each check asserts outcomes (bytes, ETags, error codes), so it can fail.
"""

import base64
import datetime
import hashlib
import json
import os
import random
import socket
import sys
import time
import urllib.request
import urllib.error

import boto3
import botocore
from botocore.config import Config

ENDPOINT = os.environ["S3_ENDPOINT"]
HOSTPORT = ENDPOINT.split("//")[1]
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
        assert e.response["Error"]["Code"] in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"), e


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
    # If-Match on a key that holds no object is NoSuchKey, as S3 answers.
    for cond in ["*", '"0000"']:
        assert code_of(lambda: s3.put_object(Bucket="objects", Key="absent", Body=b"x", IfMatch=cond)) == "NoSuchKey"

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
                # ListObjectVersions, page by page: each object is its one version, "null".
                got, marks = [], {}
                while True:
                    kw = dict(Bucket="listing", Prefix=prefix, MaxKeys=max_keys, **marks)
                    if delim:
                        kw["Delimiter"] = delim
                    r = s3.list_object_versions(**kw)
                    vs = r.get("Versions", [])
                    assert all(v["VersionId"] == "null" and v["IsLatest"] for v in vs), vs
                    assert "DeleteMarkers" not in r
                    page = [v["Key"] for v in vs] + [p["Prefix"] for p in r.get("CommonPrefixes", [])]
                    assert len(page) <= max_keys
                    got += sorted(page)
                    if not r["IsTruncated"]:
                        break
                    marks = dict(KeyMarker=r["NextKeyMarker"])
                    if "NextVersionIdMarker" in r:
                        marks["VersionIdMarker"] = r["NextVersionIdMarker"]
                assert got == want, ("versions", prefix, delim, max_keys, got, want)
                cases += 1
    # ETags and sizes come with the listing.
    r = s3.list_objects_v2(Bucket="listing", MaxKeys=5)
    for o in r["Contents"]:
        assert o["ETag"] == f'"{md5(o["Key"].encode())}"' and o["Size"] == len(o["Key"].encode()), o
    # An empty delimiter is no delimiter, and the answer does not repeat it; a v1 answer
    # always has its marker; owners come with v1 listings, and with v2 when asked.
    for r in [s3.list_objects(Bucket="listing", Delimiter=""), s3.list_objects_v2(Bucket="listing", Delimiter="")]:
        assert "Delimiter" not in r and "CommonPrefixes" not in r and len(r["Contents"]) == len(keys), r
    r = s3.list_objects(Bucket="listing", MaxKeys=2)
    assert r["Marker"] == "" and all(o["Owner"]["ID"] == "alice" for o in r["Contents"]), r
    assert "Owner" not in s3.list_objects_v2(Bucket="listing", MaxKeys=2)["Contents"][0]
    r = s3.list_objects_v2(Bucket="listing", MaxKeys=2, FetchOwner=True)
    assert all(o["Owner"]["ID"] == "alice" for o in r["Contents"]), r
    # A v1 answer's prefix is as asked (clients do not decode it).
    assert s3.list_objects(Bucket="listing", Prefix="a b")["Prefix"] == "a b"
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
    # Each part reads back alone (its completion recorded where it lies); a part the object
    # lacks is InvalidPart; an object written whole is its own part 1.
    whole = b"".join(parts)
    for n in [1, 2, 3]:
        start = sum(len(p) for p in parts[:n - 1])
        g = s3.get_object(Bucket="multi", Key="dir/joined", PartNumber=n)
        assert g["Body"].read() == parts[n - 1] and g["PartsCount"] == 3 and g["ETag"] == f'"{want}"'
        assert g["ContentRange"] == f"bytes {start}-{start + len(parts[n - 1]) - 1}/{len(whole)}"
        h = s3.head_object(Bucket="multi", Key="dir/joined", PartNumber=n)
        assert h["ContentLength"] == len(parts[n - 1]) and h["PartsCount"] == 3
    assert code_of(lambda: s3.get_object(Bucket="multi", Key="dir/joined", PartNumber=4)) == "InvalidPart"
    every = ["ETag", "Checksum", "ObjectParts", "StorageClass", "ObjectSize"]
    a = s3.get_object_attributes(Bucket="multi", Key="dir/joined", ObjectAttributes=every)
    # S3 sends this answer's ETag bare.
    assert a["ETag"] == want and a["ObjectSize"] == len(whole) and a["StorageClass"] == "STANDARD", a
    assert a["ObjectParts"]["TotalPartsCount"] == 3 and not a["ObjectParts"]["IsTruncated"]
    assert [(p["PartNumber"], p["Size"]) for p in a["ObjectParts"]["Parts"]] == [(n + 1, len(p)) for n, p in enumerate(parts)]
    a = s3.get_object_attributes(Bucket="multi", Key="dir/joined", ObjectAttributes=["ObjectParts"],
                                 MaxParts=1, PartNumberMarker=1)
    assert [p["PartNumber"] for p in a["ObjectParts"]["Parts"]] == [2] and a["ObjectParts"]["IsTruncated"], a
    assert "ETag" not in a and "ObjectSize" not in a
    s3.put_object(Bucket="multi", Key="one", Body=b"single", ChecksumAlgorithm="SHA256")
    a = s3.get_object_attributes(Bucket="multi", Key="one", ObjectAttributes=every)
    assert a["Checksum"]["ChecksumSHA256"] == base64.b64encode(hashlib.sha256(b"single").digest()).decode(), a
    assert "ObjectParts" not in a and a["ObjectSize"] == 6 and a["ETag"] == md5(b"single")
    s3.put_object(Bucket="multi", Key="one", Body=b"single")
    assert s3.get_object(Bucket="multi", Key="one", PartNumber=1)["Body"].read() == b"single"
    assert code_of(lambda: s3.get_object(Bucket="multi", Key="one", PartNumber=2)) == "InvalidPart"
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
    done = {"Parts": [{"PartNumber": 1, "ETag": e}]}
    first = s3.complete_multipart_upload(Bucket="multi", Key="copied", UploadId=uid, MultipartUpload=done)
    assert s3.get_object(Bucket="multi", Key="copied")["Body"].read() == parts[0][5:105]
    # Completing it again (a retry whose first answer was lost) answers as the first time;
    # once the key holds another object, the upload is gone.
    again = s3.complete_multipart_upload(Bucket="multi", Key="copied", UploadId=uid, MultipartUpload=done)
    assert again["ETag"] == first["ETag"], (again, first)
    s3.put_object(Bucket="multi", Key="copied", Body=b"other")
    assert code_of(lambda: s3.complete_multipart_upload(Bucket="multi", Key="copied", UploadId=uid,
                                                        MultipartUpload=done)) == "NoSuchUpload"
    # Checksums of multipart objects: SHA-256 composes (the hash of the parts' hashes, `-N`),
    # a wrong claim at completion is BadDigest, and each part keeps its own.
    b64 = lambda b: base64.b64encode(b).decode()
    uid = s3.create_multipart_upload(Bucket="multi", Key="summed", ChecksumAlgorithm="SHA256")["UploadId"]
    ps = [rand(5 << 20, 31), rand(1000, 32)]
    sums = [b64(hashlib.sha256(p).digest()) for p in ps]
    done = {"Parts": []}
    for n, p in enumerate(ps, 1):
        r = s3.upload_part(Bucket="multi", Key="summed", UploadId=uid, PartNumber=n, Body=p,
                           ChecksumAlgorithm="SHA256")
        assert r["ChecksumSHA256"] == sums[n - 1]
        done["Parts"].append({"PartNumber": n, "ETag": r["ETag"], "ChecksumSHA256": sums[n - 1]})
    want = b64(hashlib.sha256(b"".join(base64.b64decode(x) for x in sums)).digest()) + "-2"
    assert code_of(lambda: s3.complete_multipart_upload(Bucket="multi", Key="summed", UploadId=uid,
                                                        MultipartUpload=done, ChecksumSHA256=sums[0])) == "BadDigest"
    r = s3.complete_multipart_upload(Bucket="multi", Key="summed", UploadId=uid, MultipartUpload=done,
                                     ChecksumSHA256=want)
    assert r["ChecksumSHA256"] == want and r["ChecksumType"] == "COMPOSITE", r
    h = s3.head_object(Bucket="multi", Key="summed", ChecksumMode="ENABLED")
    assert h["ChecksumSHA256"] == want and h["ChecksumType"] == "COMPOSITE", h
    g = s3.get_object(Bucket="multi", Key="summed", PartNumber=2, ChecksumMode="ENABLED")
    assert g["ChecksumSHA256"] == sums[1] and g["Body"].read() == ps[1]
    a = s3.get_object_attributes(Bucket="multi", Key="summed", ObjectAttributes=["Checksum", "ObjectParts"])
    assert a["Checksum"]["ChecksumType"] == "COMPOSITE"
    assert [p["ChecksumSHA256"] for p in a["ObjectParts"]["Parts"]] == sums, a
    # SHA-256 has no FULL_OBJECT form; CRC-32 has both (FULL_OBJECT: the CRC of every byte).
    assert code_of(lambda: s3.create_multipart_upload(Bucket="multi", Key="x", ChecksumAlgorithm="SHA256",
                                                      ChecksumType="FULL_OBJECT")) == "InvalidRequest"
    uid = s3.create_multipart_upload(Bucket="multi", Key="crc", ChecksumAlgorithm="CRC32",
                                     ChecksumType="FULL_OBJECT")["UploadId"]
    r = s3.upload_part(Bucket="multi", Key="crc", UploadId=uid, PartNumber=1, Body=b"whole",
                       ChecksumAlgorithm="CRC32")
    r = s3.complete_multipart_upload(Bucket="multi", Key="crc", UploadId=uid, MultipartUpload={
        "Parts": [{"PartNumber": 1, "ETag": r["ETag"]}]})
    one = s3.put_object(Bucket="multi", Key="crc1", Body=b"whole", ChecksumAlgorithm="CRC32")
    assert r["ChecksumType"] == "FULL_OBJECT" and r["ChecksumCRC32"] == one["ChecksumCRC32"], (r, one)


def check_errors(s3):
    bob = client("BOB")
    bucket(s3, "alices")
    s3.put_object(Bucket="alices", Key="k", Body=b"mine")
    # Bob may not read (the bucket is private: 0700, the file 0600), write or delete.
    assert code_of(lambda: bob.get_object(Bucket="alices", Key="k")) == "AccessDenied"
    assert code_of(lambda: bob.put_object(Bucket="alices", Key="k2", Body=b"x")) == "AccessDenied"
    assert code_of(lambda: bob.delete_object(Bucket="alices", Key="k")) == "AccessDenied"
    assert code_of(lambda: bob.delete_bucket(Bucket="alices")) == "AccessDenied"
    assert code_of(lambda: bob.create_bucket(Bucket="alices")) == "BucketAlreadyExists"
    # Making one's own bucket again is us-east-1's legacy 200, and changes nothing; asking
    # for other permissions that way is refused.
    assert code_of(lambda: s3.create_bucket(Bucket="alices")) is None
    assert code_of(lambda: s3.create_bucket(Bucket="alices", ACL="public-read")) == "BucketAlreadyExists"
    assert s3.get_object(Bucket="alices", Key="k")["Body"].read() == b"mine"
    assert code_of(lambda: bob.get_object(Bucket="alices", Key="k")) == "AccessDenied"
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



ALL_USERS = "http://acs.amazonaws.com/groups/global/AllUsers"
AUTHENTICATED = "http://acs.amazonaws.com/groups/global/AuthenticatedUsers"


def grants_of(acl):
    """An ACL as (grantee, permission) pairs: the owner by id, groups by URI."""
    return sorted((g["Grantee"].get("ID") or g["Grantee"].get("URI"), g["Permission"]) for g in acl["Grants"])


def check_private(s3):
    """Issue 22 §1: a bucket is its creator's; no one else reads, lists, copies into or out of
    it, uploads or stores parts in it, or sees it listed, unless an ACL grants them."""
    bob = client("BOB")
    bucket(s3, "priv")
    bucket(bob, "bobs")
    s3.put_object(Bucket="priv", Key="dir/secret", Body=b"alice only")
    assert code_of(lambda: bob.get_object(Bucket="priv", Key="dir/secret")) == "AccessDenied"
    assert code_of(lambda: bob.head_object(Bucket="priv", Key="dir/secret")) == "403"
    assert code_of(lambda: bob.head_object(Bucket="priv", Key="nothing")) == "403"
    assert code_of(lambda: bob.list_objects_v2(Bucket="priv")) == "AccessDenied"
    assert code_of(lambda: bob.list_objects(Bucket="priv", Prefix="dir/")) == "AccessDenied"
    assert code_of(lambda: bob.head_bucket(Bucket="priv")) == "403"
    assert code_of(lambda: bob.copy_object(Bucket="bobs", Key="stolen",
                                           CopySource={"Bucket": "priv", "Key": "dir/secret"})) == "AccessDenied"
    assert code_of(lambda: bob.put_object(Bucket="priv", Key="dir/mine", Body=b"x")) == "AccessDenied"
    assert code_of(lambda: bob.create_multipart_upload(Bucket="priv", Key="big")) == "AccessDenied"
    assert code_of(lambda: bob.list_multipart_uploads(Bucket="priv")) == "AccessDenied"
    assert code_of(lambda: bob.get_bucket_acl(Bucket="priv")) == "AccessDenied"
    assert code_of(lambda: bob.get_object_acl(Bucket="priv", Key="dir/secret")) == "AccessDenied"
    # Parts too: an upload Bob started while the bucket let him write takes no more parts
    # once it is private again.
    s3.put_bucket_acl(Bucket="priv", ACL="public-read-write")
    uid = bob.create_multipart_upload(Bucket="priv", Key="big")["UploadId"]
    s3.put_bucket_acl(Bucket="priv", ACL="private")
    assert code_of(lambda: bob.upload_part(Bucket="priv", Key="big", UploadId=uid, PartNumber=1,
                                           Body=b"x" * 1000)) == "AccessDenied"
    bob.abort_multipart_upload(Bucket="priv", Key="big", UploadId=uid)
    # What the ACL says is what is enforced: the owner alone.
    owner_only = [("alice", "FULL_CONTROL")]
    acl = s3.get_bucket_acl(Bucket="priv")
    assert acl["Owner"]["ID"] == "alice" and grants_of(acl) == owner_only, acl
    assert grants_of(s3.get_object_acl(Bucket="priv", Key="dir/secret")) == owner_only
    # ListBuckets: one's own buckets, and pages.
    names = lambda r: [b["Name"] for b in r["Buckets"]]
    assert "priv" not in names(bob.list_buckets()) and "bobs" in names(bob.list_buckets())
    mine = names(s3.list_buckets())
    assert "priv" in mine and "bobs" not in mine, mine
    for n in range(5):
        bucket(s3, f"page-{n}")
    mine = names(s3.list_buckets())
    got, token = [], None
    while True:
        kw = {"MaxBuckets": 2}
        if token:
            kw["ContinuationToken"] = token
        r = s3.list_buckets(**kw)
        assert len(r["Buckets"]) <= 2, r["Buckets"]
        got += names(r)
        token = r.get("ContinuationToken")
        if not token:
            break
    assert got == sorted(mine) and len(got) == len(set(got)), (got, mine)
    assert s3.list_buckets()["Owner"]["ID"] == "alice"


def check_acls(s3):
    """Canned ACLs and grants that modes express are enforced and read back as enforced;
    others are refused, never accepted and ignored."""
    bob = client("BOB")
    bucket(s3, "alices")
    s3.create_bucket(Bucket="shared", ACL="public-read")
    s3.put_object(Bucket="shared", Key="plain", Body=b"p")
    s3.put_object(Bucket="shared", Key="open", Body=b"o", ACL="public-read")
    keys = [o["Key"] for o in bob.list_objects_v2(Bucket="shared")["Contents"]]
    assert keys == ["open", "plain"], keys
    assert code_of(lambda: bob.get_object(Bucket="shared", Key="plain")) == "AccessDenied"
    assert bob.get_object(Bucket="shared", Key="open")["Body"].read() == b"o"
    assert code_of(lambda: bob.put_object(Bucket="shared", Key="b", Body=b"b")) == "AccessDenied"
    read = [("alice", "FULL_CONTROL"), (AUTHENTICATED, "READ")]
    assert grants_of(s3.get_bucket_acl(Bucket="shared")) == read
    assert grants_of(s3.get_object_acl(Bucket="shared", Key="open")) == read
    assert grants_of(s3.get_object_acl(Bucket="shared", Key="plain")) == [("alice", "FULL_CONTROL")]
    # Anonymous requests stay refused: nasd has no anonymous user.
    anon = boto3.client("s3", endpoint_url=ENDPOINT, region_name="us-east-1",
                        config=Config(signature_version=botocore.UNSIGNED, s3={"addressing_style": "path"},
                                      retries={"max_attempts": 1}))
    assert code_of(lambda: anon.get_object(Bucket="shared", Key="open")) == "AccessDenied"
    # An object's ACL cannot reach past a private bucket.
    assert code_of(lambda: s3.put_object(Bucket="alices", Key="pub", Body=b"x", ACL="public-read")) == "NotImplemented"
    assert code_of(lambda: s3.head_object(Bucket="alices", Key="pub")) == "404"
    # PutObjectAcl and PutBucketAcl change what others may do.
    s3.put_object_acl(Bucket="shared", Key="plain", ACL="public-read")
    assert bob.get_object(Bucket="shared", Key="plain")["Body"].read() == b"p"
    # An overwrite gets the ACL it asks for (none: private), small or streamed, put or copied.
    for size in [10, 3 << 20]:
        k = f"over{size}"
        s3.put_object(Bucket="shared", Key=k, Body=b"a" * size, ACL="public-read")
        assert bob.get_object(Bucket="shared", Key=k)["Body"].read() == b"a" * size
        s3.put_object(Bucket="shared", Key=k, Body=b"b" * size)
        assert code_of(lambda: bob.get_object(Bucket="shared", Key=k)) == "AccessDenied", size
        assert grants_of(s3.get_object_acl(Bucket="shared", Key=k)) == [("alice", "FULL_CONTROL")]
        s3.copy_object(Bucket="shared", Key=k, CopySource={"Bucket": "shared", "Key": k},
                       MetadataDirective="REPLACE", ACL="public-read")
        assert bob.get_object(Bucket="shared", Key=k)["Body"].read() == b"b" * size
        uid = s3.create_multipart_upload(Bucket="shared", Key=k)["UploadId"]
        e = s3.upload_part(Bucket="shared", Key=k, UploadId=uid, PartNumber=1, Body=b"c")["ETag"]
        s3.complete_multipart_upload(Bucket="shared", Key=k, UploadId=uid,
                                     MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": e}]})
        assert code_of(lambda: bob.get_object(Bucket="shared", Key=k)) == "AccessDenied", size
    s3.put_bucket_acl(Bucket="shared", ACL="private")
    assert code_of(lambda: bob.list_objects_v2(Bucket="shared")) == "AccessDenied"
    assert code_of(lambda: bob.get_object(Bucket="shared", Key="open")) == "AccessDenied"
    assert grants_of(s3.get_object_acl(Bucket="shared", Key="open")) == [("alice", "FULL_CONTROL")]
    # A grant read back is a grant accepted back.
    s3.put_bucket_acl(Bucket="shared", ACL="public-read")
    acl = s3.get_bucket_acl(Bucket="shared")
    s3.put_bucket_acl(Bucket="shared", AccessControlPolicy={"Grants": acl["Grants"], "Owner": acl["Owner"]})
    assert grants_of(s3.get_bucket_acl(Bucket="shared")) == read
    s3.put_bucket_acl(Bucket="shared", GrantRead=f'uri="{ALL_USERS}"', GrantFullControl='id="alice"')
    assert grants_of(s3.get_bucket_acl(Bucket="shared")) == read
    # public-read-write: others add objects (theirs); authenticated-read reads like public-read.
    s3.create_bucket(Bucket="dropbox", ACL="public-read-write")
    bob.put_object(Bucket="dropbox", Key="from/bob", Body=b"hi")
    assert [o["Key"] for o in s3.list_objects_v2(Bucket="dropbox")["Contents"]] == ["from/bob"]
    assert code_of(lambda: s3.get_object(Bucket="dropbox", Key="from/bob")) == "AccessDenied"
    assert code_of(lambda: bob.put_object(Bucket="dropbox", Key="x", Body=b"x",
                                          ACL="bucket-owner-full-control")) == "NotImplemented"
    s3.put_object(Bucket="dropbox", Key="mine", Body=b"x", ACL="bucket-owner-full-control")
    s3.create_bucket(Bucket="authread", ACL="authenticated-read")
    assert grants_of(s3.get_bucket_acl(Bucket="authread")) == read
    # What modes cannot express is refused, and changes nothing.
    refused = [
        lambda: s3.put_bucket_acl(Bucket="shared", GrantRead='id="bob"'),
        lambda: s3.put_bucket_acl(Bucket="shared", GrantWriteACP=f'uri="{ALL_USERS}"'),
        lambda: s3.put_bucket_acl(Bucket="shared", ACL="log-delivery-write"),
        lambda: s3.put_object(Bucket="shared", Key="g", Body=b"x", GrantRead='emailAddress="b@example.com"'),
        lambda: s3.put_object(Bucket="shared", Key="g", Body=b"x", ACL="aws-exec-read"),
        lambda: s3.create_bucket(Bucket="granted", GrantRead='id="bob"'),
        lambda: s3.put_bucket_policy(Bucket="shared", Policy='{"Version":"2012-10-17","Statement":[]}'),
        lambda: s3.put_bucket_ownership_controls(Bucket="shared", OwnershipControls={
            "Rules": [{"ObjectOwnership": "BucketOwnerEnforced"}]}),
        lambda: s3.create_bucket(Bucket="enforced", ObjectOwnership="BucketOwnerEnforced"),
    ]
    for i, f in enumerate(refused):
        assert code_of(f) == "NotImplemented", (i, code_of(f))
    assert grants_of(s3.get_bucket_acl(Bucket="shared")) == read
    assert code_of(lambda: s3.head_object(Bucket="shared", Key="g")) == "404"
    assert code_of(lambda: s3.head_bucket(Bucket="granted")) == "404"
    assert code_of(lambda: s3.head_bucket(Bucket="enforced")) == "404"


def check_public_access_block(s3):
    """A bucket's public access block is its owner's, and enforced: BlockPublicAcls refuses
    public ACLs from anyone, IgnorePublicAcls makes a public bucket private until it is
    lifted (its ACL then given back), BlockPublicPolicy refuses public policies."""
    bob = client("BOB")
    bucket(s3, "pab")
    nothing = "NoSuchPublicAccessBlockConfiguration"
    assert code_of(lambda: s3.get_public_access_block(Bucket="pab")) == nothing
    conf = lambda **kw: {"BlockPublicAcls": False, "IgnorePublicAcls": False,
                         "BlockPublicPolicy": False, "RestrictPublicBuckets": False, **kw}
    put = lambda who=s3, **kw: who.put_public_access_block(
        Bucket="pab", PublicAccessBlockConfiguration=conf(**kw))
    assert code_of(lambda: put(bob, IgnorePublicAcls=True)) == "AccessDenied"
    assert code_of(lambda: bob.get_public_access_block(Bucket="pab")) == "AccessDenied"
    s3.put_bucket_acl(Bucket="pab", ACL="public-read")
    s3.put_object(Bucket="pab", Key="k", Body=b"open", ACL="public-read")
    assert bob.get_object(Bucket="pab", Key="k")["Body"].read() == b"open"
    # Ignored: the bucket is private to everyone else, whatever its ACL says or is set to.
    put(IgnorePublicAcls=True, RestrictPublicBuckets=True)
    got = s3.get_public_access_block(Bucket="pab")["PublicAccessBlockConfiguration"]
    assert got == conf(IgnorePublicAcls=True, RestrictPublicBuckets=True), got
    assert code_of(lambda: bob.list_objects_v2(Bucket="pab")) == "AccessDenied"
    assert code_of(lambda: bob.get_object(Bucket="pab", Key="k")) == "AccessDenied"
    s3.put_bucket_acl(Bucket="pab", ACL="public-read-write")
    assert code_of(lambda: bob.get_object(Bucket="pab", Key="k")) == "AccessDenied"
    assert code_of(lambda: bob.put_object(Bucket="pab", Key="b", Body=b"x")) == "AccessDenied"
    assert s3.get_object(Bucket="pab", Key="k")["Body"].read() == b"open"
    # Lifted: the ACL set meanwhile holds.
    assert s3.delete_public_access_block(Bucket="pab")["ResponseMetadata"]["HTTPStatusCode"] == 204
    assert code_of(lambda: s3.get_public_access_block(Bucket="pab")) == nothing
    bob.put_object(Bucket="pab", Key="b", Body=b"bob's")
    assert bob.get_object(Bucket="pab", Key="k")["Body"].read() == b"open"
    # Blocked: no one sets a public ACL, by any route; private ones pass and old ones stay.
    put(BlockPublicAcls=True)
    up = lambda who=s3, acl="public-read": who.create_multipart_upload(Bucket="pab", Key="m", ACL=acl)
    for f in [lambda: s3.put_bucket_acl(Bucket="pab", ACL="public-read"),
              lambda: s3.put_bucket_acl(Bucket="pab", ACL="authenticated-read"),
              lambda: s3.put_object(Bucket="pab", Key="p", Body=b"x", ACL="public-read"),
              lambda: s3.put_object(Bucket="pab", Key="p", Body=b"x", GrantRead=f'uri="{ALL_USERS}"'),
              lambda: s3.put_object_acl(Bucket="pab", Key="k", ACL="public-read"),
              lambda: s3.copy_object(Bucket="pab", Key="p", CopySource="pab/k", ACL="public-read"),
              lambda: up(),
              lambda: bob.put_object(Bucket="pab", Key="bp", Body=b"x", ACL="public-read")]:
        assert code_of(f) == "AccessDenied", f
    assert code_of(lambda: s3.head_object(Bucket="pab", Key="p")) == "404"
    s3.put_object(Bucket="pab", Key="p", Body=b"x", ACL="private")
    s3.abort_multipart_upload(Bucket="pab", Key="m", UploadId=up(acl="private")["UploadId"])
    assert bob.get_object(Bucket="pab", Key="k")["Body"].read() == b"open"
    # Policies: public ones refused by the block, others as not implemented.
    put(BlockPublicPolicy=True)
    policy = lambda principal: json.dumps({"Version": "2012-10-17", "Statement": [{
        "Effect": "Allow", "Principal": principal, "Action": "s3:GetObject",
        "Resource": "arn:aws:s3:::pab/*"}]})
    assert code_of(lambda: s3.put_bucket_policy(Bucket="pab", Policy=policy("*"))) == "AccessDenied"
    assert code_of(lambda: s3.put_bucket_policy(Bucket="pab", Policy=policy({"AWS": "*"}))) == "AccessDenied"
    assert code_of(lambda: s3.put_bucket_policy(Bucket="pab", Policy=policy({"AWS": "bob"}))) == "NotImplemented"
    assert code_of(lambda: s3.put_bucket_policy(Bucket="pab", Policy="{not json")) == "MalformedPolicy"
    s3.delete_public_access_block(Bucket="pab")


def check_unsupported(s3):
    """Features the gateway lacks answer NotImplemented (or S3's own error), never a 200
    that ignores them."""
    bucket(s3, "plain")
    s3.put_object(Bucket="plain", Key="p", Body=b"plain")
    ssec = dict(SSECustomerAlgorithm="AES256", SSECustomerKey=os.urandom(16).hex())
    refused = {
        "sse-kms put": lambda: s3.put_object(Bucket="plain", Key="c", Body=b"x", ServerSideEncryption="aws:kms"),
        "sse-kms default": lambda: s3.put_bucket_encryption(Bucket="plain", ServerSideEncryptionConfiguration={
            "Rules": [{"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "aws:kms"}}]}),
        "lock put": lambda: s3.put_object(Bucket="plain", Key="c", Body=b"x", ObjectLockMode="GOVERNANCE",
                                          ObjectLockRetainUntilDate=datetime.datetime(2099, 1, 1)),
        "legal hold put": lambda: s3.put_object(Bucket="plain", Key="c", Body=b"x", ObjectLockLegalHoldStatus="ON"),
        "redirect put": lambda: s3.put_object(Bucket="plain", Key="c", Body=b"x", WebsiteRedirectLocation="/x"),
        "glacier put": lambda: s3.put_object(Bucket="plain", Key="c", Body=b"x", StorageClass="GLACIER"),
        "lock bucket": lambda: s3.create_bucket(Bucket="locked", ObjectLockEnabledForBucket=True),
        "mfa delete": lambda: s3.put_bucket_versioning(Bucket="plain", VersioningConfiguration={
            "Status": "Enabled", "MFADelete": "Enabled"}),
        "lifecycle transition": lambda: s3.put_bucket_lifecycle_configuration(Bucket="plain", LifecycleConfiguration={
            "Rules": [{"ID": "x", "Status": "Enabled", "Filter": {"Prefix": ""},
                       "Transitions": [{"Days": 1, "StorageClass": "GLACIER"}]}]}),
        "logging": lambda: s3.put_bucket_logging(Bucket="plain", BucketLoggingStatus={
            "LoggingEnabled": {"TargetBucket": "plain", "TargetPrefix": "log/"}}),
        "lock config": lambda: s3.put_object_lock_configuration(Bucket="plain", ObjectLockConfiguration={
            "ObjectLockEnabled": "Enabled"}),
    }
    for what, f in refused.items():
        assert code_of(f) == "NotImplemented", (what, code_of(f))
    assert code_of(lambda: s3.head_object(Bucket="plain", Key="c")) == "404"
    assert code_of(lambda: s3.head_bucket(Bucket="locked")) == "404"
    # A GET with an SSE-C key of an object stored without one is S3's InvalidRequest.
    assert code_of(lambda: s3.get_object(Bucket="plain", Key="p", **ssec)) == "InvalidRequest"
    # A version other than "null" does not exist in an unversioned bucket.
    assert s3.get_object(Bucket="plain", Key="p", VersionId="null")["Body"].read() == b"plain"
    assert code_of(lambda: s3.get_object(Bucket="plain", Key="p", VersionId="3HL4kqtJlcpXroDTDmJ")) == "NoSuchVersion"
    # The expected bucket owner is checked.
    assert code_of(lambda: s3.get_object(Bucket="plain", Key="p", ExpectedBucketOwner="bob")) == "AccessDenied"
    assert s3.get_object(Bucket="plain", Key="p", ExpectedBucketOwner="alice")["Body"].read() == b"plain"
    # Keys with `+`, `%` and spaces survive listings in EncodingType=url (boto3 asks for it).
    for k in ["a+b", "c%20d", "e f"]:
        s3.put_object(Bucket="plain", Key=k, Body=b"k")
    listed = [o["Key"] for o in s3.list_objects_v2(Bucket="plain")["Contents"]]
    assert {"a+b", "c%20d", "e f"} <= set(listed), listed
    listed = [o["Key"] for o in s3.list_objects(Bucket="plain")["Contents"]]
    assert {"a+b", "c%20d", "e f"} <= set(listed), listed


def check_versioning(s3):
    """Versioning: every write of a key keeps the one before, reads and deletes name versions,
    a delete without one leaves a marker, deleting the current version brings back the one
    before, a suspended bucket keeps one `null` version, and no version's storage ever shows
    in an ordinary listing."""
    bucket(s3, "vers")
    assert "Status" not in s3.get_bucket_versioning(Bucket="vers")
    s3.put_object(Bucket="vers", Key="d/k", Body=b"before")
    s3.put_bucket_versioning(Bucket="vers", VersioningConfiguration={"Status": "Enabled"})
    assert s3.get_bucket_versioning(Bucket="vers")["Status"] == "Enabled"
    ids = [s3.put_object(Bucket="vers", Key="d/k", Body=b"v%d" % n)["VersionId"] for n in range(3)]
    assert len(set(ids)) == 3, ids
    get = lambda **kw: s3.get_object(Bucket="vers", Key="d/k", **kw)["Body"].read()
    assert get() == b"v2"
    assert get(VersionId=ids[0]) == b"v0"
    assert get(VersionId="null") == b"before"
    assert code_of(lambda: get(VersionId="0" * 24)) == "NoSuchVersion"
    listed = s3.list_object_versions(Bucket="vers")
    assert [v["VersionId"] for v in listed["Versions"]] == ids[::-1] + ["null"], listed["Versions"]
    assert [v["IsLatest"] for v in listed["Versions"]] == [True, False, False, False]
    page = s3.list_object_versions(Bucket="vers", MaxKeys=2)
    assert page["IsTruncated"] and page["NextVersionIdMarker"] == ids[1]
    rest = s3.list_object_versions(Bucket="vers", KeyMarker="d/k", VersionIdMarker=ids[1])
    assert [v["VersionId"] for v in rest["Versions"]] == [ids[0], "null"]
    assert [o["Key"] for o in s3.list_objects_v2(Bucket="vers")["Contents"]] == ["d/k"]
    # A delete without a version leaves a marker: the key is gone, its versions are not.
    gone = s3.delete_object(Bucket="vers", Key="d/k")
    assert gone["DeleteMarker"] is True
    try:
        s3.head_object(Bucket="vers", Key="d/k")
        raise AssertionError("a deleted key answers")
    except botocore.exceptions.ClientError as e:
        assert e.response["ResponseMetadata"]["HTTPHeaders"]["x-amz-delete-marker"] == "true"
    assert "Contents" not in s3.list_objects_v2(Bucket="vers")
    assert "Contents" not in s3.list_objects_v2(Bucket="vers", Prefix="d/")
    markers = s3.list_object_versions(Bucket="vers")["DeleteMarkers"]
    assert [(m["VersionId"], m["IsLatest"]) for m in markers] == [(gone["VersionId"], True)]
    assert code_of(lambda: get(VersionId=gone["VersionId"])) == "MethodNotAllowed"
    # Deleting the marker, then the current version, brings back the one before each time.
    s3.delete_object(Bucket="vers", Key="d/k", VersionId=gone["VersionId"])
    assert get() == b"v2"
    s3.delete_object(Bucket="vers", Key="d/k", VersionId=ids[2])
    assert get() == b"v1"
    # A copy from a version is a new version.
    copied = s3.copy_object(Bucket="vers", Key="d/k", CopySource={"Bucket": "vers", "Key": "d/k", "VersionId": ids[0]})
    assert copied["CopySourceVersionId"] == ids[0] and get() == b"v0"
    # Suspended: writes replace the one null version; one that fails replaces nothing.
    s3.put_bucket_versioning(Bucket="vers", VersioningConfiguration={"Status": "Suspended"})
    listed = lambda: [v["VersionId"] for v in s3.list_object_versions(Bucket="vers")["Versions"]]
    before = listed()
    assert "null" in before, before
    for body in [b"bad", b"b" * (2 << 20)]:
        assert code_of(lambda: s3.put_object(Bucket="vers", Key="d/k", Body=body,
                                             ContentMD5="1B2M2Y8AsgTpgAmY7PhCfg==")) == "BadDigest"
        assert listed() == before and get() == b"v0"
    for body in [b"s1", b"s2"]:
        s3.put_object(Bucket="vers", Key="d/k", Body=body)
    versions = s3.list_object_versions(Bucket="vers")["Versions"]
    assert [v["VersionId"] for v in versions] == ["null", copied["VersionId"], ids[1], ids[0]], versions
    assert get() == b"s2"
    # A key cannot name a version's storage.
    assert code_of(lambda: s3.put_object(Bucket="vers", Key="d/k\ufdd0v", Body=b"x")) == "InvalidArgument"
    # Another user sees none of it; only the owner sets the state.
    bob = client("BOB")
    assert code_of(lambda: bob.list_object_versions(Bucket="vers")) == "AccessDenied"
    assert code_of(lambda: bob.get_object(Bucket="vers", Key="d/k", VersionId=ids[0])) == "AccessDenied"
    assert code_of(lambda: bob.put_bucket_versioning(
        Bucket="vers", VersioningConfiguration={"Status": "Enabled"})) == "AccessDenied"
    # Every version deleted, the bucket is empty and goes.
    for v in s3.list_object_versions(Bucket="vers")["Versions"]:
        s3.delete_object(Bucket="vers", Key=v["Key"], VersionId=v["VersionId"])
    assert "Versions" not in s3.list_object_versions(Bucket="vers")
    s3.delete_bucket(Bucket="vers")


def check_conditions(s3):
    """Conditional writes and deletes: If-Match and If-None-Match on a PUT and a completion,
    If-Match, size and modify time on a delete, each checked in one step with its commit: of
    sixteen concurrent create-only PUTs of a key exactly one lands, and read-modify-write
    loops under If-Match lose no update."""
    from concurrent.futures import ThreadPoolExecutor
    bucket(s3, "cond")
    put = lambda **kw: s3.put_object(Bucket="cond", Key="k", **kw)
    etag = put(Body=b"one", IfNoneMatch="*")["ETag"]
    assert code_of(lambda: put(Body=b"x", IfNoneMatch="*")) == "PreconditionFailed"
    assert code_of(lambda: put(Body=b"x", IfNoneMatch=etag)) == "PreconditionFailed"
    assert code_of(lambda: put(Body=b"x", IfMatch='"0123"')) == "PreconditionFailed"
    etag2 = put(Body=b"two", IfMatch=etag)["ETag"]
    put(Body=b"two", IfNoneMatch=etag)
    assert code_of(lambda: s3.put_object(Bucket="cond", Key="none", Body=b"x",
                                         IfMatch="*")) == "NoSuchKey"
    # A completion is checked the same way, before its parts are joined.
    def complete(**kw):
        up = s3.create_multipart_upload(Bucket="cond", Key="k")["UploadId"]
        e = s3.upload_part(Bucket="cond", Key="k", UploadId=up, PartNumber=1, Body=b"mp")["ETag"]
        return s3.complete_multipart_upload(Bucket="cond", Key="k", UploadId=up,
                                            MultipartUpload={"Parts": [{"ETag": e, "PartNumber": 1}]},
                                            **kw)
    assert code_of(lambda: complete(IfNoneMatch="*")) == "PreconditionFailed"
    mp = complete(IfMatch=etag2)["ETag"]
    assert s3.get_object(Bucket="cond", Key="k")["Body"].read() == b"mp"
    # Deletes: a condition that fails keeps the object; one on nothing does nothing.
    head = s3.head_object(Bucket="cond", Key="k")
    delete = lambda **kw: s3.delete_object(Bucket="cond", Key="k", **kw)
    assert code_of(lambda: delete(IfMatch=etag)) == "PreconditionFailed"
    assert code_of(lambda: delete(IfMatchSize=3)) == "PreconditionFailed"
    assert code_of(lambda: delete(IfMatchLastModifiedTime=datetime.datetime(2015, 1, 1))) \
        == "PreconditionFailed"
    errs = s3.delete_objects(Bucket="cond", Delete={"Objects": [{"Key": "k", "ETag": etag}]})
    assert [e["Code"] for e in errs["Errors"]] == ["PreconditionFailed"], errs
    delete(IfMatch=mp, IfMatchSize=2, IfMatchLastModifiedTime=head["LastModified"])
    assert code_of(lambda: s3.head_object(Bucket="cond", Key="k")) == "404"
    delete(IfMatch=mp)
    # Races: of sixteen create-only PUTs of one key exactly one lands, and it is what is read.
    for round in range(4):
        key = f"race/{round}"
        def create(n):
            try:
                s3.put_object(Bucket="cond", Key=key, Body=b"writer %d" % n, IfNoneMatch="*")
                return n
            except botocore.exceptions.ClientError as e:
                assert e.response["Error"]["Code"] == "PreconditionFailed", e.response
                return None
        with ThreadPoolExecutor(16) as pool:
            won = [n for n in pool.map(create, range(16)) if n is not None]
        assert len(won) == 1, (key, won)
        assert s3.get_object(Bucket="cond", Key=key)["Body"].read() == b"writer %d" % won[0]
    # Four writers add to a counter by read, add, write If-Match: no increment is lost.
    s3.put_object(Bucket="cond", Key="counter", Body=b"0")
    def add(_):
        for _ in range(5):
            while True:
                got = s3.get_object(Bucket="cond", Key="counter")
                n = int(got["Body"].read())
                try:
                    s3.put_object(Bucket="cond", Key="counter", Body=b"%d" % (n + 1),
                                  IfMatch=got["ETag"])
                    break
                except botocore.exceptions.ClientError as e:
                    assert e.response["Error"]["Code"] == "PreconditionFailed", e.response
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(add, range(4)))
    assert s3.get_object(Bucket="cond", Key="counter")["Body"].read() == b"20"


def check_encryption(s3):
    """SSE-C: the customer's key enciphers the bytes, every read needs it, a wrong one or none
    is refused, and ranges, parts and copies decipher right. SSE-S3 and a bucket's default
    are recorded and reported."""
    bucket(s3, "enc")
    # boto3 sends a key given as a string of 32 characters as its bytes, with their MD5.
    key, other = os.urandom(16).hex(), os.urandom(16).hex()
    ssec = dict(SSECustomerAlgorithm="AES256", SSECustomerKey=key)
    wrong = dict(SSECustomerAlgorithm="AES256", SSECustomerKey=other)
    key_md5 = base64.b64encode(hashlib.md5(key.encode()).digest()).decode()
    for name, data in [("small", b"sse-c secret " * 8), ("big", rand(3 << 20, 21))]:
        r = s3.put_object(Bucket="enc", Key=name, Body=data, **ssec)
        assert r["SSECustomerKeyMD5"] == key_md5, r
        # The ETag is keyed: no digest of the plaintext for those who may only list.
        assert r["ETag"].strip('"') != md5(data)
        g = s3.get_object(Bucket="enc", Key=name, **ssec)
        assert g["Body"].read() == data and g["SSECustomerKeyMD5"] == key_md5
        assert code_of(lambda: s3.get_object(Bucket="enc", Key=name)) == "InvalidRequest"
        assert code_of(lambda: s3.get_object(Bucket="enc", Key=name, **wrong)) == "InvalidRequest"
        assert code_of(lambda: s3.head_object(Bucket="enc", Key=name)) == "400"
        assert s3.head_object(Bucket="enc", Key=name, **ssec)["ContentLength"] == len(data)
        r = s3.get_object(Bucket="enc", Key=name, Range="bytes=7-70", **ssec)["Body"].read()
        assert r == data[7:71]
    # Key and MD5 must agree; SSE-C and SSE-S3 together are refused.
    bad_md5 = dict(ssec, SSECustomerKeyMD5=base64.b64encode(b"0" * 16).decode())
    assert code_of(lambda: s3.put_object(Bucket="enc", Key="x", Body=b"x", **bad_md5)) == "InvalidArgument"
    assert code_of(lambda: s3.put_object(Bucket="enc", Key="x", Body=b"x", ServerSideEncryption="AES256",
                                         **ssec)) == "InvalidArgument"
    # A multipart upload with parts 1 and 3: each enciphered under its number, read across
    # the boundary, by part and whole; every request on it needs the key.
    u = s3.create_multipart_upload(Bucket="enc", Key="mp", **ssec)["UploadId"]
    p1, p3 = rand(5 << 20, 22), rand(1 << 20, 23)
    assert code_of(lambda: s3.upload_part(Bucket="enc", Key="mp", UploadId=u, PartNumber=1, Body=p1)) \
        == "InvalidRequest"
    assert code_of(lambda: s3.upload_part(Bucket="enc", Key="mp", UploadId=u, PartNumber=1, Body=p1,
                                          **wrong)) == "InvalidRequest"
    e1 = s3.upload_part(Bucket="enc", Key="mp", UploadId=u, PartNumber=1, Body=p1, **ssec)["ETag"]
    e3 = s3.upload_part(Bucket="enc", Key="mp", UploadId=u, PartNumber=3, Body=p3, **ssec)["ETag"]
    parts = {"Parts": [{"PartNumber": 1, "ETag": e1}, {"PartNumber": 3, "ETag": e3}]}
    assert code_of(lambda: s3.complete_multipart_upload(Bucket="enc", Key="mp", UploadId=u,
                                                        MultipartUpload=parts)) == "InvalidRequest"
    s3.complete_multipart_upload(Bucket="enc", Key="mp", UploadId=u, MultipartUpload=parts, **ssec)
    whole = p1 + p3
    assert s3.get_object(Bucket="enc", Key="mp", **ssec)["Body"].read() == whole
    r = s3.get_object(Bucket="enc", Key="mp", Range=f"bytes={(5 << 20) - 9}-{(5 << 20) + 9}", **ssec)
    assert r["Body"].read() == whole[(5 << 20) - 9:(5 << 20) + 10]
    assert s3.get_object(Bucket="enc", Key="mp", PartNumber=2, **ssec)["Body"].read() == p3
    # Copies: SSE-C to SSE-C under another key, to plain, and to SSE-S3; the source's key
    # is needed.
    src = {"Bucket": "enc", "Key": "big"}
    src_key = dict(CopySourceSSECustomerAlgorithm="AES256", CopySourceSSECustomerKey=key)
    big = rand(3 << 20, 21)
    assert code_of(lambda: s3.copy_object(Bucket="enc", Key="c1", CopySource=src)) == "InvalidRequest"
    s3.copy_object(Bucket="enc", Key="c1", CopySource=src, **src_key, **wrong)
    assert s3.get_object(Bucket="enc", Key="c1", **wrong)["Body"].read() == big
    assert code_of(lambda: s3.get_object(Bucket="enc", Key="c1", **ssec)) == "InvalidRequest"
    s3.copy_object(Bucket="enc", Key="c2", CopySource=src, **src_key)
    assert s3.get_object(Bucket="enc", Key="c2")["Body"].read() == big
    r = s3.copy_object(Bucket="enc", Key="c3", CopySource=src, ServerSideEncryption="AES256", **src_key)
    assert r["ServerSideEncryption"] == "AES256"
    # SSE-S3, asked and by default.
    r = s3.put_object(Bucket="enc", Key="s3", Body=b"at rest", ServerSideEncryption="AES256")
    assert r["ServerSideEncryption"] == "AES256"
    assert s3.get_object(Bucket="enc", Key="s3")["ServerSideEncryption"] == "AES256"
    # x-amz-server-side-encryption belongs on writes (boto3 will not send it on a HEAD).
    h = client()
    h.meta.events.register("before-call.s3.HeadObject", lambda params, **kw: params["headers"].update(
        {"x-amz-server-side-encryption": "AES256"}))
    assert code_of(lambda: h.head_object(Bucket="enc", Key="s3")) == "400"
    assert code_of(lambda: s3.get_bucket_encryption(Bucket="enc")) == \
        "ServerSideEncryptionConfigurationNotFoundError"
    s3.put_bucket_encryption(Bucket="enc", ServerSideEncryptionConfiguration={
        "Rules": [{"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]})
    rule = s3.get_bucket_encryption(Bucket="enc")["ServerSideEncryptionConfiguration"]["Rules"][0]
    assert rule["ApplyServerSideEncryptionByDefault"]["SSEAlgorithm"] == "AES256"
    assert s3.put_object(Bucket="enc", Key="d", Body=b"d")["ServerSideEncryption"] == "AES256"
    s3.delete_bucket_encryption(Bucket="enc")
    assert "ServerSideEncryption" not in s3.put_object(Bucket="enc", Key="d", Body=b"d")
    # Another user cannot set or read the default of my bucket.
    bob = client("BOB")
    assert code_of(lambda: bob.get_bucket_encryption(Bucket="enc")) == "AccessDenied"


def check_plaintext_bucket(s3):
    """A bucket whose files are stored in plaintext (an admin set its layout `plain`) refuses
    SSE-S3 rather than claim it, and still serves SSE-C (the gateway's own cipher)."""
    s3.put_object(Bucket="plaintext", Key="p", Body=b"plain")
    code = code_of(lambda: s3.put_object(Bucket="plaintext", Key="s", Body=b"x", ServerSideEncryption="AES256"))
    assert code == "NotImplemented", code
    assert code_of(lambda: s3.head_object(Bucket="plaintext", Key="s")) == "404"
    ssec = dict(SSECustomerAlgorithm="AES256", SSECustomerKey=os.urandom(16).hex())
    s3.put_object(Bucket="plaintext", Key="c", Body=b"secret sse-c bytes", **ssec)
    assert s3.get_object(Bucket="plaintext", Key="c", **ssec)["Body"].read() == b"secret sse-c bytes"


def check_stale_uploads(s3):
    """Against a gateway started with --stale-upload-secs 3: an upload left alone goes (its
    parts with it) within a few sweeps; one still receiving parts stays."""
    bucket(s3, "stale")
    left = s3.create_multipart_upload(Bucket="stale", Key="left")["UploadId"]
    s3.upload_part(Bucket="stale", Key="left", UploadId=left, PartNumber=1, Body=b"x" * 1000)
    busy = s3.create_multipart_upload(Bucket="stale", Key="busy")["UploadId"]
    deadline = time.time() + 30
    n = 1
    while True:
        # A part every second keeps the busy one fresh.
        s3.upload_part(Bucket="stale", Key="busy", UploadId=busy, PartNumber=n, Body=b"y" * 10)
        n += 1
        ids = [u["UploadId"] for u in s3.list_multipart_uploads(Bucket="stale").get("Uploads", [])]
        if left not in ids:
            break
        assert time.time() < deadline, "the abandoned upload was not removed"
        time.sleep(1)
    assert busy in ids, ids
    assert code_of(lambda: s3.list_parts(Bucket="stale", Key="left", UploadId=left)) == "NoSuchUpload"


def preflight(bucket, key=None, **headers):
    """An OPTIONS request (unsigned, as browsers send them): (status, headers)."""
    url = f"{ENDPOINT}/{bucket}" + (f"/{key}" if key else "")
    names = {"origin": "Origin", "method": "Access-Control-Request-Method",
             "headers": "Access-Control-Request-Headers"}
    req = urllib.request.Request(url, method="OPTIONS",
                                 headers={names[k]: v for k, v in headers.items()})
    try:
        with urllib.request.urlopen(req) as r:
            return r.status, {k.lower(): v for k, v in r.headers.items()}
    except urllib.error.HTTPError as e:
        return e.code, {k.lower(): v for k, v in e.headers.items()}


def with_origin(s3, origin, call):
    """Runs `call` (one request through `s3`) as a browser page at `origin` would send it;
    returns the answer's headers, an error's too."""
    def add(request, **_):
        request.headers["Origin"] = origin
    s3.meta.events.register_first("before-sign.s3.*", add)
    try:
        return call()["ResponseMetadata"]["HTTPHeaders"]
    except botocore.exceptions.ClientError as e:
        return e.response["ResponseMetadata"]["HTTPHeaders"]
    finally:
        s3.meta.events.unregister("before-sign.s3.*", add)


def check_cors(s3):
    bucket(s3, "cors")
    assert code_of(lambda: s3.get_bucket_cors(Bucket="cors")) == "NoSuchCORSConfiguration"
    # Before any rule, a preflight is refused.
    assert preflight("cors", "k", origin="https://app.example", method="GET")[0] == 403
    rules = [
        {"AllowedMethods": ["GET", "HEAD"], "AllowedOrigins": ["https://*.example"],
         "AllowedHeaders": ["x-amz-meta-*", "range"], "ExposeHeaders": ["ETag"],
         "MaxAgeSeconds": 600, "ID": "app"},
        {"AllowedMethods": ["PUT"], "AllowedOrigins": ["*"]},
    ]
    s3.put_bucket_cors(Bucket="cors", CORSConfiguration={"CORSRules": rules})
    got = s3.get_bucket_cors(Bucket="cors")["CORSRules"]
    assert got[0]["AllowedMethods"] == ["GET", "HEAD"] and got[0]["ID"] == "app", got
    assert got[0]["AllowedHeaders"] == ["x-amz-meta-*", "range"] and got[0]["MaxAgeSeconds"] == 600, got
    assert got[1]["AllowedOrigins"] == ["*"], got
    # The first rule allowing origin, method and headers answers.
    st, h = preflight("cors", "k", origin="https://app.example", method="GET",
                      headers="Range, X-Amz-Meta-Colour")
    assert st == 200, (st, h)
    assert h["access-control-allow-origin"] == "https://app.example", h
    assert h["access-control-allow-methods"] == "GET, HEAD", h
    assert h["access-control-allow-headers"] == "range, x-amz-meta-colour", h
    assert h["access-control-expose-headers"] == "ETag" and h["access-control-max-age"] == "600", h
    st, h = preflight("cors", origin="https://other.org", method="PUT")
    assert st == 200 and h["access-control-allow-origin"] == "*", (st, h)
    # A page's actual (signed) requests carry the headers of the first rule allowing their
    # origin and method, errors too; with no such rule, none.
    s3.put_object(Bucket="cors", Key="k", Body=b"v")
    h = with_origin(s3, "https://app.example", lambda: s3.get_object(Bucket="cors", Key="k"))
    assert h["access-control-allow-origin"] == "https://app.example", h
    assert h["access-control-allow-methods"] == "GET, HEAD", h
    assert h["access-control-expose-headers"] == "ETag", h
    assert h["access-control-allow-credentials"] == "true" and h["vary"] == "Origin", h
    h = with_origin(s3, "https://app.example", lambda: s3.get_object(Bucket="cors", Key="nope"))
    assert h["access-control-allow-origin"] == "https://app.example", h
    h = with_origin(s3, "https://other.org", lambda: s3.put_object(Bucket="cors", Key="k", Body=b"w"))
    assert h["access-control-allow-origin"] == "*" and "access-control-allow-credentials" not in h, h
    for origin, f in [("https://app.evil", lambda: s3.get_object(Bucket="cors", Key="k")),
                      ("https://app.example", lambda: s3.delete_object(Bucket="cors", Key="k"))]:
        h = with_origin(s3, origin, f)
        assert not any(k.startswith("access-control-") for k in h), h
    # Refused: an origin, a method or a header no rule allows; without an origin or a
    # method the request is bad.
    assert preflight("cors", "k", origin="https://app.evil", method="GET")[0] == 403
    assert preflight("cors", "k", origin="https://app.example", method="DELETE")[0] == 403
    assert preflight("cors", "k", origin="https://app.example", method="GET",
                     headers="authorization")[0] == 403
    assert preflight("cors", "k", origin="https://app.example")[0] == 400
    assert preflight("cors", "k")[0] == 400
    assert preflight("no-such-bucket", "k", origin="https://app.example", method="GET")[0] == 403
    # Only the owner sees or changes the rules; bad rules are refused.
    bob = client("BOB")
    assert code_of(lambda: bob.get_bucket_cors(Bucket="cors")) == "AccessDenied"
    assert code_of(lambda: bob.delete_bucket_cors(Bucket="cors")) == "AccessDenied"
    bad = {"CORSRules": [{"AllowedMethods": ["PATCH"], "AllowedOrigins": ["*"]}]}
    assert code_of(lambda: s3.put_bucket_cors(Bucket="cors", CORSConfiguration=bad)) == "InvalidRequest"
    s3.delete_bucket_cors(Bucket="cors")
    assert code_of(lambda: s3.get_bucket_cors(Bucket="cors")) == "NoSuchCORSConfiguration"
    assert preflight("cors", "k", origin="https://app.example", method="GET")[0] == 403


def check_lifecycle(s3):
    """Against a gateway started with --lifecycle-day-secs 2: rules are checked and kept by
    the bucket's owner alone, and carried out: current versions expire by prefix and tag,
    older versions after their noncurrent days, keeping the newest ones asked for, a
    delete marker left alone goes, and so do incomplete uploads; what no rule selects
    stays."""
    bucket(s3, "life")
    assert code_of(lambda: s3.get_bucket_lifecycle_configuration(Bucket="life")) == "NoSuchLifecycleConfiguration"
    put = lambda rules, b="life", who=s3: who.put_bucket_lifecycle_configuration(
        Bucket=b, LifecycleConfiguration={"Rules": rules})
    rule = lambda **kw: {"Status": "Enabled", "Filter": {"Prefix": ""}, **kw}
    for bad in [[rule(ID="x" * 256, Expiration={"Days": 1})],
                [rule(ID="a", Expiration={"Days": 1}), rule(ID="a", Expiration={"Days": 2})],
                [rule(ID="z", Expiration={"Days": 0})],
                [rule(ID="d", Expiration={"Date": datetime.datetime(2030, 1, 1, 12)})]]:
        assert code_of(lambda: put(bad)) == "InvalidArgument", bad
    bob = client("BOB")
    assert code_of(lambda: put([rule(ID="b", Expiration={"Days": 1})], who=bob)) == "AccessDenied"
    for k in ["tmp/a", "tmp/b", "keep/a"]:
        s3.put_object(Bucket="life", Key=k, Body=b"x")
    s3.put_object(Bucket="life", Key="tagged", Body=b"x", Tagging="expire=yes")
    s3.put_object(Bucket="life", Key="untagged", Body=b"x", Tagging="expire=no")
    put([rule(ID="tmp", Filter={"Prefix": "tmp/"}, Expiration={"Days": 1}),
         rule(ID="tag", Filter={"Tag": {"Key": "expire", "Value": "yes"}}, Expiration={"Days": 1})])
    got = s3.get_bucket_lifecycle_configuration(Bucket="life")["Rules"]
    assert [r["ID"] for r in got] == ["tmp", "tag"] and got[0]["Expiration"]["Days"] == 1, got
    # Objects a rule will expire say when, in calendar days (the first midnight UTC a day
    # after their write), and which rule; others say nothing.
    s3.put_object(Bucket="life", Key="tmp/c", Body=b"x")
    h = s3.head_object(Bucket="life", Key="tmp/c")
    exp = h["ResponseMetadata"]["HTTPHeaders"]["x-amz-expiration"]
    written = h["LastModified"].timestamp()
    midnight = (int(written) + 86400 + 86399) // 86400 * 86400
    want = datetime.datetime.fromtimestamp(midnight, datetime.timezone.utc)
    assert exp == f'expiry-date="{want.strftime("%a, %d %b %Y %H:%M:%S GMT")}", rule-id="tmp"', exp
    assert "x-amz-expiration" not in s3.head_object(Bucket="life", Key="keep/a")["ResponseMetadata"]["HTTPHeaders"]
    keys = lambda b="life": sorted(o["Key"] for o in s3.list_objects_v2(Bucket=b).get("Contents", []))
    deadline = time.time() + 30
    while keys() != ["keep/a", "untagged"]:
        assert time.time() < deadline, keys()
        time.sleep(0.5)
    s3.delete_bucket_lifecycle(Bucket="life")
    assert code_of(lambda: s3.get_bucket_lifecycle_configuration(Bucket="life")) == "NoSuchLifecycleConfiguration"
    # Incomplete uploads under the rule's prefix are aborted; others stay.
    ups = {k: s3.create_multipart_upload(Bucket="life", Key=k)["UploadId"] for k in ["mp/a", "other/b"]}
    s3.upload_part(Bucket="life", Key="mp/a", UploadId=ups["mp/a"], PartNumber=1, Body=b"part")
    put([rule(ID="mp", Filter={"Prefix": "mp/"}, AbortIncompleteMultipartUpload={"DaysAfterInitiation": 1})])
    got = s3.get_bucket_lifecycle_configuration(Bucket="life")["Rules"]
    assert got[0]["AbortIncompleteMultipartUpload"] == {"DaysAfterInitiation": 1}, got
    uploads = lambda: sorted(u["Key"] for u in s3.list_multipart_uploads(Bucket="life").get("Uploads", []))
    deadline = time.time() + 30
    while uploads() != ["other/b"]:
        assert time.time() < deadline, uploads()
        time.sleep(0.5)
    s3.abort_multipart_upload(Bucket="life", Key="other/b", UploadId=ups["other/b"])
    s3.delete_bucket_lifecycle(Bucket="life")
    # Versions: the two newest older versions stay, the rest go; a lone marker goes.
    bucket(s3, "lifev")
    s3.put_bucket_versioning(Bucket="lifev", VersioningConfiguration={"Status": "Enabled"})
    ids = [s3.put_object(Bucket="lifev", Key="k", Body=b"%d" % n)["VersionId"] for n in range(5)]
    s3.put_object(Bucket="lifev", Key="gone", Body=b"x")
    s3.delete_object(Bucket="lifev", Key="gone")
    s3.delete_object(Bucket="lifev", Key="gone", VersionId=s3.list_object_versions(
        Bucket="lifev", Prefix="gone")["Versions"][0]["VersionId"])
    put([rule(ID="old", NoncurrentVersionExpiration={"NoncurrentDays": 1, "NewerNoncurrentVersions": 2},
              Expiration={"ExpiredObjectDeleteMarker": True})], b="lifev")
    versions = lambda: s3.list_object_versions(Bucket="lifev")
    deadline = time.time() + 30
    while [v["VersionId"] for v in versions().get("Versions", [])] != ids[:1:-1] or "DeleteMarkers" in versions():
        assert time.time() < deadline, versions()
        time.sleep(0.5)
    assert s3.get_object(Bucket="lifev", Key="k")["Body"].read() == b"4"


def check_tagging(s3):
    """Object tags are kept with the object (set by a PUT, a multipart upload, a copy, or
    alone), counted on GET and HEAD, limited as S3 limits them; bucket tags are the owner's."""
    bucket(s3, "tags")
    tags = lambda **kw: s3.get_object_tagging(Bucket="tags", **kw)["TagSet"]
    s3.put_object(Bucket="tags", Key="t", Body=b"x", Tagging="foo=bar&bar&sp%20ace=a+b")
    assert tags(Key="t") == [{"Key": "bar", "Value": ""}, {"Key": "foo", "Value": "bar"},
                             {"Key": "sp ace", "Value": "a b"}], tags(Key="t")
    assert s3.get_object(Bucket="tags", Key="t")["TagCount"] == 3
    assert s3.head_object(Bucket="tags", Key="t")["ResponseMetadata"]["HTTPHeaders"]["x-amz-tagging-count"] == "3"
    # A copy keeps the source's tags unless told to replace them.
    s3.copy_object(Bucket="tags", Key="c1", CopySource={"Bucket": "tags", "Key": "t"})
    assert len(tags(Key="c1")) == 3
    s3.copy_object(Bucket="tags", Key="c2", CopySource={"Bucket": "tags", "Key": "t"},
                   TaggingDirective="REPLACE", Tagging="only=one")
    assert tags(Key="c2") == [{"Key": "only", "Value": "one"}]
    # Replaced and removed alone; the bytes stay.
    ten = [{"Key": f"k{i}", "Value": "v" * 256} for i in range(10)]
    s3.put_object_tagging(Bucket="tags", Key="t", Tagging={"TagSet": ten})
    assert tags(Key="t") == ten
    for bad in [ten + [{"Key": "k10", "Value": ""}], [{"Key": "k" * 129, "Value": ""}],
                [{"Key": "k", "Value": "v" * 257}]]:
        assert code_of(lambda: s3.put_object_tagging(Bucket="tags", Key="t", Tagging={"TagSet": bad})) == "InvalidTag"
    assert tags(Key="t") == ten
    s3.delete_object_tagging(Bucket="tags", Key="t")
    assert tags(Key="t") == [] and "TagCount" not in s3.get_object(Bucket="tags", Key="t")
    assert s3.get_object(Bucket="tags", Key="t")["Body"].read() == b"x"
    s3.delete_object_tagging(Bucket="tags", Key="t")
    assert code_of(lambda: tags(Key="missing")) == "NoSuchKey"
    # A multipart upload's tags come with its completion.
    u = s3.create_multipart_upload(Bucket="tags", Key="mp", Tagging="a=1")["UploadId"]
    e = s3.upload_part(Bucket="tags", Key="mp", UploadId=u, PartNumber=1, Body=b"p")["ETag"]
    s3.complete_multipart_upload(Bucket="tags", Key="mp", UploadId=u,
                                 MultipartUpload={"Parts": [{"ETag": e, "PartNumber": 1}]})
    assert tags(Key="mp") == [{"Key": "a", "Value": "1"}]
    # Bucket tags: NoSuchTagSet until set, the owner's alone.
    assert code_of(lambda: s3.get_bucket_tagging(Bucket="tags")) == "NoSuchTagSet"
    s3.put_bucket_tagging(Bucket="tags", Tagging={"TagSet": [{"Key": "team", "Value": "storage"}]})
    assert s3.get_bucket_tagging(Bucket="tags")["TagSet"] == [{"Key": "team", "Value": "storage"}]
    s3.put_bucket_acl(Bucket="tags", ACL="public-read-write")
    bob = client("BOB")
    assert code_of(lambda: bob.get_bucket_tagging(Bucket="tags")) == "AccessDenied"
    assert code_of(lambda: bob.put_bucket_tagging(Bucket="tags", Tagging={"TagSet": []})) == "AccessDenied"
    # Another user changes no tags of an object they may not write.
    assert code_of(lambda: bob.put_object_tagging(Bucket="tags", Key="t", Tagging={"TagSet": []})) == "AccessDenied"
    s3.delete_bucket_tagging(Bucket="tags")
    assert code_of(lambda: s3.get_bucket_tagging(Bucket="tags")) == "NoSuchTagSet"
    s3.put_bucket_acl(Bucket="tags", ACL="private")


def check_details(s3):
    """What s3-tests found: a 304 carries the ETag, `aws-chunked` is not kept as a content
    encoding, `Expires` is kept, an object without a type has S3's default, a bucket name
    with a dot beside a dash is refused, a bucket is made only in the gateway's region."""
    bucket(s3, "details")
    etag = s3.put_object(Bucket="details", Key="k", Body=b"v")["ETag"]
    assert s3.get_object(Bucket="details", Key="k")["ContentType"] == "binary/octet-stream"
    for kw in [dict(IfNoneMatch=etag), dict(IfModifiedSince=datetime.datetime(2100, 1, 1))]:
        try:
            s3.get_object(Bucket="details", Key="k", **kw)
            raise AssertionError("no 304")
        except botocore.exceptions.ClientError as e:
            h = e.response["ResponseMetadata"]["HTTPHeaders"]
            assert e.response["Error"]["Code"] == "304" and h["etag"] == etag, e.response
    s3.put_object(Bucket="details", Key="enc", Body=b"x", ContentEncoding="gzip, aws-chunked")
    assert s3.head_object(Bucket="details", Key="enc")["ContentEncoding"] == "gzip"
    s3.put_object(Bucket="details", Key="enc", Body=b"x", ContentEncoding="aws-chunked")
    assert "ContentEncoding" not in s3.head_object(Bucket="details", Key="enc")
    when = datetime.datetime(2030, 5, 6, 7, 8, 9, tzinfo=datetime.timezone.utc)
    s3.put_object(Bucket="details", Key="exp", Body=b"x", Expires=when)
    assert s3.head_object(Bucket="details", Key="exp")["Expires"] == when
    assert s3.get_object(Bucket="details", Key="exp")["Expires"] == when
    for bad in ["a.-b", "a-.b"]:
        assert code_of(lambda: s3.create_bucket(Bucket=bad)) == "InvalidBucketName", bad
    # One region (us-east-1 here): a bucket asked for elsewhere is not made.
    assert s3.get_bucket_location(Bucket="details").get("LocationConstraint") is None
    assert code_of(lambda: s3.create_bucket(Bucket="elsewhere", CreateBucketConfiguration={
        "LocationConstraint": "eu-west-1"})) == "InvalidLocationConstraint"
    assert code_of(lambda: s3.head_bucket(Bucket="elsewhere")) == "404"


def check_stalled_readers(s3):
    """A reader that stops reading a large object's body stalls only its own answer: others
    read the same object at once."""
    bucket(s3, "stall")
    data = rand(24 << 20, 11)
    s3.put_object(Bucket="stall", Key="big", Body=data)
    stalled = s3.get_object(Bucket="stall", Key="big")  # its body is never read
    started = time.monotonic()
    for r in ["bytes=0-999999", "bytes=10000000-10999999", "bytes=23000000-"]:
        lo = int(r[6:].split("-")[0])
        got = s3.get_object(Bucket="stall", Key="big", Range=r)["Body"].read()
        assert got == data[lo:lo + len(got)] and len(got) > 0
    assert time.monotonic() - started < 10, "a stalled reader held the others up"
    stalled["Body"].close()


def check_signatures(s3):
    """Issue 22 §3: a presigned request cannot be turned into another by unsigned headers,
    lives at most 7 days, and SigV2 is refused."""
    bucket(s3, "alices")
    s3.put_object(Bucket="alices", Key="k", Body=b"mine")
    # Alice hands Bob a URL to upload one object; he adds x-amz-copy-source to make the PUT a
    # copy of something Alice can read.
    url = s3.generate_presigned_url("put_object", Params={"Bucket": "alices", "Key": "upload"}, ExpiresIn=300)
    for extra in [{"x-amz-copy-source": "/alices/k"}, {"x-amz-metadata-directive": "REPLACE"},
                  {"x-amz-acl": "public-read"}]:
        req = urllib.request.Request(url, data=b"", method="PUT", headers=extra)
        try:
            urllib.request.urlopen(req)
            assert False, f"a presigned PUT with unsigned {extra} was served"
        except urllib.error.HTTPError as e:
            assert e.code == 403, (extra, e.code)
            assert b"AccessDenied" in e.read()
    assert code_of(lambda: s3.head_object(Bucket="alices", Key="upload")) == "404"
    # Unsigned, it is refused in a header-signed request too (a captured request replayed).
    r = raw_request("PUT", "/alices/upload2", b"", s3, extra={"x-amz-copy-source": "/alices/k"})
    assert r.startswith(b"HTTP/1.1 403") and b"AccessDenied" in r, r[:400]
    assert code_of(lambda: s3.head_object(Bucket="alices", Key="upload2")) == "404"
    # Presigned lifetimes: 7 days at most.
    week = 7 * 24 * 3600
    ok = s3.generate_presigned_url("get_object", Params={"Bucket": "alices", "Key": "k"}, ExpiresIn=week)
    assert urllib.request.urlopen(ok).read() == b"mine"
    long = s3.generate_presigned_url("get_object", Params={"Bucket": "alices", "Key": "k"}, ExpiresIn=week + 1)
    try:
        urllib.request.urlopen(long)
        assert False, "a presigned URL valid for more than 7 days was served"
    except urllib.error.HTTPError as e:
        body = e.read()
        assert e.code in (400, 403) and b"AuthorizationQueryParametersError" in body, (e.code, body)
    # SigV2, in a header and presigned, is refused by default.
    r = sigv2_request("GET", "/alices/k", "ALICE")
    assert r.startswith(b"HTTP/1.1 400") and b"InvalidRequest" in r, r[:400]
    r = sigv2_presigned("GET", "/alices/k", "ALICE", int(time.time()) + 60)
    assert r.startswith(b"HTTP/1.1 400") and b"InvalidRequest" in r, r[:400]


def sigv2_sign(method, path, who, date, content_type=""):
    import base64
    import hmac
    sts = f"{method}\n\n{content_type}\n{date}\n{path}"
    key = os.environ[f"{who}_SECRET"].encode()
    return base64.b64encode(hmac.new(key, sts.encode(), hashlib.sha1).digest()).decode()


def sigv2_request(method, path, who, date=None):
    """A request signed with SigV2 in its Authorization header; the raw reply."""
    from email.utils import formatdate
    date = date or formatdate(usegmt=True)
    sig = sigv2_sign(method, path, who, date)
    head = f"{method} {path} HTTP/1.1\r\nHost: {HOSTPORT}\r\nDate: {date}\r\n" \
           f"Authorization: AWS {os.environ[who + '_KEY']}:{sig}\r\nConnection: close\r\n\r\n"
    return raw_send(head.encode())


def sigv2_presigned(method, path, who, expires):
    import urllib.parse
    sig = sigv2_sign(method, path, who, str(expires))
    q = urllib.parse.urlencode({"AWSAccessKeyId": os.environ[who + "_KEY"], "Expires": expires, "Signature": sig})
    return raw_send(f"{method} {path}?{q} HTTP/1.1\r\nHost: {HOSTPORT}\r\nConnection: close\r\n\r\n".encode())


def raw_send(data, timeout=20):
    host, port = HOSTPORT.split(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        s.sendall(data)
        out = b""
        while True:
            d = s.recv(65536)
            if not d:
                return out
            out += d


def check_request_ids(s3):
    """Every reply names its request, errors in their XML too (the gateway's log has it)."""
    try:
        s3.get_object(Bucket="alices", Key="no-such-key")
        assert False
    except botocore.exceptions.ClientError as e:
        rid = e.response["ResponseMetadata"].get("RequestId")
        assert rid and e.response["Error"].get("RequestId", rid) == rid, e.response
    r = raw_send(f"GET /alices/k HTTP/1.1\r\nHost: {HOSTPORT}\r\nAuthorization: AWS4-HMAC-SHA256 Credential=NASDAAAAAAAAAAAAAAAA/20200101/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=00\r\nx-amz-date: 20200101T000000Z\r\nx-amz-content-sha256: UNSIGNED-PAYLOAD\r\nConnection: close\r\n\r\n".encode())
    assert b"<RequestId>" in r and b"x-amz-request-id" in r.lower(), r[:600]
    r = raw_send(f"GET /alices/k HTTP/1.1\r\nHost: {HOSTPORT}\r\nConnection: close\r\n\r\n".encode())
    assert b"<RequestId>" in r and b"AccessDenied" in r, r[:600]


def check_roundtrip(s3):
    """Puts, reads, lists and deletes, small and streamed: nothing but success (used around a
    password change)."""
    bucket(s3, "roundtrip")
    for k, data in [("small", b"s" * 1000), ("big", rand(3 << 20, 3))]:
        s3.put_object(Bucket="roundtrip", Key=k, Body=data)
        assert s3.get_object(Bucket="roundtrip", Key=k)["Body"].read() == data
    assert [o["Key"] for o in s3.list_objects_v2(Bucket="roundtrip")["Contents"]] == ["big", "small"]
    uid = s3.create_multipart_upload(Bucket="roundtrip", Key="mp")["UploadId"]
    e = s3.upload_part(Bucket="roundtrip", Key="mp", UploadId=uid, PartNumber=1, Body=b"m")["ETag"]
    s3.complete_multipart_upload(Bucket="roundtrip", Key="mp", UploadId=uid,
                                 MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": e}]})
    for k in ["small", "big", "mp"]:
        s3.delete_object(Bucket="roundtrip", Key=k)
    # Errors carry no paths of the namespace.
    r = raw_send(f"GET /roundtrip/none HTTP/1.1\r\nHost: {HOSTPORT}\r\nConnection: close\r\n\r\n".encode())
    assert b"/s3/" not in r, r


def raw_request(method, path, body, s3, extra=None):
    """A signed request with an arbitrary body, sent over a plain socket; `extra` headers are
    added after signing (unsigned)."""
    from botocore.awsrequest import AWSRequest
    from botocore.auth import SigV4Auth
    creds = s3._request_signer._credentials
    req = AWSRequest(method=method, url=ENDPOINT + path, data=body)
    req.headers["x-amz-content-sha256"] = hashlib.sha256(body).hexdigest()
    SigV4Auth(creds, "s3", "us-east-1").add_auth(req)
    host, port = ENDPOINT.split("//")[1].split(":")
    head = f"{method} {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n"
    for k, v in list(req.headers.items()) + list((extra or {}).items()):
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



EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


def hmac256(key, msg):
    import hmac
    return hmac.new(key, msg.encode() if isinstance(msg, str) else msg, hashlib.sha256).digest()


def signing_key(who, date):
    k = hmac256(("AWS4" + os.environ[f"{who}_SECRET"]).encode(), date)
    for part in ["us-east-1", "s3", "aws4_request"]:
        k = hmac256(k, part)
    return k


def chunked_request(path, chunks, who="ALICE", mode="signed", tamper=None, declared=None, trailer=False):
    """An aws-chunked PUT of `chunks` (SigV4 streaming, as the Java and Go SDKs send): the
    request head and the body, each chunk signed in a chain from the seed signature.
    `mode` is "signed" or "unsigned" (STREAMING-UNSIGNED-PAYLOAD-TRAILER); `tamper` flips a
    byte of that chunk after signing; `declared` overrides the first chunk's declared size
    (and stops the body after the first chunk's bytes)."""
    import base64
    import zlib
    now = datetime.datetime.now(datetime.timezone.utc)
    amz_date = now.strftime("%Y%m%dT%H%M%SZ")
    date = amz_date[:8]
    scope = f"{date}/us-east-1/s3/aws4_request"
    key = signing_key(who, date)
    payload = {
        ("signed", False): "STREAMING-AWS4-HMAC-SHA256-PAYLOAD",
        ("signed", True): "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER",
        ("unsigned", True): "STREAMING-UNSIGNED-PAYLOAD-TRAILER",
    }[(mode, trailer)]
    data = b"".join(chunks)
    headers = {"host": HOSTPORT, "x-amz-content-sha256": payload, "x-amz-date": amz_date,
               "x-amz-decoded-content-length": str(declared or len(data))}
    if trailer:
        headers["x-amz-trailer"] = "x-amz-checksum-crc32"
    signed = sorted(headers)
    canonical = f"PUT\n{path}\n\n" + "".join(f"{h}:{headers[h]}\n" for h in signed) + "\n" + \
        ";".join(signed) + "\n" + payload
    sts = f"AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
    prev = hmac256(key, sts).hex()
    auth = f"AWS4-HMAC-SHA256 Credential={os.environ[who + '_KEY']}/{scope}, " \
           f"SignedHeaders={';'.join(signed)}, Signature={prev}"
    body = b""
    for i, c in enumerate(list(chunks) + [b""]):
        size = declared if (declared and i == 0) else len(c)
        if mode == "signed":
            sig = hmac256(key, f"AWS4-HMAC-SHA256-PAYLOAD\n{amz_date}\n{scope}\n{prev}\n{EMPTY_SHA256}\n"
                               f"{hashlib.sha256(c).hexdigest()}").hex()
            prev = sig
            meta = f"{size:x};chunk-signature={sig}\r\n".encode()
        else:
            meta = f"{size:x}\r\n".encode()
        if tamper == i:
            c = bytes([c[0] ^ 1]) + c[1:]
        body += meta + c
        if declared:
            break
        if c or not trailer:
            body += b"\r\n"
    if trailer and not declared:
        crc = base64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode()
        line = f"x-amz-checksum-crc32:{crc}"
        body += line.encode() + b"\r\n"
        if mode == "signed":
            tsig = hmac256(key, f"AWS4-HMAC-SHA256-TRAILER\n{amz_date}\n{scope}\n{prev}\n"
                                f"{hashlib.sha256((line + chr(10)).encode()).hexdigest()}").hex()
            body += f"x-amz-trailer-signature:{tsig}\r\n".encode()
        body += b"\r\n"
    length = len(body) if not declared else declared + 4096
    head = f"PUT {path} HTTP/1.1\r\n" + "".join(f"{h}: {headers[h]}\r\n" for h in signed if h != "host") + \
        f"Host: {HOSTPORT}\r\nAuthorization: {auth}\r\nContent-Length: {length}\r\nConnection: close\r\n\r\n"
    return head.encode(), body


def check_chunked(s3):
    """aws-chunked uploads, signed chunk by chunk, with and without trailers: the bytes
    arrive whole, and a chunk changed in flight fails the upload and leaves nothing."""
    bucket(s3, "chunked")
    chunks = [rand(1 << 20, 21), rand(5 << 20, 22), rand(100, 23)]
    whole = b"".join(chunks)
    for n, (mode, trailer) in enumerate([("signed", False), ("signed", True), ("unsigned", True)]):
        head, body = chunked_request(f"/chunked/ok{n}", chunks, mode=mode, trailer=trailer)
        r = raw_send(head + body, timeout=60)
        assert r.startswith(b"HTTP/1.1 200"), (mode, trailer, r[:600])
        got = s3.get_object(Bucket="chunked", Key=f"ok{n}", ChecksumMode="ENABLED")
        assert got["Body"].read() == whole, (mode, trailer)
    head, body = chunked_request("/chunked/bad", chunks, tamper=1)
    r = raw_send(head + body, timeout=60)
    assert not r.startswith(b"HTTP/1.1 200"), r[:600]
    assert code_of(lambda: s3.head_object(Bucket="chunked", Key="bad")) == "404"


def post_form(fields, file_bytes, boundary="nasdformboundary"):
    parts = b""
    for k, v in fields.items():
        parts += f"--{boundary}\r\nContent-Disposition: form-data; name=\"{k}\"\r\n\r\n{v}\r\n".encode()
    parts += f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"f\"\r\n" \
             f"Content-Type: application/octet-stream\r\n\r\n".encode()
    return parts + file_bytes + f"\r\n--{boundary}--\r\n".encode()


def post_forms(n, mib):
    """`n` anonymous POST object forms at once, each announcing a 1 GiB file and sending
    `mib` MiB of it: each must be refused before its file is read (the old gateway buffered
    them all, waiting for the rest)."""
    import threading
    bucket(client(), "forms")
    boundary = "nasdformboundary"
    head_fields = post_form({"key": "anon/${filename}"}, b"", boundary)
    head_fields = head_fields[: head_fields.rindex(b"\r\n--")]
    refused = [0]
    lock = threading.Lock()

    def one():
        host, port = HOSTPORT.split(":")
        s = socket.create_connection((host, int(port)), timeout=30)
        head = f"POST /forms HTTP/1.1\r\nHost: {HOSTPORT}\r\nContent-Type: multipart/form-data; " \
               f"boundary={boundary}\r\nContent-Length: {1 << 30}\r\n\r\n".encode()
        s.sendall(head + head_fields)

        def feed():
            try:
                block = b"x" * 65536
                for _ in range(mib * 16):
                    s.sendall(block)
            except OSError:
                pass
        t = threading.Thread(target=feed, daemon=True)
        t.start()
        out = b""
        try:
            while b"\r\n\r\n" not in out:
                d = s.recv(65536)
                if not d:
                    break
                out += d
        except (socket.timeout, OSError):
            pass
        if out.startswith(b"HTTP/1.1 403"):
            with lock:
                refused[0] += 1
        s.close()
    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(f"refused {refused[0]} of {n}", flush=True)
    # A signed form is served.
    s3 = client()
    p = s3.generate_presigned_post("forms", "signed/${filename}", ExpiresIn=300)
    body = post_form(p["fields"], b"form bytes")
    r = raw_send(f"POST /forms HTTP/1.1\r\nHost: {HOSTPORT}\r\nContent-Type: multipart/form-data; "
                 f"boundary=nasdformboundary\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
    assert r.split(b"\r\n")[0] in (b"HTTP/1.1 204 No Content", b"HTTP/1.1 200 OK", b"HTTP/1.1 201 Created"), r[:600]
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket="forms")["Contents"]]
    # `${filename}` in the key is the name of the file sent.
    assert keys == ["signed/f"], keys
    assert s3.get_object(Bucket="forms", Key=keys[0])["Body"].read() == b"form bytes"
    # A form its policy's conditions refuse is denied (403), as S3 answers, and stores nothing.
    p = s3.generate_presigned_post("forms", "signed/x", ExpiresIn=300,
                                   Conditions=[["starts-with", "$key", "signed/"]])
    body = post_form({**p["fields"], "key": "elsewhere/x"}, b"refused")
    r = raw_send(f"POST /forms HTTP/1.1\r\nHost: {HOSTPORT}\r\nContent-Type: multipart/form-data; "
                 f"boundary=nasdformboundary\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
    assert r.startswith(b"HTTP/1.1 403") and b"<Code>AccessDenied</Code>" in r, r[:600]
    assert [o["Key"] for o in s3.list_objects_v2(Bucket="forms")["Contents"]] == ["signed/f"]
    print("signed form ok", flush=True)


def chunked_hold(mib):
    """Starts an aws-chunked PUT whose one chunk is declared 1 GiB, sends `mib` MiB of it,
    says so, and holds the connection open until stdin has a line."""
    bucket(client(), "held")
    head, body = chunked_request("/held/big", [b"y" * (mib << 20)], declared=1 << 30)
    host, port = HOSTPORT.split(":")
    with socket.create_connection((host, int(port)), timeout=120) as s:
        s.sendall(head + body)
        print("sent", flush=True)
        sys.stdin.readline()


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
        check_request_ids(s3)
        print("request ids ok")
        check_private(s3)
        print("private ok")
        check_acls(s3)
        print("acls ok")
        check_public_access_block(s3)
        print("public access block ok")
        check_unsupported(s3)
        print("unsupported ok")
        check_encryption(s3)
        print("encryption ok")
        check_versioning(s3)
        print("versioning ok")
        check_signatures(s3)
        print("signatures ok")
        check_chunked(s3)
        print("chunked ok")
        check_tagging(s3)
        print("tagging ok")
        check_stalled_readers(s3)
        print("stalled readers ok")
        check_details(s3)
        print("details ok")
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
    elif what == "only":
        globals()[f"check_{sys.argv[2]}"](s3)
        print(f"{sys.argv[2]} ok")
    elif what == "roundtrip":
        check_roundtrip(s3)
        print("roundtrip ok")
    elif what == "post-forms":
        post_forms(int(sys.argv[2]), int(sys.argv[3]))
    elif what == "chunked-hold":
        chunked_hold(int(sys.argv[2]))
    elif what == "sigv2-allowed":
        # With --sigv2: a fresh request is served, one whose Date is 20 minutes old is not.
        from email.utils import formatdate
        r = sigv2_request("GET", "/rt2/k", "ALICE")
        assert r.startswith(b"HTTP/1.1 200") and r.endswith(b"v2"), r[:400]
        r = sigv2_request("GET", "/rt2/k", "ALICE", formatdate(time.time() - 1200, usegmt=True))
        assert b"RequestTimeTooSkewed" in r, r[:400]
        r = sigv2_presigned("GET", "/rt2/k", "ALICE", int(time.time()) + 8 * 24 * 3600)
        assert b"AuthorizationQueryParametersError" in r, r[:400]
        r = sigv2_presigned("GET", "/rt2/k", "ALICE", int(time.time()) + 60)
        assert r.startswith(b"HTTP/1.1 200") and r.endswith(b"v2"), r[:400]
        print("sigv2 ok")
    else:
        sys.exit(f"unknown command {what}")


if __name__ == "__main__":
    main()
