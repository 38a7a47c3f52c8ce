"""PUT and GET of one object (64 MiB, or argv[1] bytes) through an S3 gateway: plain, SSE-S3
and SSE-C, interleaved in each round (ROUNDS, default 3); prints MB/s medians and ratios to
plain. Environment: S3_ENDPOINT, KEY, SECRET (docs/performance.md, "What server-side
encryption costs")."""
import os, sys, time, statistics, boto3
from botocore.config import Config
s3 = boto3.client("s3", endpoint_url=os.environ["S3_ENDPOINT"], aws_access_key_id=os.environ["KEY"],
                  aws_secret_access_key=os.environ["SECRET"], region_name="us-east-1",
                  config=Config(s3={"addressing_style": "path"}, signature_version="s3v4"))
try:
    s3.create_bucket(Bucket="bench")
except Exception:
    pass
size = int(sys.argv[1]) if len(sys.argv) > 1 else 64 << 20
data = os.urandom(size)
key = os.urandom(16).hex()
modes = {"plain": {}, "sse-s3": {"ServerSideEncryption": "AES256"},
         "sse-c": {"SSECustomerAlgorithm": "AES256", "SSECustomerKey": key}}
get_args = {"plain": {}, "sse-s3": {}, "sse-c": {"SSECustomerAlgorithm": "AES256", "SSECustomerKey": key}}
res = {(m, op): [] for m in modes for op in ("put", "get")}
for r in range(int(os.environ.get("ROUNDS", "3"))):
    for m, a in modes.items():
        t = time.time(); s3.put_object(Bucket="bench", Key=m, Body=data, **a); res[(m, "put")].append(size / (time.time() - t) / 1e6)
        t = time.time(); b = s3.get_object(Bucket="bench", Key=m, **get_args[m])["Body"].read(); res[(m, "get")].append(size / (time.time() - t) / 1e6)
        assert b == data
for op in ("put", "get"):
    base = statistics.median(res[("plain", op)])
    for m in modes:
        v = statistics.median(res[(m, op)])
        print(f"{op} {m:7} {v:8.1f} MB/s  {v / base:.2f}x plain  rounds {[round(x) for x in res[(m, op)]]}")
