"""Small PUTs (4 KiB, or argv[1] bytes) overwriting one key, and GETs of it, through an S3
gateway: in an unversioned bucket and in a versioned one, interleaved in each round (ROUNDS,
default 5, of N requests each, default 200); prints requests per second, medians, and the
versioned bucket's ratio to the plain one. Environment: S3_ENDPOINT, KEY, SECRET
(docs/performance.md, "What versioning costs")."""
import os, sys, time, statistics, boto3
from botocore.config import Config
s3 = boto3.client("s3", endpoint_url=os.environ["S3_ENDPOINT"], aws_access_key_id=os.environ["KEY"],
                  aws_secret_access_key=os.environ["SECRET"], region_name="us-east-1",
                  config=Config(s3={"addressing_style": "path"}, signature_version="s3v4"))
for b in ("bench-plain", "bench-versioned"):
    try:
        s3.create_bucket(Bucket=b)
    except Exception:
        pass
s3.put_bucket_versioning(Bucket="bench-versioned", VersioningConfiguration={"Status": "Enabled"})
size = int(sys.argv[1]) if len(sys.argv) > 1 else 4096
n = int(os.environ.get("N", "200"))
data = os.urandom(size)
res = {(b, op): [] for b in ("bench-plain", "bench-versioned") for op in ("put", "get")}
for r in range(int(os.environ.get("ROUNDS", "5"))):
    for b in ("bench-plain", "bench-versioned"):
        t = time.time()
        for _ in range(n):
            s3.put_object(Bucket=b, Key="k", Body=data)
        res[(b, "put")].append(n / (time.time() - t))
        t = time.time()
        for _ in range(n):
            s3.get_object(Bucket=b, Key="k")["Body"].read()
        res[(b, "get")].append(n / (time.time() - t))
for op in ("put", "get"):
    base = statistics.median(res[("bench-plain", op)])
    for b in ("bench-plain", "bench-versioned"):
        v = statistics.median(res[(b, op)])
        print(f"{op} {b:16} {v:8.1f} req/s  {v / base:.2f}x plain  rounds {[round(x) for x in res[(b, op)]]}")
